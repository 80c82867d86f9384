"""Scale-out: the same routes on N replicas behind Ray Serve (`lexi-engine serve --replicas N`, N > 1).

Ray Serve is the router: it runs the replicas, places each request on one, restarts a replica that dies,
and spreads unchanged over a Ray cluster. Two deployments make one application:

- `LexiReplica` (N of them): the model loaded once and its own engine with --parallel slots. Ray gives
  each at most --parallel requests at once (`max_ongoing_requests`, which Ray enforces strictly: a replica
  that is full turns a request away and Ray places it on another), so a request never waits on a busy
  replica while another has a free slot.
- `LexiIngress` (one, no CPU of its own): receives Ray Serve's Starlette requests and adapts them to
  lexi.http.routes. It answers what needs no model (/health, /metrics, /v1/models, CORS preflights,
  unknown routes) itself and forwards the rest to a replica. It also keeps --queue-wait and the 429 of one
  server over the whole deployment: a generation request takes one of the N x --parallel slots, or waits
  up to --queue-wait for one, or is answered 429 `inference_busy` in OpenAI's shape.

/health and /metrics speak for every replica: each reports to a small `Board` actor (created by the
command) every `REPORT_S` seconds once its model is loaded; /health is 200 once every replica has, and
/metrics merges every replica's series with a `replica` label. A replica that dies mid-request fails that
request with an error the client can read (a 503 body, or a last error frame on a stream), and Ray starts
another. Only this module imports Ray or Starlette, and only `serve --replicas N` imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import ray
from ray import serve
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response, StreamingResponse

from lexi.engine.config import EngineConfig
from lexi.http.auth import bearer_token, key_matches
from lexi.http.config import SamplingDefaults, ServerConfig
from lexi.http.errors import ApiError
from lexi.http.exchange import Headers, Reply, Request
from lexi.http.logs import REQUEST_ID_HEADER, configure_logging, log_access
from lexi.http.metrics import merge_expositions
from lexi.http.routes import open_route
from lexi.http.routes.base import GenerationRoute, Route
from lexi.http.sse import frame
from lexi.http.state import ServerState, load_in_background, prepare_state

log = logging.getLogger(__name__)

APP_NAME = "lexi"
REPORT_S = 1.0  # how often a loaded replica reports its metrics to the board
STALE_S = 5.0  # a replica silent this long is taken for gone (killed, or restarting)
REPLICA_HEADER = "X-Lexi-Replica"  # which replica answered: the id its /metrics series carry
INGRESS = "ingress"  # the `replica` label of the ingress's own series


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """What every replica is built from: the same configs as one server, plus its share of the machine."""

    config: ServerConfig
    sampling: SamplingDefaults
    engine_config: EngineConfig
    dtype: str  # --dtype
    device: str  # cpu or cuda, decided by the command from the cluster's resources
    replicas: int  # --replicas: how many must be ready for /health to say 200
    board: str  # the Board actor's name


@ray.remote(num_cpus=0)
class Board:
    """The replicas' latest metrics (a replica reports once loaded), and load failures, by replica id."""

    def __init__(self) -> None:
        self._reports: dict[str, tuple[float, bytes]] = {}
        self._failures: dict[str, str] = {}

    def report(self, replica: str, exposition: bytes) -> None:
        self._reports[replica] = (time.monotonic(), exposition)

    def failed(self, replica: str, error: str) -> None:
        self._failures[replica] = error

    def failures(self) -> dict[str, str]:
        return dict(self._failures)

    def live(self) -> dict[str, bytes]:
        """The loaded replicas heard from within STALE_S, and their expositions."""
        now = time.monotonic()
        self._reports = {k: v for k, v in self._reports.items() if now - v[0] <= STALE_S}
        return {k: v[1] for k, v in self._reports.items()}


class Cluster:
    """What /health and /metrics ask of the deployment (ServerState.cluster on the ingress)."""

    def __init__(self, wanted: int, board) -> None:
        self.wanted = wanted
        self.board = board
        self._live: tuple[float, dict[str, bytes]] = (0.0, {})

    async def live(self, max_age: float = 0.0) -> dict[str, bytes]:
        if time.monotonic() - self._live[0] > max_age:
            self._live = (time.monotonic(), await self.board.live.remote())
        return self._live[1]

    async def unready(self) -> str | None:
        """Why not every replica is ready, or None."""
        ready = len(await self.live())
        return None if ready >= self.wanted else f"{ready} of {self.wanted} replicas are ready"

    async def exposition(self, own: bytes) -> bytes:
        reports = {k: v.decode("utf-8") for k, v in sorted((await self.live()).items())}
        return merge_expositions({**reports, INGRESS: own.decode("utf-8")})


