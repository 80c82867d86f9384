"""What every route shares: the body read with a size limit, auth, the 503 while loading, errors, metrics,
the request id, CORS headers and preflights, and the drain on shutdown."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import tornado.web
from tornado.iostream import StreamClosedError

from lexi.chat.constraint import TurnConstraint
from lexi.chat.constraint_plan import ConstraintError
from lexi.chat.prompt import ChatTurn
from lexi.http.auth import bearer_token, key_matches
from lexi.http.cors import CorsPolicy
from lexi.http.drain import StoppableStream, shutting_down
from lexi.http.engine_stream import EngineStream
from lexi.http.errors import ApiError, bad_request, status_error
from lexi.http.logs import REQUEST_ID_HEADER, pick_request_id
from lexi.http.protocol import parse_json_body
from lexi.http.state import ServerState

log = logging.getLogger(__name__)


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    route = "other"  # the metrics label
    requires_auth = True
    needs_model = True  # answered 503 until the model has loaded

    def initialize(self, state: ServerState) -> None:
        self.state = state
        self._chunks: list[bytes] = []
        self._size = 0
        self.received = time.monotonic()
        self.tokens: tuple[int, int] | None = None  # (prompt, completion) of a finished generation

    @property
    def access_tokens(self) -> tuple[int, int] | None:
        """(prompt, completion) tokens for the access log; None when the route generates nothing."""
        return self.tokens

    @property
    def request_id(self) -> str:
        """The client's X-Request-Id when sane, else a fresh one; fixed for the request's life."""
        if not hasattr(self, "_request_id"):
            self._request_id = pick_request_id(self.request.headers.get(REQUEST_ID_HEADER))
        return self._request_id

    def set_default_headers(self) -> None:
        # Tornado calls this again when an error clears the headers, so errors carry these too.
        self.set_header(REQUEST_ID_HEADER, self.request_id)
        cors: CorsPolicy | None = self.settings.get("cors")
        if cors is not None and cors.enabled:
            self.set_header("Vary", "Origin")
            origin = self.request.headers.get("Origin")
            if cors.allows(origin):
                for key, value in cors.response_headers(origin).items():
                    self.set_header(key, value)

    def options(self, *args: str) -> None:
        """A CORS preflight (no key needed: browsers never send one with it); other OPTIONS list the methods."""
        methods = [m for m in ("GET", "POST") if getattr(type(self), m.lower()) is not getattr(BaseHandler, m.lower())]
        headers = self.request.headers
        origin, asked = headers.get("Origin"), headers.get("Access-Control-Request-Method")
        if origin is None or asked is None:
            self.set_header("Allow", ", ".join([*methods, "OPTIONS"]))
        else:
            cors: CorsPolicy | None = self.settings.get("cors")
            if cors is None or not cors.allows(origin):
                message = f"origin {origin!r} is not allowed (--allowed-origins)"
                raise ApiError(403, message, type="invalid_request_error", code="origin_not_allowed")
            private = headers.get("Access-Control-Request-Private-Network", "").lower() == "true"
            granted = cors.preflight_headers(methods, headers.get("Access-Control-Request-Headers"), private)
            for key, value in granted.items():
                self.set_header(key, value)
        self.set_status(204)
        self.finish()

    def prepare(self) -> None:
        if self.request.method == "OPTIONS":
            return  # a preflight carries no credentials by design
        if self.requires_auth and self.state.config.api_keys:
            token = bearer_token(self.request.headers.get("Authorization"))
            if not key_matches(token, self.state.config.api_keys):
                raise ApiError(401, "missing or invalid API key", code="invalid_api_key")
        if self.needs_model and not self.state.ready:
            raise ApiError(503, "the model is loading", code="model_loading")

    def data_received(self, chunk: bytes) -> None:
        # An oversized body is read to its end and dropped, then answered 413: refusing it before it
        # is read would reset the connection under a client that is still sending.
        self._size += len(chunk)
        if self._size <= self.state.config.max_body_bytes:
            self._chunks.append(chunk)

    def json_body(self) -> dict[str, Any]:
        if self._size > self.state.config.max_body_bytes:
            raise self._too_large()
        return parse_json_body(b"".join(self._chunks))

    def _too_large(self) -> ApiError:
        return ApiError(413, f"request body is over {self.state.config.max_body_bytes} bytes", code="body_too_large")

    def write_json(self, body: dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body, ensure_ascii=False))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, ApiError):
            error = exc
        elif isinstance(exc, tornado.web.HTTPError):
            error = status_error(exc.status_code, exc.log_message if exc.log_message else None)
        else:
            error = ApiError(500, "internal server error", type="server_error")
        self.clear_header("Content-Type")
        self.set_status(error.status)
        self.set_header("Content-Type", "application/json")
        if error.status == 401:
            self.set_header("WWW-Authenticate", "Bearer")  # send_error cleared the headers set before
        self.finish(json.dumps(error.body(), ensure_ascii=False))

    def log_exception(self, typ, value, tb) -> None:
        if isinstance(value, ApiError):
            return  # the client's answer, not a server fault
        if isinstance(value, tornado.web.HTTPError):
            super().log_exception(typ, value, tb)
            return
        fields = {"request_id": self.request_id, "route": self.route, "method": self.request.method}
        message = f"uncaught exception in {self.request.method} {self.request.path} (id={self.request_id})"
        log.error(message, exc_info=(typ, value, tb), extra={"fields": fields})

    def on_finish(self) -> None:
        self.state.metrics.requests.labels(self.route, str(self.get_status())).inc()


class NotFoundHandler(BaseHandler):
    """Unknown routes: auth is still checked first, so a keyless caller learns nothing about routes."""

    needs_model = False

    def prepare(self) -> None:
        super().prepare()
        raise ApiError(404, f"no route {self.request.method} {self.request.path}", code="not_found")


class GenerationHandler(BaseHandler):
    """A route that runs the engine: a client that goes away aborts its request and frees the slot."""

    stream: EngineStream | None = None
    client_gone = False
    sent_any = False  # a streamed frame went out: the status line can no longer change
    stop_error: ApiError | None = None  # set when a shutdown stopped this request

    def prepare(self) -> None:
        super().prepare()
        if self.request.method == "OPTIONS":
            return
        if self.state.drain.draining:
            raise shutting_down()
        self.state.drain.add(self)

    def on_finish(self) -> None:
        self.state.drain.discard(self)
        super().on_finish()

    @property
    def access_tokens(self) -> tuple[int, int] | None:
        """A stopped or failed generation still logs what it had used."""
        seen = [last for last in self.stream.last if last is not None] if self.stream is not None else []
        if self.tokens is None and seen:
            return (sum(x.prompt_tokens for x in seen), sum(x.completion_tokens for x in seen))
        return self.tokens

    def stop_for_shutdown(self, error: ApiError) -> None:
        """Past --shutdown-timeout: end this request with `error` (a 503, or an error frame mid-stream)."""
        self.stop_error = error
        if isinstance(self.stream, StoppableStream):
            self.stream.stop(error)

    async def start_generation(self, requests: list) -> EngineStream:
        """Submit a request's generations (its choices) together; refusals come back as ApiErrors."""
        if self.stop_error is not None:  # stopped while the body was parsed or a constraint compiled
            raise self.stop_error
        self.stream = StoppableStream(self.state.runtime.engine, requests, self._first_token)
        if self.client_gone:  # closed while the body was parsed or the prompt rendered
            self.stream.aborted = True
        await self.stream.start()
        return self.stream

    async def compile_constraint(self, turn: ChatTurn) -> TurnConstraint | None:
        """The turn's output constraint, compiled off the event loop (a 400 saying why when it cannot be)."""
        if turn.plan is None:
            return None
        try:
            return await self.state.runtime.constraints.constraint(turn.plan)
        except ConstraintError as exc:
            c = turn.conversation
            param = exc.param or ("response_format" if c.response_format and c.response_format.is_json else "tools")
            raise bad_request(str(exc), param=param, code="invalid_constraint") from None

    def _first_token(self) -> None:
        self.state.metrics.ttft.observe(time.monotonic() - self.received)

    def on_connection_close(self) -> None:
        self.client_gone = True
        if self.stream is not None:
            self.stream.abort()

    def check_choices(self, count: int, param: str = "n") -> None:
        """A request's generations take their slots together: more than the server has is a 400."""
        slots = self.state.engine_config.parallel
        if count > slots:
            raise bad_request(
                f"{param} asks for {count} generations at once, more than this server's {slots} slots (--parallel)",
                param=param,
            )

    def count_tokens(self, lasts) -> None:
        """Usage for /metrics and the access log (summed over the request's choices)."""
        seen = [last for last in lasts if last is not None]
        for last in seen:
            self.state.metrics.prompt_tokens.inc(last.prompt_tokens)
            self.state.metrics.completion_tokens.inc(last.completion_tokens)
        if seen:
            self.tokens = (sum(x.prompt_tokens for x in seen), sum(x.completion_tokens for x in seen))

    def start_sse(self) -> None:
        from lexi.http.sse import HEADERS

        for key, value in HEADERS.items():
            self.set_header(key, value)

    async def stream_failures(self, streaming) -> None:
        """Run a streaming reply; a failure after the headers went out ends the stream with an error frame."""
        from lexi.http.sse import frame

        try:
            await streaming
        except ApiError as exc:
            if not self.sent_any:
                raise
            await self.send(frame(exc.body()))
            self.finish()
        except Exception as exc:
            if not self.sent_any:
                raise
            log.exception("generation failed mid-stream")
            await self.send(frame(ApiError(500, f"generation failed: {exc}", type="server_error").body()))
            self.finish()

    async def send(self, data: bytes) -> bool:
        """Write and flush one frame; False (and the request aborted) once the client has gone."""
        try:
            self.write(data)
            self.sent_any = True
            await self.flush()
            return True
        except StreamClosedError:
            self.on_connection_close()
            return False
