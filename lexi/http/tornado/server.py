"""Starting the server: check what can be checked, listen, then load the model in the background.

The order is the contract: a bad model file or chat template is refused before the port is opened
(the process exits non-zero and nothing ever listened); once listening, /health says 503 until the
engine is ready, and a load failure stops the process with the reason. SIGTERM or SIGINT drains
(lexi.http.ops.drain): new generation requests and /health get 503, running ones have --shutdown-timeout
seconds to finish, the rest are stopped with an error the client can read, and the process exits 0.
A second signal stops the running requests at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import sys

import tornado.httpserver
import tornado.netutil

from lexi.engine.config import EngineConfig
from lexi.http.ops.config import SamplingDefaults, ServerConfig
from lexi.http.ops.heap_trim import HeapTrimming
from lexi.http.state import load_in_background, prepare_state
from lexi.http.tornado.app import make_app

log = logging.getLogger(__name__)
_MAX_STREAMED_BODY = 1 << 30  # the app enforces ServerConfig.max_body_bytes itself, with a 413


def serve(config: ServerConfig, sampling: SamplingDefaults, engine_config: EngineConfig, load_config) -> int:
    """Run until SIGINT/SIGTERM; returns the exit status. Startup refusals raise before anything listens.

    `load_config` may be a callable returning the LoadConfig, so that torch (which the loader imports)
    is only imported once the model file and template have passed their checks.
    """
    state, gguf_file = prepare_state(config, sampling, engine_config)
    if callable(load_config):
        load_config = load_config()
    return asyncio.run(_serve(state, gguf_file, load_config))


async def _serve(state, gguf_file, load_config) -> int:
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    status = {"code": 0, "signal": ""}

    def loaded(error: str | None) -> None:
        if error is None:
            print(f"lexi-engine: model {state.names.public_id} ready", flush=True)
            return
        print(f"lexi-engine: the model failed to load: {error}", file=sys.stderr, flush=True)
        status["code"] = 1
        try:
            loop.call_soon_threadsafe(stopped.set)
        except RuntimeError:  # the loop already ended (a signal came first)
            pass

    def on_signal(sig: signal.Signals) -> None:
        if state.drain.draining:
            print(f"lexi-engine: {sig.name} again: stopping the running requests now", flush=True)
            state.drain.hurry()
            return
        state.drain.begin()
        status["signal"] = sig.name
        stopped.set()

    # before the port opens: a signal that comes as soon as it is open must drain, not kill the process
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    server = tornado.httpserver.HTTPServer(make_app(state), max_body_size=_MAX_STREAMED_BODY, xheaders=False)
    sockets = _bind(state.config.host, state.config.port)
    server.add_sockets(sockets)
    port = sockets[0].getsockname()[1]
    where = f"http://{url_host(state.config.host)}:{port}"
    print(f"lexi-engine: listening on {where} (model {state.names.public_id})", flush=True)
    load_in_background(state, gguf_file, load_config, loaded)
    trimming = HeapTrimming()
    trimming.start()
    await stopped.wait()
    trimming.stop()
    if status["signal"]:
        await _drain(state, status["signal"])
    server.stop()
    with contextlib.suppress(TimeoutError):  # idle keep-alive connections; nothing is running any more
        await asyncio.wait_for(server.close_all_connections(), 5.0)
    if state.runtime is not None:
        await loop.run_in_executor(None, state.runtime.engine.shutdown)
    print("lexi-engine: stopped", flush=True)
    return status["code"]


class ListenError(Exception):
    """The server cannot listen where it was told; `option` (--host or --port) is the one to change."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option, self.message = option, message


def _bind(host: str, port: int) -> list[socket.socket]:
    try:
        return tornado.netutil.bind_sockets(port, host)
    except socket.gaierror as exc:
        raise ListenError("--host", f"{host!r} does not resolve to an address: {exc.strerror}") from None
    except OSError as exc:
        option = "--host" if exc.errno == errno.EADDRNOTAVAIL else "--port"
        raise ListenError(option, f"cannot listen on {url_host(host)}:{port}: {exc.strerror}") from None


def url_host(host: str) -> str:
    """A host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


async def _drain(state, signal_name: str) -> None:
    """Let running requests finish within --shutdown-timeout, then stop the rest with an error they report."""
    drain, timeout = state.drain, state.config.shutdown_timeout
    print(
        f"lexi-engine: {signal_name}: shutting down; new requests get 503; "
        f"{len(drain)} running request(s) have up to {timeout:g} s to finish",
        flush=True,
    )
    if await drain.wait(timeout):
        return
    count = await drain.stop_all()
    print(f"lexi-engine: stopped {count} request(s) still running", flush=True)