class Admission:
    """The deployment's slots (--parallel on each live replica): a generation request takes one, or waits
    up to --queue-wait for one (woken in arrival order), then is answered 429, as on one server."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.busy = 0
        self._changed = asyncio.Event()

    async def acquire(self, capacity) -> bool:
        """`await capacity()` says how many slots there are now (replicas come and go)."""
        deadline = time.monotonic() + self.wait
        while True:
            slots = await capacity()
            if self.busy < slots:  # no await between this check and the increment
                self.busy += 1
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):  # also every REPORT_S: a replica that came back adds slots
                await asyncio.wait_for(self._changed.wait(), min(left, REPORT_S))

    def release(self) -> None:
        self.busy -= 1
        self._changed.set()


def _busy() -> ApiError:
    return ApiError(
        429,
        "all inference slots are busy: every replica's --parallel slots are in use",
        type="inference_busy",
        code="inference_busy",
    )


def _replica_gone(exc: BaseException) -> ApiError:
    return ApiError(
        503,
        f"the replica serving this request stopped before it finished ({type(exc).__name__}); "
        "Ray Serve is starting another, retry the request",
        type="server_error",
        code="replica_failed",
    )


def _access(route: Route, request: Request, status: int) -> None:
    route.done(status)
    log_access(
        request_id=route.request_id,
        method=request.method,
        path=request.path,
        remote_ip=request.remote_ip,
        route=route.route,
        status=status,
        latency_s=time.monotonic() - request.received,
        tokens=route.access_tokens,
    )


class LexiReplica:
    """One replica: the model loaded once, its own engine; `answer(request)` runs a route on it.

    The constructor returns at once and the model loads on a thread, as on one server (a request that
    reaches a replica still loading is answered 503 `model_loading`); the replica reports to the board,
    and so counts as ready, once its model is in memory.
    """

    def __init__(self, settings: ReplicaSettings) -> None:
        configure_logging(settings.config.log_format)
        self.replica = serve.get_replica_context().replica_id.unique_id
        state, gguf_file = prepare_state(settings.config, settings.sampling, settings.engine_config)
        self.board = ray.get_actor(settings.board, namespace=ray.get_runtime_context().namespace)
        state.metrics.replica_info(self.replica, os.getpid())
        self.state = state
        self._stop = threading.Event()

        def load() -> None:  # torch is imported here, off the constructor; its threads come from OMP_NUM_THREADS
            from lexi.model.loader import LoadConfig

            config = LoadConfig(dtype=settings.dtype, device=settings.device)
            load_in_background(state, gguf_file, config, self._loaded)

        threading.Thread(target=load, name="lexi-load-config", daemon=True).start()

    def _loaded(self, error: str | None) -> None:
        if error is not None:
            self.board.failed.remote(self.replica, error)
            return
        log.info("replica %s (pid %d) ready", self.replica, os.getpid())
        threading.Thread(target=self._report, name="lexi-report", daemon=True).start()

    def _report(self) -> None:
        while True:
            try:
                self.board.report.remote(self.replica, self.state.metrics.exposition())
            except Exception:  # the board went away: the service is shutting down
                log.debug("metrics report failed", exc_info=True)
            if self._stop.wait(REPORT_S):
                return

    def check_health(self) -> None:
        """Ray Serve's periodic check: a replica whose model failed to load or whose engine died is replaced."""
        if self.state.load_error is not None:
            raise RuntimeError(f"the model failed to load: {self.state.load_error}")
        if self.state.runtime is not None and not self.state.runtime.engine.alive:
            raise RuntimeError("the engine's step loop has stopped")

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()

    async def answer(self, request: Request) -> AsyncIterator[Any]:
        """First (status, headers, body, streamed), then the stream's frames. Cancelled (the client went
        away, and the ingress cancels the call): the route's generation is aborted."""
        route = open_route(self.state, request)
        status, finished = 499, False  # 499: the client closed the request before it was answered
        try:
            reply = await route.run()
            status = reply.status
            headers = {**reply.headers, REPLICA_HEADER: self.replica}
            finished = reply.frames is None  # a whole answer is over once it is handed back
            yield reply.status, headers, reply.body, reply.frames is not None
            if reply.frames is not None:
                async for data in reply.frames:
                    yield data
                finished = True
        finally:
            if not finished:
                route.client_closed()
            _access(route, request, status if finished else 499)


