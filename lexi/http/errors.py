"""Every failure leaves the server in OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

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
