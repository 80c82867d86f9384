"""`make_app(state)`: the route table. Handlers get the shared state through `initialize()`."""

from __future__ import annotations

import logging

import tornado.web

from lexi.http.handlers.base import NotFoundHandler
from lexi.http.handlers.chat import ChatCompletionsHandler
from lexi.http.handlers.completions import CompletionsHandler
from lexi.http.handlers.info import HealthHandler, MetricsHandler, ModelHandler, ModelsHandler
from lexi.http.handlers.llama import ApplyTemplateHandler, DetokenizeHandler, TokenizeHandler
from lexi.http.handlers.responses import ResponsesHandler
from lexi.http.state import ServerState

_access = logging.getLogger("tornado.access")


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """Tornado logs every 5xx as an error; a 503 while the model loads is expected, not a fault."""
    status = handler.get_status()
    level = logging.INFO if status < 400 or status == 503 else logging.WARNING if status < 500 else logging.ERROR
    _access.log(level, "%d %s %.2fms", status, handler._request_summary(), 1000.0 * handler.request.request_time())


def make_app(state: ServerState) -> tornado.web.Application:
    deps = {"state": state}
    routes = [
        (r"/v1/chat/completions", ChatCompletionsHandler),
        (r"/v1/completions", CompletionsHandler),
        (r"/v1/responses", ResponsesHandler),
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
        log_function=_log_request,
    )
