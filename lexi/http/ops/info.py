"""GET /health, /metrics, /v1/models and /v1/models/{id}: answered while the model loads, too."""

from __future__ import annotations

from typing import Any

from lexi.http.errors import ApiError
from lexi.http.exchange import Reply
from lexi.http.ops.drain import shutting_down
from lexi.http.ops.metrics import CONTENT_TYPE
from lexi.http.route import Route


class HealthRoute(Route):
    """503 while loading or shutting down, 200 once ready: the server listens before the weights are in memory."""

    route = "health"
    requires_auth = False
    needs_model = False

    async def get(self) -> Reply:
        if self.state.cluster is not None:  # the entry to N replicas (lexi.http.ray_serve.serve): ready when all are
            unready = await self.state.cluster.unready()
            if unready is not None:
                raise ApiError(503, f"the model is loading: {unready}", code="model_loading")
        elif self.state.load_error is not None:
            raise ApiError(503, f"the model failed to load: {self.state.load_error}", code="model_load_failed")
        elif not self.state.ready:
            raise ApiError(503, "the model is loading", code="model_loading")
        if self.state.drain.draining:  # a load balancer moves traffic away while running requests finish
            raise shutting_down()
        return self.json({"status": "ok"})


class MetricsRoute(Route):
    route = "metrics"
    needs_model = False

    async def get(self) -> Reply:
        exposition = self.state.metrics.exposition()
        if self.state.cluster is not None:  # every replica's series, each with its `replica` label
            exposition = await self.state.cluster.exposition(exposition)
        return Reply(200, {"Content-Type": CONTENT_TYPE}, exposition)


class ModelsRoute(Route):
    route = "models"
    needs_model = False

    def get(self) -> Reply:
        names = self.state.names
        data = [model_entry(name, self.state.created, names.public_id) for name in names.all]
        return self.json({"object": "list", "data": data})


class ModelRoute(Route):
    route = "models"
    needs_model = False

    def get(self, model_id: str) -> Reply:
        names = self.state.names
        if model_id not in names.all:
            raise ApiError(404, f"model {model_id!r} does not exist", param="model", code="model_not_found")
        return self.json(model_entry(model_id, self.state.created, names.public_id))


def model_entry(name: str, created: int, public_id: str) -> dict[str, Any]:
    entry = {"id": name, "object": "model", "created": created, "owned_by": "lexi-engine"}
    if name != public_id:
        entry["parent"] = public_id  # an alias: the same resident model, not a second one
    return entry