class LexiIngress:
    """Ray Serve's HTTP entry: Starlette in, lexi.http.routes out; admission over the whole deployment."""

    def __init__(self, settings: ReplicaSettings, replicas) -> None:
        configure_logging(settings.config.log_format)
        self.state: ServerState
        self.state, _ = prepare_state(settings.config, settings.sampling, settings.engine_config)
        board = ray.get_actor(settings.board, namespace=ray.get_runtime_context().namespace)
        self.cluster = self.state.cluster = Cluster(settings.replicas, board)
        self.replicas = replicas.options(stream=True)
        self.admission = Admission(settings.engine_config.queue_wait)
        self.slots = settings.engine_config.parallel

    async def _capacity(self) -> int:
        return self.slots * len(await self.cluster.live(max_age=REPORT_S))

    def _authorized(self, request: Request) -> bool:
        keys = self.state.config.api_keys
        return not keys or key_matches(bearer_token(request.headers.get("Authorization")), keys)

    async def __call__(self, http: StarletteRequest) -> Response:
        received = time.monotonic()
        body = await http.body()
        raw_path = http.scope.get("raw_path") or http.url.path.encode()
        request = Request(
            method=http.method,
            path=raw_path.decode("latin-1"),
            headers=Headers((k.decode("latin-1"), v.decode("latin-1")) for k, v in http.headers.raw),
            body=body[: self.state.config.max_body_bytes],
            body_size=len(body),
            remote_ip=http.client.host if http.client else None,
            received=received,
        )
        route = open_route(self.state, request)
        if request.method == "OPTIONS" or not route.needs_model or not self._authorized(request):
            reply = await route.run()  # nothing a model is needed for (a keyless caller is answered 401 here)
            _access(route, request, reply.status)
            return _response(reply, request, route)
        slot = isinstance(route, GenerationRoute) and request.method == "POST"
        if slot and not await self.admission.acquire(self._capacity):
            reply = route.error_reply(_busy())
            reply.headers = {**route.common_headers(), **reply.headers}
            _access(route, request, reply.status)
            return _response(reply, request, route)
        try:
            return await self._forward(route, request, slot)
        except BaseException:
            if slot:
                self.admission.release()
            raise

    async def _forward(self, route: Route, request: Request, slot: bool) -> Response:
        """The request run on a replica. A stream owns the slot from here and releases it when it ends."""
        answer = self.replicas.answer.remote(request)
        try:
            status, headers, body, streamed = await anext(answer)
        except asyncio.CancelledError:  # the client went away first: the call is cancelled on its replica
            answer.cancel()
            raise
        except Exception as exc:  # the replica died before it answered
            log.warning("replica failed before answering %s %s: %r", request.method, request.path, exc)
            error = route.error_reply(_replica_gone(exc))
            status, body, streamed = error.status, error.body, False
            headers = {**route.common_headers(), **error.headers}
            _access(route, request, status)
        if not streamed:
            with contextlib.suppress(Exception):
                async for _ in answer:  # lets the replica's call end (and log) normally
                    pass
            if slot:
                self.admission.release()
            return _response(Reply(status, headers, body), request, route)

        async def frames() -> AsyncIterator[bytes]:
            over = False
            try:
                yield b""  # started here, so that a stream never iterated still ends its call when collected
                async for data in answer:
                    yield data
                over = True
            except Exception as exc:  # the replica died mid-stream: say so in the stream's own terms
                log.warning("replica failed mid-stream on %s: %r", request.path, exc)
                over = True
                yield frame(_replica_gone(exc).body())
            finally:
                if not over:  # the client hung up: the call is cancelled and the replica aborts the generation
                    answer.cancel()
                if slot:
                    self.admission.release()

        stream = frames()
        await anext(stream)
        return StreamingResponse(stream, status_code=status, headers=_headers(headers, request, route))


def _headers(headers: dict[str, str], request: Request, route: Route) -> dict[str, str]:
    if request.headers.get(REQUEST_ID_HEADER) == route.request_id:  # Ray's proxy passed the id in and
        headers = {k: v for k, v in headers.items() if k != REQUEST_ID_HEADER}  # writes it on the answer
    return headers


