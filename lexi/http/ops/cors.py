"""CORS for browser clients: which origins may call the API, and the headers a browser needs to let them.

A browser asks first (an `OPTIONS` preflight carrying `Origin` and `Access-Control-Request-Method`)
before it sends a request with an `Authorization` header or a JSON body from another origin. The
preflight carries no credentials by design, so it is answered without the API key; the real request
that follows still needs the key. Origins are compared exactly, after the normalisation browsers
apply themselves (lower case, no default port); `*` allows any origin. Nothing here is sent to an
origin that is not allowed, so the browser refuses the call on the client's side as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

ANY = "*"
MAX_AGE_S = 600  # how long a browser may cache a preflight's answer
EXPOSED = ("X-Request-Id",)  # response headers a page's script may read
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")
_VISIBLE = re.compile(r"^[\x21-\x7e]+$")  # what may be echoed back in a header
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")  # an HTTP header name (RFC 9110 token)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_origin(value: str) -> str | None:
    """`scheme://host[:port]` as a browser writes it in `Origin`, or None when `value` is not an origin."""
    text = value.strip().lower()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if not _SCHEME.match(parts.scheme) or not parts.hostname or parts.username is not None or parts.password:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or text.endswith(("?", "#")):
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme):
        return f"{parts.scheme}://{host}:{port}"
    return f"{parts.scheme}://{host}"


def parse_origins(values: Iterable[str]) -> tuple[str, ...]:
    """`--allowed-origins` values (each may be a comma list) as normalised origins; ValueError naming a bad one."""
    origins: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            origin = ANY if item == ANY else normalize_origin(item)
            if origin is None:
                raise ValueError(
                    f"--allowed-origins: {item!r} is not an origin: write scheme://host[:port] "
                    "(e.g. http://localhost:3000, no path) or * for any origin"
                )
            if origin not in origins:
                origins.append(origin)
    return tuple(origins)


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    """The allowed origins (normalised by `parse_origins`); empty means CORS is off."""

    origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "origins", parse_origins(self.origins))

    @property
    def enabled(self) -> bool:
        return bool(self.origins)

    def allows(self, origin: str | None) -> bool:
        """`*` allows any origin a browser sends, `null` included (file:// pages, sandboxed frames)."""
        if not origin or not self.origins or not _VISIBLE.match(origin):
            return False
        if ANY in self.origins:
            return True
        return normalize_origin(origin) in self.origins

    def response_headers(self, origin: str) -> dict[str, str]:
        """On every answer to an allowed origin. The origin is echoed (never `*`) so the answer stays
        right if credentials are ever sent; `Vary: Origin` keeps caches from serving it to another."""
        return {"Access-Control-Allow-Origin": origin, "Access-Control-Expose-Headers": ", ".join(EXPOSED)}

    def preflight_headers(self, methods: Sequence[str], request_headers: str | None, private_network: bool) -> dict:
        """What a preflight from an allowed origin gets besides `response_headers`.

        The headers asked for are granted as asked (when they are header names): the official SDKs
        send their own (`x-stainless-*`, `openai-organization`), and a fixed list would break them.
        """
        asked = [h.strip().lower() for h in (request_headers or "").split(",") if h.strip()]
        headers = {
            "Access-Control-Allow-Methods": ", ".join([*methods, "OPTIONS"]),
            "Access-Control-Max-Age": str(MAX_AGE_S),
        }
        granted = [h for h in asked if _TOKEN.match(h)]
        if granted:
            headers["Access-Control-Allow-Headers"] = ", ".join(granted)
        if private_network:  # Chrome's Private Network Access: a public page calling a server on localhost
            headers["Access-Control-Allow-Private-Network"] = "true"
        return headers
