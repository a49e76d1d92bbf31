"""tritonclient's HTTP and gRPC clients behind one small interface, and error translation.

``translate_error`` is the one place where low-level failures (tritonclient exceptions,
gRPC status codes, socket errors) become the documented ``tritonhf.errors`` tree.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from tritonhf.errors import (
    ClientError,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServerUnavailableError,
)

_INVALID_INPUT_HINTS = (
    "data-type",
    "unexpected shape",
    "batch-size must be",
    "missing required input",
    "unexpected inference input",
    "input '",
    "must be",
)


def translate_error(exc: BaseException, model: str | None, url: str) -> ClientError:
    """The documented error for a low-level failure, keeping the server's own message."""
    if isinstance(exc, ClientError):
        return exc
    message = _message_of(exc)
    status = _status_of(exc)
    lowered = message.lower()
    where = f"model '{model}'" if model else "the server"
    if "is restricted" in lowered:
        return PermissionDeniedError(
            f"The server at {url} restricts this API ({message}). Pass api_key= (or set TRITONHF_API_KEY) "
            "with the key in the server's WORKSPACE/run/api-key.",
            model,
        )
    if isinstance(exc, (TimeoutError, socket.timeout)) or "deadline" in status.lower() or "timed out" in lowered:
        return RequestTimeoutError(
            f"The request to {where} at {url} did not finish in time ({message}). Raise timeout= or send less.", model
        )
    if isinstance(exc, (ConnectionError, OSError)) or "unavailable" in status.lower() or "connection" in lowered:
        return ServerUnavailableError(
            f"No Triton server answers at {url} ({message}). Start one with `tritonhf up`, or set "
            "TRITONHF_URL / url= to where it runs.",
            model,
        )
    if "no available versions" in lowered or "is not ready" in lowered or "not healthy" in lowered:
        # Known but not loaded: loading, being repaired (unload + load), or its stub died.
        return ModelNotReadyError(
            f"Model '{model}' is not ready ({message}). It may be loading or being repaired; check "
            "`tritonhf status`, or restart the server.",
            model,
        )
    if "unknown model" in lowered or ("not found" in lowered and "model" in lowered) or status in ("404",):
        return ModelNotFoundError(
            f"The server at {url} has no model '{model}' ({message}). `tritonhf models` lists what it serves.", model
        )
    if "unavailable" in lowered:
        return ModelNotReadyError(f"Model '{model}' is not available ({message}). Check `tritonhf status`.", model)
    if status in ("400", "StatusCode.INVALID_ARGUMENT") or any(hint in lowered for hint in _INVALID_INPUT_HINTS):
        return InvalidInputError(f"Model '{model}' refused the input: {message}", model)
    return InferenceError(f"Model '{model}' failed while running the request: {message}", model)


def _message_of(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    if callable(message):
        message = message()
    return str(message or exc or type(exc).__name__)


def _status_of(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    if callable(status):
        status = status()
    return str(status or "")


def parse_url(url: str) -> tuple[str, str]:
    """``(protocol, host:port)`` from ``http://h:p`` or ``grpc://h:p`` (no scheme means http)."""
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "grpc"):
        raise ValueError(f"URL {url!r} must start with http:// or grpc://.")
    default_port = 8001 if parts.scheme == "grpc" else 8000
    return parts.scheme, f"{parts.hostname or '127.0.0.1'}:{parts.port or default_port}"


class Transport(Protocol):
    protocol: str
    url: str

    def infer(
        self, model: str, inputs: dict[str, np.ndarray[Any, Any]], outputs: list[str], timeout: float
    ) -> dict[str, np.ndarray[Any, Any]]: ...

    def stream(self, model: str, inputs: dict[str, np.ndarray[Any, Any]], timeout: float) -> Iterator[str]: ...

    def model_config(self, model: str) -> dict[str, Any]: ...

    def repository_index(self) -> list[dict[str, Any]]: ...

    def is_ready(self) -> bool: ...

    def statistics(self, model: str = "") -> dict[str, Any]: ...

    def close(self) -> None: ...


def _json_value(array: np.ndarray[Any, Any]) -> Any:
    values = [v.decode("utf-8") if isinstance(v, bytes) else v.item() for v in array.reshape(-1)]
    return values[0] if len(values) == 1 else values


class HttpTransport:
    """tritonclient.http for inference; Triton's generate_stream (SSE) for streaming."""

    protocol = "http"

    def __init__(
        self, address: str, concurrency: int = 8, timeout: float = 60.0, headers: dict[str, str] | None = None
    ) -> None:
        import tritonclient.http as httpclient

        self._headers = headers or {}
        self._http = httpclient
        self.address = address
        self.url = f"http://{address}"
        self._timeout = timeout
        # tritonclient.http runs on gevent, whose hub belongs to one thread: one client per thread.
        self._local = threading.local()
        self._clients: list[Any] = []
        self._lock = threading.Lock()

    @property
    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._http.InferenceServerClient(
                self.address, connection_timeout=self._timeout, network_timeout=self._timeout
            )
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def infer(
        self, model: str, inputs: dict[str, np.ndarray[Any, Any]], outputs: list[str], timeout: float
    ) -> dict[str, np.ndarray[Any, Any]]:
        wire = []
        for name, array in inputs.items():
            tensor = self._http.InferInput(name, list(array.shape), _datatype(array))
            tensor.set_data_from_numpy(array, binary_data=True)
            wire.append(tensor)
        requested = [self._http.InferRequestedOutput(name, binary_data=True) for name in outputs]
        result = self._client.infer(model, wire, outputs=requested)
        return {name: result.as_numpy(name) for name in outputs}

    def stream(self, model: str, inputs: dict[str, np.ndarray[Any, Any]], timeout: float) -> Iterator[str]:
        body = json.dumps({name: _json_value(array) for name, array in inputs.items()}).encode()
        host, port = self.address.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            connection.request(
                "POST",
                f"/v2/models/{urllib.parse.quote(model)}/generate_stream",
                body,
                {"Content-Type": "application/json"},
            )
            response = connection.getresponse()
            if response.status != 200:
                raise _HttpStatusError(response.status, _error_text(response.read()))
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    raise _HttpStatusError(400, str(event["error"]))
                text = event.get("text_output", "")
                if text:
                    yield str(text)
        except http.client.IncompleteRead as exc:
            raise ServerUnavailableError(
                f"The stream from model '{model}' broke off before it was complete ({exc}).", model
            ) from exc
        finally:
            connection.close()

    def model_config(self, model: str) -> dict[str, Any]:
        return dict(self._client.get_model_config(model))

    def repository_index(self) -> list[dict[str, Any]]:
        return list(self._client.get_model_repository_index(headers=self._headers))

    def is_ready(self) -> bool:
        return bool(self._client.is_server_ready())

    def statistics(self, model: str = "") -> dict[str, Any]:
        return dict(self._client.get_inference_statistics(model))

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            with contextlib.suppress(Exception):  # a client of a finished thread may not close cleanly
                client.close()


class _HttpStatusError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self._status = str(status)
        self._message = message

    def status(self) -> str:
        return self._status

    def message(self) -> str:
        return self._message


def _error_text(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", body.decode()))
    except ValueError:
        return body.decode("utf-8", "replace")


def _datatype(array: np.ndarray[Any, Any]) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))