def _response(reply: Reply, request: Request, route: Route) -> Response:
    return Response(reply.body, status_code=reply.status, headers=_headers(reply.headers, request, route))


def _share(cores: int | None, replicas: int) -> int:
    """A replica's CPUs (and torch threads) on a CPU cluster: an equal share of the cluster's, at least one."""
    return max(1, (cores or os.cpu_count() or 1) // replicas)


def serve_replicas(
    config: ServerConfig,
    sampling: SamplingDefaults,
    engine_config: EngineConfig,
    load: dict[str, str],
    replicas: int,
    ray_address: str | None,
) -> int:
    """Check what one server checks, start or join Ray, deploy the replicas, serve until SIGINT/SIGTERM.

    Raises (ChatTemplateError, GGUFError) before Ray starts on a bad model file or template.
    """
    state, _ = prepare_state(config, sampling, engine_config)  # the same refusals as one server, before Ray
    stopped = threading.Event()  # from here on a signal stops the service cleanly, Ray's processes included
    _on_signals(stopped)
    temp_dir = None
    if ray_address is None:
        temp_dir = tempfile.mkdtemp(prefix="ray-lexi-")
        ray.init(_temp_dir=temp_dir, include_dashboard=False, namespace=APP_NAME, log_to_driver=True)
    else:
        ray.init(address=ray_address, namespace=APP_NAME, log_to_driver=True)
    _on_signals(stopped)  # again: ray.init installs its own SIGTERM handler, which would exit 15 at once
    try:
        resources = ray.cluster_resources()
        gpus = load["device"] == "cuda" or (load["device"] == "auto" and resources.get("GPU", 0) >= 1)
        threads = _share(int(resources.get("CPU", 0)) or None, replicas)
        actor_options: dict[str, Any] = {
            "num_cpus": 1 if gpus else threads,
            "runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}},
        }
        if gpus:
            actor_options["num_gpus"] = 1
        board_name = f"lexi-board-{os.getpid()}"
        board = Board.options(name=board_name).remote()
        device = "cuda" if gpus else "cpu"
        settings = ReplicaSettings(config, sampling, engine_config, load["dtype"], device, replicas, board_name)
        quiet = {"enable_access_log": False}  # the routes write one access line per request
        model = serve.deployment(
            LexiReplica,
            name="LexiReplica",
            num_replicas=replicas,
            max_ongoing_requests=engine_config.parallel,
            ray_actor_options=actor_options,
            graceful_shutdown_timeout_s=config.shutdown_timeout,
            health_check_period_s=5.0,
            logging_config=quiet,
        )
        ingress = serve.deployment(
            LexiIngress,
            name="LexiIngress",
            num_replicas=1,
            max_ongoing_requests=100_000,  # it only waits: admission is its own (Admission)
            ray_actor_options={"num_cpus": 0},
            graceful_shutdown_timeout_s=config.shutdown_timeout,
            logging_config=quiet,
        )
        serve.start(http_options={"host": config.host, "port": config.port})
        where = f"http://{config.host}:{config.port}"
        share = "1 GPU" if gpus else f"{threads} CPU thread(s)"
        print(f"lexi-engine: {replicas} replicas of {state.names.public_id} on Ray Serve ({share} each)", flush=True)
        serve.run(ingress.bind(settings, model.bind(settings)), name=APP_NAME, route_prefix="/")
        print(f"lexi-engine: listening on {where} (model {state.names.public_id})", flush=True)
        code = _watch(board, replicas, stopped)
        print("lexi-engine: shutting down the replicas", flush=True)
        serve.shutdown()
    finally:
        ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    print("lexi-engine: stopped", flush=True)
    return code


def _on_signals(stopped: threading.Event) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())


def _watch(board, replicas: int, stopped: threading.Event) -> int:
    """Until `stopped` (SIGINT/SIGTERM): say when every replica is ready; a replica whose model failed to load
    stops the service (exit status 1, as one server does) rather than have Ray restart it in a loop."""
    ready = False
    while not stopped.wait(0.5):
        if ready:
            continue
        failures = ray.get(board.failures.remote())
        if failures:
            error = next(iter(failures.values()))
            print(f"lexi-engine: the model failed to load on a replica: {error}", file=sys.stderr, flush=True)
            return 1
        if len(ray.get(board.live.remote())) >= replicas:
            print(f"lexi-engine: {replicas} replicas ready", flush=True)
            ready = True
    return 0
