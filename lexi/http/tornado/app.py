"""The Tornado transport: `make_app(state)`, one handler that reads the body, asks the routes, writes the reply.

Every behaviour lives in lexi.http.routes; this adapter only moves bytes. A body over the limit is read to
its end and dropped (refusing it mid-send would reset the connection under a client still sending), then
answered 413 by the route; a client that goes away aborts its generation through `route.client_closed()`.
"""

from __future__ import annotations

import json
import time

import tornado.web
from tornado.iostream import StreamClosedError

from lexi.http.errors import status_error
from lexi.http.exchange import Headers, Request
from lexi.http.ops.logs import log_access
from lexi.http.route import METHODS, Route
from lexi.http.routes import open_route
from lexi.http.state import ServerState


@tornado.web.stream_request_body
class RouteHandler(tornado.web.RequestHandler):
    SUPPORTED_METHODS = METHODS  # Tornado answers any other with a 405 (write_error)

    def initialize(self, state: ServerState) -> None:
        self.state = state
        self.received = time.monotonic()
        self._chunks: list[bytes] = []
        self._size = 0
        self.lexi_route: Route | None = None
        self.gone = False
        self.logged = False

    def data_received(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size <= self.state.config.max_body_bytes:
            self._chunks.append(chunk)

    async def _answer(self, *args: str) -> None:
        http = self.request
        request = Request(
            method=http.method or "",
            path=http.path,
            headers=Headers(http.headers.get_all()),
            body=b"".join(self._chunks),
            body_size=self._size,
            remote_ip=http.remote_ip,
            received=self.received,
        )
        self._chunks = []
        route = self.lexi_route = open_route(self.state, request)
        if self.gone:
            route.client_closed()
        reply = await route.run()
        self.set_status(reply.status)
        for key, value in reply.headers.items():
            self.set_header(key, value)
        if reply.frames is None:
            self.log_access()
            self.finish(reply.body or None)  # a 204 must not carry even an empty chunk
            return
        try:
            async for data in reply.frames:
                self.write(data)
                await self.flush()
        except StreamClosedError:
            self.on_connection_close()
            await reply.frames.aclose()
            return
        self.log_access()
        self.finish()

    get = head = post = delete = patch = put = options = _answer

    def write_error(self, status_code: int, **kwargs) -> None:
        """What Tornado itself refuses before a route runs (an unknown method, a malformed request)."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = exc.log_message if isinstance(exc, tornado.web.HTTPError) and exc.log_message else None
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(status_error(status_code, message).body(), ensure_ascii=False))

    def log_access(self) -> None:
        """The access line, written before the answer's last bytes: once a client has its answer, the line exists."""
        self.logged = True
        _access_line(self)

    def on_connection_close(self) -> None:
        self.gone = True
        if self.lexi_route is not None:
            self.lexi_route.client_closed()

    def on_finish(self) -> None:
        if self.lexi_route is not None:
            self.lexi_route.done(self.get_status())


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """Tornado's log_function: the access line, unless RouteHandler.log_access wrote it already."""
    if not getattr(handler, "logged", False):
        _access_line(handler)


def _access_line(handler: tornado.web.RequestHandler) -> None:
    """The access log line (lexi.http.ops.logs): Tornado's own would log a 503 while loading as an error."""
    request = handler.request
    route = getattr(handler, "lexi_route", None)
    log_access(
        request_id=route.request_id if route is not None else "",
        method=request.method or "",
        path=request.path,
        remote_ip=request.remote_ip,
        route=route.route if route is not None else "other",
        status=handler.get_status(),
        latency_s=request.request_time(),
        tokens=route.access_tokens if route is not None else None,
        drafts=route.access_drafts if route is not None else None,
    )


def make_app(state: ServerState) -> tornado.web.Application:
    return tornado.web.Application(
        [(r".*", RouteHandler, {"state": state})],
        compress_response=False,
        log_function=_log_request,
    )
