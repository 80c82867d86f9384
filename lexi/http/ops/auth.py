"""Bearer keys: every route but /health needs one when keys are set, whatever model name is asked for."""

from __future__ import annotations

import hmac
from collections.abc import Sequence


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def key_matches(token: str | None, keys: Sequence[str]) -> bool:
    """Constant-time against every key (no early exit), so timing tells nothing about which or how close."""
    if token is None:
        return False
    given = token.encode("utf-8")
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given, key.encode("utf-8"))
    return matched


def read_key_file(path: str) -> tuple[str, ...]:
    """One key per line; blank lines and lines starting with # are skipped."""
    with open(path, encoding="utf-8") as fh:
        lines = [line.strip() for line in fh]
    return tuple(line for line in lines if line and not line.startswith("#"))
