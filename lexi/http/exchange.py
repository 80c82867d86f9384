"""What a transport hands the routes and gets back: plain data, no Tornado, no Starlette.

A transport adapter (lexi.http.tornado.app for Tornado, lexi.http.ray_serve.serve for Ray Serve) turns its own
request into a `Request`, asks `lexi.http.routes.open_route(state, request)` for the route, awaits
`route.run()` and writes the `Reply`: a status, headers and either a body or a stream of SSE frames.
The adapter's only other jobs are telling the route when the client went away (`route.client_closed()`)
and when the answer is done (`route.done(status)`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field


class Headers(Mapping[str, str]):
    """Request headers, case-insensitive; a repeated header reads as its first value."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: dict[str, tuple[str, str]] = {}
        for key, value in items:
            self._items.setdefault(key.lower(), (key, value))

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()][1]

    def __iter__(self):
        return (key for key, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)


@dataclass(slots=True)
class Request:
    method: str  # upper case, as sent
    path: str  # percent-encoded, without the query string
    headers: Headers
    body: bytes  # at most ServerConfig.max_body_bytes of it; the rest was read and dropped
    body_size: int  # the size the client sent (larger than len(body) when over the limit)
    remote_ip: str | None = None
    received: float = 0.0  # time.monotonic() when the request arrived (time to first token counts from here)


@dataclass(slots=True)
class Reply:
    """A whole answer (`body`), or a stream: `frames` yields SSE frames, the first already computed, so a
    failure before it is a status of its own and the headers can go out as soon as the adapter writes."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    frames: AsyncIterator[bytes] | None = None
