"""One mapping from the SDK's error types to HTTP statuses, and the two error bodies the gateway speaks.

OpenAI routes answer ``{"error": {"message", "type", "param", "code"}}``; TEI routes answer
``{"error": ..., "error_type": ...}``. Statuses: 400 bad input, 401 no or wrong key, 404
unknown model, 413 an image or audio over the model's limit, 503 a model being loaded or
repaired (or the server away), 504 timeout, 500 the model failed.
"""

from __future__ import annotations

import uuid
from typing import Any

from tritonhf import errors

# error type -> (HTTP status, OpenAI error type, OpenAI code)
STATUSES: dict[type[errors.ClientError], tuple[int, str, str]] = {
    errors.ContextLengthError: (400, "invalid_request_error", "context_length_exceeded"),  # before its base class
    errors.InputTooLargeError: (413, "invalid_request_error", "input_too_large"),  # refused before decoding
    errors.InvalidInputError: (400, "invalid_request_error", "invalid_value"),
    errors.AmbiguousModelError: (404, "invalid_request_error", "model_not_found"),
    errors.ModelNotFoundError: (404, "invalid_request_error", "model_not_found"),
    errors.ModelNotReadyError: (503, "server_error", "model_not_ready"),
    errors.ServerBusyError: (429, "rate_limit_error", "model_overloaded"),  # before its base class; with Retry-After
    errors.ServerUnavailableError: (503, "server_error", "server_unavailable"),
    errors.PermissionDeniedError: (403, "permission_error", "permission_denied"),
    errors.RequestTimeoutError: (504, "server_error", "timeout"),
    errors.RequestCancelledError: (499, "server_error", "cancelled"),
    errors.WrongProtocolError: (503, "server_error", "server_unavailable"),  # the gateway's own URL to Triton
}


class GatewayError(Exception):
    """An answer with an error status, raised anywhere in a route."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code
        self.ident: str | None = None  # the request id of an internal error (internal_error)

    @classmethod
    def of(cls, error: errors.ClientError, param: str | None = None) -> GatewayError:
        for kind, (status, openai_type, code) in STATUSES.items():
            if isinstance(error, kind):
                return cls(status, error.message, openai_type, param, code)
        return cls(500, error.message, "server_error", param, "inference_error")

    @classmethod
    def of_tei(cls, error: errors.ClientError, param: str | None = None) -> GatewayError:
        """As ``of``, with TEI's status for a too-long input (413; its router's "Validation" error)."""
        found = cls.of(error, param)
        if isinstance(error, errors.ContextLengthError):
            found.status = 413
        return found

    def openai_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def tei_body(self) -> dict[str, Any]:
        kinds = {400: "Validation", 404: "Validation", 413: "Validation", 429: "Overloaded", 503: "Overloaded",
                 504: "Overloaded"}  # fmt: skip
        return {"error": self.message, "error_type": kinds.get(self.status, "Backend")}


def refused(param: str, why: str) -> GatewayError:
    return GatewayError(400, f"'{param}' {why}", "invalid_request_error", param, "unsupported_parameter")


def empty(param: str) -> GatewayError:
    """TEI's "cannot be empty" answer (an empty list, or a text with nothing in it)."""
    return GatewayError(400, f"'{param}' cannot be empty: send at least one non-empty text.", param=param,
                        code="empty_input")  # fmt: skip


def internal_error(log: Any, what: str, error: BaseException) -> GatewayError:
    """A fault no route foresaw: logged with the traceback under a request id, and answered (a JSON 500, or an event
    in a stream already started) with the same id, so the caller's report finds the log line."""
    ident = uuid.uuid4().hex[:16]
    log.error("request %s: %s failed", ident, what, exc_info=error)
    found = GatewayError(500, f"Internal error in the gateway (request id {ident}, in its log with the traceback).",
                         "server_error", code="internal_error")  # fmt: skip
    found.ident = ident
    return found
