"""The error table: statuses and messages recorded from Triton 2.51, each mapped to its type."""

from __future__ import annotations

import pytest

from tritonhf._wire.transport import StatusError
from tritonhf.errors import (
    ClientError,
    ContextLengthError,
    InferenceError,
    InputTooLargeError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    PermissionDeniedError,
    RequestCancelledError,
    RequestTimeoutError,
    ServerBusyError,
    ServerUnavailableError,
)
from tritonhf.sdk._errors import error_for, translate

# (gRPC status, HTTP status, message) as Triton 2.51 answered them (see tests/integration for the live check).
RECORDED: list[tuple[str, int, str, type[ClientError]]] = [
    ("StatusCode.NOT_FOUND", 404, "Request for unknown model: 'nope' is not found", ModelNotFoundError),
    ("StatusCode.NOT_FOUND", 404, "Request for unknown model: 'clf' has no available versions", ModelNotReadyError),
    (
        "StatusCode.INVALID_ARGUMENT",
        400,
        "inference input 'TEXT' data-type is 'FP32', but model 'clf' expects 'BYTES'",
        InvalidInputError,
    ),
    ("StatusCode.INVALID_ARGUMENT", 400, "input 'TEXT' item 0 is not valid UTF-8", InvalidInputError),
    ("StatusCode.INTERNAL", 500, "Failed to process the request(s) for model 'raiser_0_0'", InferenceError),
    ("StatusCode.INTERNAL", 500, "Stub process 'clf_0_0' is not healthy.", ModelNotReadyError),
    ("StatusCode.UNIMPLEMENTED", 501, "doesn't support models with decoupled transaction policy", InvalidInputError),
    ("StatusCode.UNAVAILABLE", 403, "This API is restricted, expecting header 'tritonhf-key'", PermissionDeniedError),
    ("StatusCode.DEADLINE_EXCEEDED", 504, "Deadline Exceeded", RequestTimeoutError),
    ("StatusCode.CANCELLED", 499, "Cancelled", RequestCancelledError),
    ("StatusCode.UNAVAILABLE", 503, "failed to connect to all addresses", ServerUnavailableError),
    ("StatusCode.UNAVAILABLE", 503, "Exceeds maximum queue size", ServerBusyError),  # max_queue_size
    (
        "StatusCode.INVALID_ARGUMENT",
        400,
        "input 'TEXT' is longer than the model's context length of 512 tokens. Shorten it, or send truncate=true",
        ContextLengthError,
    ),
    (  # the media templates refuse a file from its header (max_image_pixels, max_audio_seconds)
        "StatusCode.INVALID_ARGUMENT",
        400,
        "input 'AUDIO' is 3,700.0 s long, over the limit of 3,600 s (parameter max_audio_seconds); send less.",
        InputTooLargeError,
    ),
]


@pytest.mark.parametrize(("grpc", "http", "message", "expected"), RECORDED)
def test_both_protocols_give_the_same_type(grpc: str, http: int, message: str, expected: type) -> None:
    assert type(error_for(grpc, message, "m", "grpc://h:1")) is expected
    assert type(error_for(http, message, "m", "http://h:1")) is expected


def test_status_decides_over_text() -> None:
    # A model's own message that happens to contain "input '" is still a 500: the model failed.
    assert type(error_for(500, "ValueError: input 'x' broke", "m", "u")) is InferenceError
    # A 400 whose text mentions nothing known is still invalid input.
    assert type(error_for("StatusCode.INVALID_ARGUMENT", "whatever", "m", "u")) is InvalidInputError


def test_text_only_inside_streams() -> None:
    assert type(error_for("", "input 'max_tokens' is -5", "m", "u")) is InvalidInputError
    assert type(error_for("", "Request for unknown model: 'nope' is not found", "m", "u")) is ModelNotFoundError
    assert type(error_for("", "generation failed: index out of range", "m", "u")) is InferenceError


def test_low_level_failures() -> None:
    assert type(translate(ConnectionRefusedError(111, "refused"), "m", "u")) is ServerUnavailableError
    assert type(translate(TimeoutError("timed out"), "m", "u")) is RequestTimeoutError
    assert type(translate(TimeoutError("x"), "m", "u")) is RequestTimeoutError
    assert type(translate(StatusError(404, "Request for unknown model: 'x' is not found"), "m", "u")) is (
        ModelNotFoundError
    )
    from geventhttpclient.response import HTTPConnectionClosed

    assert type(translate(HTTPConnectionClosed("connection closed."), "m", "u")) is ServerUnavailableError
    import aiohttp

    assert type(translate(aiohttp.ServerDisconnectedError(), "m", "u")) is ServerUnavailableError
    error = translate(StatusError(400, "input 'TOP_K' is 0"), "clf", "http://h:1")
    assert isinstance(error, ValueError) and "clf" in str(error) and "TOP_K" in str(error)


def test_busy_and_context_length_inside_streams_and_from_a_proxy() -> None:
    busy = "Exceeds maximum queue size: 64 requests are already waiting"
    assert type(error_for("", busy, "m", "u")) is ServerBusyError
    assert type(error_for("", "input 'text_input' has 9000 tokens ... context length of 8192", "m", "u")) is (
        ContextLengthError
    )
    assert type(error_for(429, "Too Many Requests", "m", "u")) is ServerBusyError
    assert type(error_for("StatusCode.RESOURCE_EXHAUSTED", "Received message larger than max", "m", "u")) is (
        InvalidInputError
    ), "gRPC's size limit stays an input error"
