"""The one place where a failure becomes a documented ``tritonhf.errors`` type.

The status decides: a gRPC status code or an HTTP status, looked up in ``RULES``. Triton
uses one code for two situations in a few places, and there a fragment of its own message
refines the answer (recorded from Triton 2.51; see ``tests/unit/test_sdk_errors.py``):

* NOT_FOUND / 404 is "unknown model", but also "has no available versions" (known, not
  loaded: being loaded or repaired, worth retrying);
* INTERNAL / 500 is "the model raised", but also "Stub process ... is not healthy" (its
  process died; the supervisor repairs it);
* UNAVAILABLE is "cannot connect", but also "This protocol is restricted" (no key).

Only where no status exists does the text alone decide (``TEXT_ONLY``): an error inside a
stream (a gRPC stream message, or an HTTP server-sent event after the stream started)
carries no code on either protocol. An error after the first chunk is always the model
failing (``InferenceError``): the templates check every input before they send anything.
"""

from __future__ import annotations

import http.client
import socket
import sys
from dataclasses import dataclass

from tritonhf import errors

# What an HTTP/1.1 parser says of the first bytes a gRPC (HTTP/2) port sends: its SETTINGS frame.
HTTP2_ANSWER = "Expected HTTP/"


@dataclass(frozen=True)
class Rule:
    """Statuses (gRPC code names, HTTP codes) and an optional message fragment -> an error type."""

    grpc: tuple[str, ...]
    http: tuple[int, ...]
    error: type[errors.ClientError]
    fragment: str = ""  # lower case; the rule applies only when the message contains it


# Refinements first: the first rule whose status and fragment match wins.
RULES: tuple[Rule, ...] = (
    Rule(("NOT_FOUND",), (404, 400), errors.ModelNotReadyError, "no available versions"),
    Rule(("NOT_FOUND",), (404,), errors.ModelNotFoundError),
    Rule(("INTERNAL",), (500,), errors.ModelNotReadyError, "is not healthy"),
    Rule(("UNAVAILABLE",), (403,), errors.PermissionDeniedError, "is restricted"),
    Rule(("PERMISSION_DENIED", "UNAUTHENTICATED"), (401, 403), errors.PermissionDeniedError),
    Rule(("INVALID_ARGUMENT",), (400,), errors.ContextLengthError, "context length"),
    Rule(("INVALID_ARGUMENT",), (400,), errors.InputTooLargeError, "over the limit of"),  # the media templates' wording
    Rule(("INVALID_ARGUMENT", "OUT_OF_RANGE", "FAILED_PRECONDITION"), (400, 413, 422), errors.InvalidInputError),
    Rule(("UNIMPLEMENTED",), (501,), errors.InvalidInputError),
    Rule(("DEADLINE_EXCEEDED",), (408, 504), errors.RequestTimeoutError),
    Rule(("CANCELLED",), (499,), errors.RequestCancelledError),
    Rule(("UNAVAILABLE",), (503,), errors.ServerBusyError, "exceeds maximum queue size"),
    Rule((), (429,), errors.ServerBusyError),  # a proxy's "too many requests"
    Rule(("UNAVAILABLE",), (502, 503), errors.ServerUnavailableError),
    Rule(("RESOURCE_EXHAUSTED",), (), errors.InvalidInputError),  # a message over gRPC's size limit
    Rule(("INTERNAL", "UNKNOWN", "DATA_LOSS", "ABORTED"), (500,), errors.InferenceError),
)

# Messages without a status (inside a stream): fragments of Triton's and the templates' own texts.
TEXT_ONLY: tuple[tuple[str, type[errors.ClientError]], ...] = (
    ("no available versions", errors.ModelNotReadyError),
    ("is not healthy", errors.ModelNotReadyError),
    ("unknown model", errors.ModelNotFoundError),
    ("is restricted", errors.PermissionDeniedError),
    ("context length", errors.ContextLengthError),  # before "input '": the templates' too-long texts say both
    ("over the limit of", errors.InputTooLargeError),
    ("input '", errors.InvalidInputError),  # the templates name the input they refuse
    ("missing required input", errors.InvalidInputError),
    ("unexpected shape", errors.InvalidInputError),
    ("data-type is", errors.InvalidInputError),
    ("cancelled", errors.RequestCancelledError),
    ("exceeds maximum queue size", errors.ServerBusyError),
)

