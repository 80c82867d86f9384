"""The two Ray Serve deployments: `LexiReplica` (the model and its engine) and `LexiIngress` (HTTP in).

This is the Ray Serve transport adapter: the only module that sees Starlette. See lexi.http.ray_serve.serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
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
from lexi.http.errors import ApiError
from lexi.http.exchange import Headers, Reply, Request
from lexi.http.generation.route import GenerationRoute
from lexi.http.ops.config import SamplingDefaults, ServerConfig
from lexi.http.ops.heap_trim import HeapTrimming
from lexi.http.ops.logs import REQUEST_ID_HEADER, configure_logging, log_access
from lexi.http.ray_serve.board import REPORT_S, Admission, Cluster
from lexi.http.ray_serve.store import RemoteResponses
from lexi.http.route import Route
from lexi.http.routes import open_route
from lexi.http.state import ServerState, load_in_background, prepare_state

log = logging.getLogger(__name__)

REPLICA_HEADER = "X-Lexi-Replica"  # which replica answered: the id its /metrics series carry


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
    deterministic: bool  # --deterministic
    kernels: str  # --kernels
    activations: str = "int16"  # --activations
    responses: str = ""  # the stored Responses' actor's name (lexi.http.ray_serve.store); "" keeps a store per process


def _share_responses(state: ServerState, settings: ReplicaSettings) -> None:
    """The one store every process reads and writes (a continuation may reach any replica)."""
    if settings.responses:
        actor = ray.get_actor(settings.responses, namespace=ray.get_runtime_context().namespace)
        state.responses = RemoteResponses(actor)


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
        drafts=route.access_drafts,
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
        _share_responses(state, settings)
        state.metrics.replica_info(self.replica, os.getpid())
        self.state = state
        self._stop = threading.Event()
        self._trimming = HeapTrimming()  # the engine's garbage is freed in this process: trim here, as serve does
        self._trimming.start()

        def load() -> None:  # torch is imported here, off the constructor; its threads come from OMP_NUM_THREADS
            from lexi.model.loader import LoadConfig

            config = LoadConfig(
                dtype=settings.dtype,
                device=settings.device,
                deterministic=settings.deterministic,
                kernels=settings.kernels,
                activations=settings.activations,
            )
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
        trimming = getattr(self, "_trimming", None)
        if trimming is not None:
            trimming.stop()

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
        _share_responses(self.state, settings)
        board = ray.get_actor(settings.board, namespace=ray.get_runtime_context().namespace)
        self.cluster = self.state.cluster = Cluster(settings.replicas, board)
        self.replicas = replicas.options(stream=True)
        self.admission = Admission(settings.engine_config.queue_wait)
        self.slots = settings.engine_config.parallel

    async def _capacity(self) -> int:
        return self.slots * len(await self.cluster.live(max_age=REPORT_S))

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
        if request.method == "OPTIONS" or not route.needs_model or not route.authorized():
            reply = await route.run()  # nothing a model is needed for (a keyless caller is answered 401 here)
            _access(route, request, reply.status)
            return _response(reply, request, route)
        slot = isinstance(route, GenerationRoute) and request.method == "POST"
        if slot and not await self.cluster.live(max_age=REPORT_S):
            return self._refuse(route, request, ApiError(503, "the model is loading", code="model_loading"))
        if slot and not await self.admission.acquire(self._capacity):
            return self._refuse(route, request, _busy())
        try:
            return await self._forward(route, request, slot)
        except BaseException:
            if slot:
                self.admission.release()
            raise

    def _refuse(self, route: Route, request: Request, error: ApiError) -> Response:
        reply = route.error_reply(error)
        reply.headers = {**route.common_headers(), **reply.headers}
        _access(route, request, reply.status)
        return _response(reply, request, route)

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
                yield route.error_frame(_replica_gone(exc))
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
