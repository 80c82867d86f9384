"""What every route shares, whatever the transport: the body with its size limit, auth, the 503 while
loading, errors in OpenAI's shape, metrics, the request id, CORS headers and preflights. Routes that
generate add the drain and the abort on disconnect (lexi.http.generation.route).

A route is one object per request. `run()` answers it with a `Reply` and never raises; a transport adapter
writes that reply, calls `client_closed()` if the client goes away first, and `done(status)` at the end.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from lexi.http.errors import ApiError, internal_error, status_error
from lexi.http.exchange import Reply, Request
from lexi.http.ops.auth import bearer_token, key_matches
from lexi.http.ops.logs import REQUEST_ID_HEADER, pick_request_id
from lexi.http.parsing.fields import parse_json_body
from lexi.http.sse import frame
from lexi.http.state import ServerState

log = logging.getLogger(__name__)

METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")  # any other method is a 405


class Route:
    route = "other"  # the metrics label
    requires_auth = True
    needs_model = True  # answered 503 until the model has loaded

    def __init__(self, state: ServerState, request: Request, args: tuple[str, ...] = ()) -> None:
        self.state = state
        self.request = request
        self.args = args
        self.received = request.received or time.monotonic()
        self.request_id = pick_request_id(request.headers.get(REQUEST_ID_HEADER))
        self.status = 0  # the status answered, once known

    @property
    def access_tokens(self) -> tuple[int, int] | None:
        """(prompt, completion) tokens for the access log; None when the route generates nothing."""
        return None

    @property
    def access_drafts(self) -> tuple[int, int] | None:
        """(proposed, taken) draft tokens for the access log; None when nothing was speculated."""
        return None

    # ---- what a transport calls ----

    async def run(self) -> Reply:
        """The whole answer, or a stream whose first frame is already computed. Never raises."""
        try:
            reply = await self._answer()
            if reply.frames is not None:
                reply.frames = await _primed(reply.frames)
        except Exception as exc:
            reply = self.error_reply(exc)
        reply.headers = {**self.common_headers(), **reply.headers}
        self.status = reply.status
        return reply

    def client_closed(self) -> None:
        """The client went away before the answer was written."""

    def done(self, status: int | None = None) -> None:
        """The answer is written (or abandoned): count it."""
        self.state.metrics.requests.labels(self.route, str(status or self.status)).inc()

    # ---- the pieces ----

    async def _answer(self) -> Reply:
        method = self.request.method
        if method not in METHODS:
            raise status_error(405)
        self.prepare()
        result = getattr(self, method.lower())(*self.args)
        if inspect.isawaitable(result):
            result = await result
        return result if result is not None else Reply(200)

    def common_headers(self) -> dict[str, str]:
        """On every answer, errors included: the request id, and CORS headers for an allowed origin."""
        headers = {REQUEST_ID_HEADER: self.request_id}
        cors = self.state.cors
        if cors.enabled:
            headers["Vary"] = "Origin"
            origin = self.request.headers.get("Origin")
            if cors.allows(origin):
                headers.update(cors.response_headers(origin))
        return headers

    def prepare(self) -> None:
        if self.request.method == "OPTIONS":
            return  # a preflight carries no credentials by design
        if self.requires_auth and not self.authorized():
            raise ApiError(401, "missing or invalid API key", code="invalid_api_key")
        if self.needs_model and not self.state.ready:
            raise ApiError(503, "the model is loading", code="model_loading")

    def presented_key(self) -> str | None:
        """The key the request carries: OpenAI's clients send it as `Authorization: Bearer KEY`."""
        return bearer_token(self.request.headers.get("Authorization"))

    def authorized(self) -> bool:
        """No keys set, or the request carries one of them (compared in constant time)."""
        keys = self.state.config.api_keys
        return not keys or key_matches(self.presented_key(), keys)

    def _not_allowed(self, *args: str) -> Reply:
        raise status_error(405)

    get = post = delete = patch = put = _not_allowed

    def head(self, *args: str) -> Reply:
        """What GET answers, headers only (the transport leaves the body out), as health checkers expect."""
        if type(self).get is Route._not_allowed:
            raise status_error(405)
        return self.get(*args)

    def allowed_methods(self) -> list[str]:
        """The methods this route answers, for `Allow` and CORS preflights."""
        methods = [m for m in ("GET", "POST", "DELETE") if getattr(type(self), m.lower()) is not Route._not_allowed]
        return [*methods[:1], "HEAD", *methods[1:]] if "GET" in methods else methods

    def options(self, *args: str) -> Reply:
        """A CORS preflight (no key needed: browsers never send one with it); other OPTIONS list the methods."""
        methods = self.allowed_methods()
        headers = self.request.headers
        origin, asked = headers.get("Origin"), headers.get("Access-Control-Request-Method")
        if origin is None or asked is None:
            return Reply(204, {"Allow": ", ".join([*methods, "OPTIONS"])})
        cors = self.state.cors
        if not cors.allows(origin):
            message = f"origin {origin!r} is not allowed (--allowed-origins)"
            raise ApiError(403, message, type="invalid_request_error", code="origin_not_allowed")
        private = headers.get("Access-Control-Request-Private-Network", "").lower() == "true"
        return Reply(204, cors.preflight_headers(methods, headers.get("Access-Control-Request-Headers"), private))

    def json_body(self) -> dict[str, Any]:
        limit = self.state.config.max_body_bytes
        if self.request.body_size > limit:
            raise ApiError(413, f"request body is over {limit} bytes", code="body_too_large")
        return parse_json_body(self.request.body)

    def json(self, body: dict[str, Any], status: int = 200) -> Reply:
        return Reply(status, {"Content-Type": "application/json"}, json.dumps(body, ensure_ascii=False).encode())

    def error_body(self, error: ApiError) -> dict[str, Any]:
        """An error as this route's API writes it (OpenAI's shape; the Anthropic routes write theirs)."""
        return error.body()

    def error_frame(self, error: ApiError) -> bytes:
        """An error that ends a stream already under way."""
        return frame(error.body())

    def error_reply(self, exc: BaseException) -> Reply:
        if isinstance(exc, ApiError):
            error = exc
        else:
            fields = {"request_id": self.request_id, "route": self.route, "method": self.request.method}
            message = f"uncaught exception in {self.request.method} {self.request.path} (id={self.request_id})"
            log.error(message, exc_info=exc, extra={"fields": fields})
            error = internal_error()
        reply = self.json(self.error_body(error), error.status)
        if error.status == 401:
            reply.headers["WWW-Authenticate"] = "Bearer"
        if error.status == 405:  # RFC 9110: a 405 says what the route does take
            reply.headers["Allow"] = ", ".join([*self.allowed_methods(), "OPTIONS"])
        return reply


async def _primed(frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`frames` with its first frame computed now (a failure before it raises here, as a status)."""
    try:
        first = await anext(frames)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await frames.aclose()
        raise

    async def rest() -> AsyncIterator[bytes]:
        async with contextlib.aclosing(frames):
            if first is None:
                return
            yield first
            async for item in frames:
                yield item

    return rest()


class NotFoundRoute(Route):
    """Unknown routes: auth is still checked first, so a keyless caller learns nothing about routes."""

    needs_model = False

    def prepare(self) -> None:
        super().prepare()
        raise ApiError(404, f"no route {self.request.method} {self.request.path}", code="not_found")
