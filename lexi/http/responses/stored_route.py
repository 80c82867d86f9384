"""GET and DELETE /v1/responses/{id}: a stored response, read back or forgotten (lexi.http.responses.store).

Answered without the model (while it loads too, and under Ray by the ingress itself). A response belongs to
the key that created it: another key gets the same 404 as an id that was never stored.
"""

from __future__ import annotations

from lexi.http.errors import ApiError
from lexi.http.exchange import Reply
from lexi.http.responses.store import owner_of
from lexi.http.route import Route


def response_not_found(response_id: str) -> ApiError:
    """The 404 of an unknown, deleted, evicted or someone else's response (vLLM's and OpenAI's wording)."""
    return ApiError(
        404,
        f"Response with id '{response_id}' not found.",
        type="invalid_request_error",
        param="response_id",
        code="not_found",
    )


class StoredResponseRoute(Route):
    route = "responses_stored"
    needs_model = False

    def _owner(self) -> str:
        return owner_of(self.request.headers.get("Authorization"), bool(self.state.config.api_keys))

    async def get(self, response_id: str) -> Reply:
        """The Response object exactly as it was returned (a streamed one: its final `response` object)."""
        entry = await self.state.responses.get(response_id, self._owner())
        if entry is None:
            raise response_not_found(response_id)
        return self.json(entry.body)

    async def delete(self, response_id: str) -> Reply:
        """OpenAI's deletion object; deleting again is a 404, as for any id not stored."""
        if not await self.state.responses.delete(response_id, self._owner()):
            raise response_not_found(response_id)
        return self.json({"id": response_id, "object": "response", "deleted": True})