class GrpcTransport:
    """tritonclient.grpc for inference and bidirectional streaming."""

    protocol = "grpc"

    def __init__(self, address: str, headers: dict[str, str] | None = None) -> None:
        import tritonclient.grpc as grpcclient

        # Triton's gRPC restriction checks the header under this prefix (HTTP uses the bare key).
        self._headers = {f"triton-grpc-protocol-{key}": value for key, value in (headers or {}).items()}
        self._grpc = grpcclient
        self.address = address
        self.url = f"grpc://{address}"
        self._client = grpcclient.InferenceServerClient(address)

    def _inputs(self, inputs: dict[str, np.ndarray[Any, Any]]) -> list[Any]:
        wire = []
        for name, array in inputs.items():
            tensor = self._grpc.InferInput(name, list(array.shape), _datatype(array))
            tensor.set_data_from_numpy(array)
            wire.append(tensor)
        return wire

    def infer(
        self, model: str, inputs: dict[str, np.ndarray[Any, Any]], outputs: list[str], timeout: float
    ) -> dict[str, np.ndarray[Any, Any]]:
        requested = [self._grpc.InferRequestedOutput(name) for name in outputs]
        result = self._client.infer(model, self._inputs(inputs), outputs=requested, client_timeout=timeout)
        return {name: result.as_numpy(name) for name in outputs}

    def stream(self, model: str, inputs: dict[str, np.ndarray[Any, Any]], timeout: float) -> Iterator[str]:
        # One stream per client connection: a private client lets streams run concurrently.
        client = self._grpc.InferenceServerClient(self.address)
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        deadline = time.monotonic() + timeout
        try:
            client.start_stream(callback=lambda result=None, error=None: answers.put((result, error)))
            client.async_stream_infer(model, self._inputs(inputs), enable_empty_final_response=True)
            while True:
                remaining = deadline - time.monotonic()
                try:
                    result, error = answers.get(timeout=max(remaining, 0.001))
                except queue.Empty:
                    raise RequestTimeoutError(
                        f"The stream from model '{model}' did not finish within {timeout:.0f} s.", model
                    ) from None
                if error is not None:
                    raise error
                response = result.get_response()
                if response.outputs:
                    text = result.as_numpy("text_output")
                    if text is not None and text.size:
                        chunk = text.reshape(-1)[0]
                        yield chunk.decode("utf-8") if isinstance(chunk, bytes) else str(chunk)
                final = response.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    return
        finally:
            client.stop_stream(cancel_requests=True)
            client.close()

    def model_config(self, model: str) -> dict[str, Any]:
        return dict(self._client.get_model_config(model, as_json=True).get("config", {}))

    def repository_index(self) -> list[dict[str, Any]]:
        return list(self._client.get_model_repository_index(headers=self._headers, as_json=True).get("models", []))

    def is_ready(self) -> bool:
        return bool(self._client.is_server_ready())

    def statistics(self, model: str = "") -> dict[str, Any]:
        return dict(self._client.get_inference_statistics(model, as_json=True))

    def close(self) -> None:
        self._client.close()


def connect(url: str, concurrency: int = 8, timeout: float = 60.0, headers: dict[str, str] | None = None) -> Transport:
    protocol, address = parse_url(url)
    if protocol == "grpc":
        return GrpcTransport(address, headers)
    return HttpTransport(address, concurrency=concurrency, timeout=timeout, headers=headers)
