"""Every failure leaves the server in OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.

This is also the one place where the layers below speak HTTP: the engine's refusals, the chat pipeline's
template and constraint faults, an answer that is not what the request demanded, and a failure mid-stream
each become the status and error the spec gives them here, whichever route met them.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from lexi.chat.output import OutputError
from lexi.chat.template import TemplateRenderError, TemplateVariablesError, ThinkingUnsupported
from lexi.engine.errors import ContextOverflow, EngineBusy
from lexi.structured import ConstraintError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "inference_busy",
    501: "not_supported_error",
    503: "unavailable_error",
}


class ApiError(Exception):
    """An answer the client gets instead of a result; handlers raise it, the base handler writes it."""

    def __init__(
        self, status: int, message: str, *, type: str | None = None, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _TYPES.get(status, "server_error")
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def model_not_loaded(name: str) -> ApiError:
    return ApiError(400, "requested model is not loaded", param="model", code="model_not_found")


def status_error(status: int, message: str | None = None) -> ApiError:
    """A bare HTTP status (404, 405, 413...) turned into the error shape."""
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "error"
    return ApiError(status, message or reason, code=reason.lower().replace(" ", "_"))


def internal_error() -> ApiError:
    """What the client learns of an uncaught exception (the log has the rest)."""
    return ApiError(500, "internal server error", type="server_error")


def failed_mid_stream(exc: BaseException) -> ApiError:
    """An unexpected failure after a stream's first frame: the status line is gone, an error frame says it."""
    return ApiError(500, f"generation failed: {exc}", type="server_error")


# ---- the layers below, in HTTP terms ----


ENGINE_REFUSALS = (EngineBusy, ContextOverflow, ValueError)
# What rendering a turn raises on purpose: the template's own faults and its variables' checks. Not ValueError: a bug
# while building a turn raises that too, and it is a 500, not a 400 that blames the request.
TURN_FAULTS = (ConstraintError, ThinkingUnsupported, TemplateRenderError, TemplateVariablesError)


def engine_refusal(exc: BaseException) -> BaseException:
    """The engine refuses in its own terms (busy, context overflow, a bad value); anything else passes as is."""
    if isinstance(exc, EngineBusy):
        return ApiError(429, f"all inference slots are busy: {exc}", type="inference_busy", code="inference_busy")
    if isinstance(exc, ContextOverflow):
        return bad_request(str(exc), param="max_tokens", code="context_length_exceeded")
    if isinstance(exc, ValueError):
        return bad_request(str(exc))
    return exc


def constraint_error(exc: ConstraintError, param: str | None = None) -> ApiError:
    """A constraint that cannot be built or compiled: a 400 naming the field (the error's own, else `param`)."""
    return bad_request(str(exc), param=exc.param or param, code="invalid_constraint")


def turn_error(exc: ConstraintError | ThinkingUnsupported | TemplateRenderError | TemplateVariablesError) -> ApiError:
    """A fault met while rendering a turn (one of TURN_FAULTS), named in chat's fields."""
    if isinstance(exc, ConstraintError):
        return constraint_error(exc)
    if isinstance(exc, ThinkingUnsupported):
        return ApiError(501, str(exc), param="reasoning_effort", code="thinking_not_supported")
    if isinstance(exc, TemplateRenderError):
        return bad_request(str(exc), param="messages", code="template_error")
    return bad_request(str(exc), param=exc.param)


def unfit_answer(exc: OutputError) -> ApiError:
    """A forced tool call the model failed to write, or a JSON answer that is not what response_format asked
    for, is a 422: the request was fine, the answer is not what it demanded, and the client can act on that
    (retry, another seed, a larger max_tokens or model). A 5xx would say the server broke, which it did not."""
    return ApiError(422, str(exc), type="model_output_error", param=exc.param, code=exc.code)


def renamed(error: ApiError, params: Mapping[str, str], words: Mapping[str, str] | None = None) -> ApiError:
    """`error` in another API's field names: the shared layers name chat's fields (`messages`, `max_tokens`...).
    When its field is one of `params`, the field is renamed, and each of `words` in its message too."""
    if error.param in params:
        error.param = params[error.param]
        for old, new in (words or {}).items():
            error.message = error.message.replace(old, new)
    return error