_ADVICE: dict[type[errors.ClientError], str] = {
    errors.ModelNotFoundError: "`tritonhf models` lists what the server holds.",
    errors.ModelNotReadyError: "It may be loading or being repaired; check `tritonhf status`.",
    errors.PermissionDeniedError: (
        "This API is restricted on this endpoint: use the server's loopback address, or api_key=."
    ),
    errors.InvalidInputError: "",
    errors.ContextLengthError: "",
    errors.InputTooLargeError: "",
    errors.RequestTimeoutError: "Raise timeout= or send less.",
    errors.RequestCancelledError: "",
    errors.ServerBusyError: "The model is at its queue bound (overloaded): retry later, or add instances.",
    errors.ServerUnavailableError: "Start one with `tritonhf up`, or set TRITONHF_URL / url= to where it runs.",
    errors.InferenceError: "",
}


def status_name(status: object) -> str:
    """``StatusCode.NOT_FOUND`` or ``NOT_FOUND`` -> ``NOT_FOUND``; HTTP codes stay digits."""
    text = str(status or "")
    return text.rsplit(".", 1)[-1].upper() if text and not text.isdigit() else text


def error_for(status: object, message: str, model: str | None, url: str) -> errors.ClientError:
    """The error for a status (gRPC code name or HTTP code, "" when none) and the server's message."""
    name = status_name(status)
    lowered = message.lower()
    kind: type[errors.ClientError] | None = None
    if name:
        for rule in RULES:
            matches = int(name) in rule.http if name.isdigit() else name in rule.grpc
            if matches and rule.fragment in lowered:
                kind = rule.error
                break
    if kind is None:
        kind = next((error for fragment, error in TEXT_ONLY if fragment in lowered), errors.InferenceError)
    return make(kind, message, model, url)


def make(kind: type[errors.ClientError], message: str, model: str | None, url: str) -> errors.ClientError:
    """An error of ``kind`` whose message names the model, the server and what to do."""
    where = f"model '{model}' at {url}" if model else f"the server at {url}"
    if kind is errors.ServerBusyError:
        text = f"Model '{model}' is busy: {message}" if model else f"The server is busy: {message}"
    elif kind is errors.ServerUnavailableError:
        text = f"The server at {url} is unavailable ({message})."
    elif issubclass(kind, errors.InvalidInputError):
        text = f"Model '{model}' refused the input: {message}" if model else f"Refused: {message}"
    elif kind is errors.InferenceError:
        text = f"Model '{model}' failed while running the request: {message}"
    else:
        text = f"{where}: {message}"
    advice = _ADVICE.get(kind, "")
    return kind(f"{text} {advice}".strip(), model)


def translate(exc: BaseException, model: str | None, url: str) -> errors.ClientError:
    """The documented error for any low-level failure (tritonclient, grpc, aiohttp, sockets)."""
    if isinstance(exc, errors.ClientError):
        return exc
    message = _call_or_value(exc, "message") or str(exc) or type(exc).__name__
    if HTTP2_ANSWER in message:  # HTTP/1.1 parsers (geventhttpclient, aiohttp) reading a gRPC port's first frame
        return errors.WrongProtocolError(_wrong_protocol(url), model)
    status = _call_or_value(exc, "status") or _grpc_code(exc)
    if status and url.startswith("grpc://") and "socket closed" in message.lower():  # a port that hung up at once
        address = url.split("://", 1)[-1]
        message += f"; if {address} is Triton's HTTP port (8000 by default), use http://{address}"
    if status:
        return error_for(status, message, model, url)
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return make(errors.RequestTimeoutError, message, model, url)
    if isinstance(exc, _connection_errors()):
        return make(errors.ServerUnavailableError, message, model, url)
    return error_for("", message, model, url)


def _wrong_protocol(url: str) -> str:
    address = url.split("://", 1)[-1]
    return (
        f"{url} did not answer in HTTP/1.1: {address} speaks HTTP/2, as Triton's gRPC port does (8001 by default). "
        f"Use grpc://{address}, or the HTTP port (8000 by default) for HTTP."
    )


def _connection_errors() -> tuple[type[BaseException], ...]:
    """The types each wire library raises for a connection that failed or broke (those already imported)."""
    found: list[type[BaseException]] = [ConnectionError, OSError, http.client.HTTPException]
    for module, names in (
        ("geventhttpclient.response", ("HTTPParseError", "HTTPConnectionClosed")),  # tritonclient.http
        ("aiohttp", ("ClientConnectionError", "ServerDisconnectedError")),  # tritonclient.http.aio
    ):
        loaded = sys.modules.get(module)
        found += [getattr(loaded, name) for name in names if loaded is not None and hasattr(loaded, name)]
    return tuple(found)


def _call_or_value(exc: BaseException, name: str) -> str:
    value = getattr(exc, name, None)
    if callable(value):
        value = value()
    return str(value) if value else ""


def _grpc_code(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    if callable(code):  # grpc.RpcError / grpc.aio.AioRpcError
        try:
            return str(code())
        except Exception:
            return ""
    return ""
