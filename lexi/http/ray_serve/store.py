"""Stored Responses under `serve --replicas N`: one ResponseStore actor that the ingress and every replica share.

A continuation (`previous_response_id`) may be placed on any replica, and GET/DELETE are answered by the
ingress, so the store cannot live in any one of them: the command creates this actor (named, found by
name as the Board is) and each process's ServerState.responses is a `RemoteResponses` over it. The actor
runs the same class as one server; its methods hold no await, so each call runs whole, one at a time.
"""

from __future__ import annotations

from typing import Any

import ray

from lexi.http.responses.store import ResponseStore, StoredResponse

ResponsesActor = ray.remote(num_cpus=0)(ResponseStore)


class RemoteResponses:
    """ResponseStore's interface over the actor: each call is one round trip to it."""

    def __init__(self, actor) -> None:
        self._actor = actor

    async def put(self, owner: str, body: dict[str, Any], items: list[dict[str, Any]]) -> None:
        await self._actor.put.remote(owner, body, items)

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        return await self._actor.get.remote(response_id, owner)

    async def delete(self, response_id: str, owner: str) -> bool:
        return await self._actor.delete.remote(response_id, owner)

    async def size(self) -> int:
        return await self._actor.size.remote()
