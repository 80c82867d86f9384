"""Stored Responses (`store: true`): what `previous_response_id`, `GET` and `DELETE /v1/responses/{id}` read.

In memory only, bounded by --responses-store (the least recently used goes first; reading a response or
continuing it counts as a use), and nothing is written to disk: a restart forgets every response. Each entry
belongs to the API key that created it (`owner_of`), and a lookup with another owner finds nothing, exactly as
for an id that was never stored, so a caller cannot learn that someone else's response exists.

The methods are coroutines so that one interface serves both transports: one server awaits this object on its
IOLoop (one thread: no lock needed), and `serve --replicas N` runs the same class as a Ray actor that the
ingress and every replica reach (lexi.http.ray_serve.store.RemoteResponses), since a continuation may land on any
replica.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from lexi.http.ops.auth import bearer_token

MAX_STORED = 1_000_000  # --responses-store's upper bound


def owner_of(authorization: str | None, keyed: bool) -> str:
    """Who a request speaks for: a digest of its bearer key on a server with keys (the route has checked the key
    already), else "" (without --api-key every caller is the same owner). The key itself is not kept."""
    if not keyed:
        return ""
    token = bearer_token(authorization) or ""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredResponse:
    owner: str
    body: dict[str, Any]  # the Response object exactly as it was returned
    items: list[dict[str, Any]]  # every input item that led to it: the chain it continued, then its own input

    def history(self) -> list[dict[str, Any]]:
        """What a request continuing this one starts from: its input items, then its output items."""
        return [*self.items, *self.body["output"]]


class ResponseStore:
    """At most `capacity` responses by id, least recently used out; capacity 0 keeps nothing."""

    def __init__(self, capacity: int) -> None:
        if not 0 <= capacity <= MAX_STORED:
            raise ValueError(f"--responses-store must be in [0, {MAX_STORED}], got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    async def put(self, owner: str, body: dict[str, Any], items: list[dict[str, Any]]) -> None:
        if self.capacity == 0:
            return
        # a copy: the caller's objects stay its own (and a Ray actor gets a copy anyway)
        entry = StoredResponse(owner, json.loads(json.dumps(body)), json.loads(json.dumps(items)))
        self._entries[body["id"]] = entry
        self._entries.move_to_end(body["id"])
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        entry = self._entries.get(response_id)
        if entry is None or entry.owner != owner:
            return None
        self._entries.move_to_end(response_id)
        return entry

    async def delete(self, response_id: str, owner: str) -> bool:
        entry = self._entries.get(response_id)
        if entry is None or entry.owner != owner:
            return False
        del self._entries[response_id]
        return True

    async def size(self) -> int:
        return len(self._entries)
