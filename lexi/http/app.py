"""`make_app(state)`: the route table. Handlers get the shared state through `initialize()`."""

from __future__ import annotations

import tornado.web

from lexi.http.handlers.base import NotFoundHandler
from lexi.http.handlers.chat import ChatCompletionsHandler
from lexi.http.handlers.completions import CompletionsHandler
from lexi.http.handlers.info import HealthHandler, MetricsHandler, ModelHandler, ModelsHandler
from lexi.http.handlers.llama import ApplyTemplateHandler, DetokenizeHandler, TokenizeHandler
from lexi.http.state import ServerState


def make_app(state: ServerState) -> tornado.web.Application:
    deps = {"state": state}
    routes = [
        (r"/v1/chat/completions", ChatCompletionsHandler),
        (r"/v1/completions", CompletionsHandler),
        (r"/v1/models", ModelsHandler),
        (r"/v1/models/(.+)", ModelHandler),
        (r"/health", HealthHandler),
        (r"/metrics", MetricsHandler),
        (r"/tokenize", TokenizeHandler),
        (r"/detokenize", DetokenizeHandler),
        (r"/apply-template", ApplyTemplateHandler),
    ]
    return tornado.web.Application(
        [(pattern, handler, deps) for pattern, handler in routes],
        default_handler_class=NotFoundHandler,
        default_handler_args=deps,
        compress_response=False,
    )
