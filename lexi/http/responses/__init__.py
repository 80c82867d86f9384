"""The Responses API (/v1/responses, /v1/responses/{id}): request, input, events, routes, store."""
