"""The routes, independent of the transport: `open_route(state, request)` picks the one a request asks for.

Each route is one object per request (lexi.http.route); the Tornado and Ray Serve adapters only
turn their requests into `lexi.http.exchange.Request` and write the `Reply` that `run()` gives back.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from lexi.http.chat.route import ChatCompletionsRoute
from lexi.http.completions.route import CompletionsRoute
from lexi.http.exchange import Request
from lexi.http.llama.route import ApplyTemplateRoute, DetokenizeRoute, TokenizeRoute
from lexi.http.messages.route import CountTokensRoute, MessagesRoute
from lexi.http.ops.info import HealthRoute, MetricsRoute, ModelRoute, ModelsRoute
from lexi.http.responses.route import ResponsesRoute
from lexi.http.responses.stored_route import StoredResponseRoute
from lexi.http.route import NotFoundRoute, Route
from lexi.http.state import ServerState

# matched against the whole percent-encoded path; groups are decoded and passed to the method
ROUTES: tuple[tuple[re.Pattern[str], type[Route]], ...] = tuple(
    (re.compile(pattern), route)
    for pattern, route in (
        (r"/v1/chat/completions", ChatCompletionsRoute),
        (r"/v1/completions", CompletionsRoute),
        (r"/v1/responses", ResponsesRoute),
        (r"/v1/responses/([^/]+)", StoredResponseRoute),
        (r"/v1/messages", MessagesRoute),
        (r"/v1/messages/count_tokens", CountTokensRoute),
        (r"/v1/models", ModelsRoute),
        (r"/v1/models/(.+)", ModelRoute),
        (r"/health", HealthRoute),
        (r"/metrics", MetricsRoute),
        (r"/tokenize", TokenizeRoute),
        (r"/detokenize", DetokenizeRoute),
        (r"/apply-template", ApplyTemplateRoute),
    )
)


def open_route(state: ServerState, request: Request) -> Route:
    """The route object that will answer `request` (a 404 route for an unknown path). Does no I/O."""
    for pattern, route in ROUTES:
        match = pattern.fullmatch(request.path)
        if match:
            return route(state, request, tuple(unquote(group) for group in match.groups()))
    return NotFoundRoute(state, request)
