"""`make_app(state)`: the route table. Handlers get the shared state through `initialize()`."""

from __future__ import annotations

import tornado.web

from lexi.http.cors import CorsPolicy
from lexi.http.handlers.base import NotFoundHandler
from lexi.http.handlers.chat import ChatCompletionsHandler
from lexi.http.handlers.completions import CompletionsHandler
from lexi.http.handlers.info import HealthHandler, MetricsHandler, ModelHandler, ModelsHandler
from lexi.http.handlers.llama import ApplyTemplateHandler, DetokenizeHandler, TokenizeHandler
from lexi.http.handlers.responses import ResponsesHandler
from lexi.http.logs import log_access
from lexi.http.state import ServerState


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """The access log line (lexi.http.logs): Tornado's own would log a 503 while loading as an error."""
    request = handler.request
    log_access(
        request_id=getattr(handler, "request_id", ""),
        method=request.method or "",
        path=request.path,
        remote_ip=request.remote_ip,
        route=getattr(handler, "route", "other"),
        status=handler.get_status(),
        latency_s=request.request_time(),
        tokens=getattr(handler, "access_tokens", None),
    )


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
        cors=CorsPolicy(state.config.allowed_origins),
    )
