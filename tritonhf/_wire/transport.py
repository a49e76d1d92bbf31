"""Synchronous transports: tritonclient's HTTP and gRPC clients behind one small interface.

A transport only moves tensors. It takes a timeout per call (the caller's remaining
deadline), raises whatever the wire raised (``_errors.translate`` maps it), and knows
nothing about tasks. ``Endpoint`` parses URLs once for both the sync and async transports.

* gRPC: one ``tritonclient.grpc`` client shared by all threads (unary calls are
  thread-safe); each stream gets a private client, since tritonclient allows one stream
  per client, and closing a stream cancels its request on the server.
* HTTP: ``tritonclient.http`` runs on gevent, whose hub belongs to one thread, so each
  thread gets its own client; the transport holds them weakly, so a thread that ends
  takes its client with it. A call's timeout is a ``gevent.Timeout`` around it (the client
  itself only has one network timeout for its whole life). Streams use Triton's
  ``generate_stream`` route (server-sent events) over ``http.client``, with the socket
  timeout set to the remaining deadline before every read.
* Loopback connections never go through a proxy (``http_proxy`` is for the outside world).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import json
import queue
import threading
import urllib.parse
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tritonhf.errors import InvalidInputError

Array = np.ndarray[Any, Any]
Tensors = dict[str, Array]
API_KEY_HEADER = "tritonhf-key"  # the header a restricted Triton API checks (gRPC adds a prefix)
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
SCHEMES = {"http": 8000, "https": 8000, "grpc": 8001, "grpcs": 8001}


@dataclass(frozen=True)
class Endpoint:
    """A parsed server URL: ``http://h:p``, ``grpc://h:p``, ``grpcs://h:p`` (TLS) or ``https://h:p``."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        text = url if "://" in url else "http://" + url
        try:
            parts = urllib.parse.urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise InvalidInputError(
                f"URL {url!r} is not valid ({exc}); use http://HOST:PORT or grpc://HOST:PORT."
            ) from exc
        if parts.scheme not in SCHEMES:
            raise InvalidInputError(
                f"URL {url!r} must start with http://, grpc://, grpcs:// (TLS) or https://, not {parts.scheme}://."
            )
        if parts.path not in ("", "/") or parts.query:
            raise InvalidInputError(f"URL {url!r} must be just a scheme, a host and a port (no path).")
        return cls(parts.scheme, parts.hostname or "127.0.0.1", port or SCHEMES[parts.scheme])

    @property
    def protocol(self) -> str:
        return "grpc" if self.scheme.startswith("grpc") else "http"

    @property
    def tls(self) -> bool:
        return self.scheme in ("grpcs", "https")

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class StreamHandle(Protocol):
    """One open generation stream: responses as dicts of outputs, until ``None``."""

    def next(self, timeout: float) -> Mapping[str, Any] | None: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What ``Client`` needs from the wire; ``timeout`` is always the call's remaining deadline."""

    endpoint: Endpoint

    def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors: ...

    def open_stream(self, model: str, inputs: Tensors, timeout: float) -> StreamHandle: ...

    def model_config(self, model: str, timeout: float) -> Mapping[str, Any]: ...

    def repository_index(self, timeout: float) -> list[Mapping[str, Any]]: ...

    def load_model(self, model: str, timeout: float) -> None: ...

    def unload_model(self, model: str, timeout: float) -> None: ...

    def is_ready(self, timeout: float) -> bool: ...

    def is_model_ready(self, model: str, timeout: float) -> bool: ...

    def statistics(self, model: str, timeout: float) -> Mapping[str, Any]: ...

    def server_metadata(self, timeout: float) -> Mapping[str, Any]: ...

    def close(self) -> None: ...


class StatusError(Exception):
    """An HTTP error answer outside tritonclient (streams): its status and the server's message."""

    def __init__(self, status: int | str, message: str) -> None:
        super().__init__(message)
        self._status, self._message = str(status), message

    def status(self) -> str:
        return self._status

    def message(self) -> str:
        return self._message


def datatype(array: Array) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))


def json_body(inputs: Tensors) -> bytes:
    """Inputs as the generate extension's JSON: one value per name (a list for several). JSON carries text, so
    bytes that are not UTF-8 (an encoded file) travel as a base64 ``data:`` URI, which the media templates read."""

    def text(item: bytes) -> str:
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError:
            return "data:application/octet-stream;base64," + base64.b64encode(item).decode("ascii")

    def value(array: Array) -> Any:
        items = [text(v) if isinstance(v, bytes) else v.item() for v in array.reshape(-1)]
        return items[0] if len(items) == 1 else items

    return json.dumps({name: value(array) for name, array in inputs.items()}).encode()


def sse_error(body: bytes) -> str:
    """The message of an error answer: ``data: {"error": ...}`` lines or a JSON body."""
    text = body.decode("utf-8", "replace")
    for line in text.splitlines():
        if line.startswith("data:"):
            with contextlib.suppress(ValueError):
                return str(json.loads(line[5:]).get("error", line[5:]))
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(text).get("error", text))
    return text.strip() or "no message"


def sse_event(line: bytes) -> Mapping[str, Any] | None:
    """One ``data: {...}`` line as a dict, None for other lines; an error event raises (no status: mid-stream)."""
    text = line.decode("utf-8").strip()
    if not text.startswith("data:"):
        return None
    event = json.loads(text[5:])
    if "error" in event:
        raise StatusError("", str(event["error"]))
    return dict(event)


def grpc_channel_args(endpoint: Endpoint) -> list[tuple[str, Any]]:
    """tritonclient's default channel options, plus: no proxy for loopback."""
    from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions

    keepalive = KeepAliveOptions()
    args: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
    ]
    if endpoint.is_loopback:
        args.append(("grpc.enable_http_proxy", 0))
    return args


def grpc_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Triton's gRPC restriction checks a header under this prefix (HTTP uses the bare name)."""
    return {f"{GRPC_HEADER_PREFIX}{key}": value for key, value in headers.items()}


def stream_outputs(result: Any) -> tuple[dict[str, Any], bool]:
    """(outputs, is_final) of one gRPC stream response."""
    response = result.get_response()
    outputs = {tensor.name: result.as_numpy(tensor.name) for tensor in response.outputs}
    final = response.parameters.get("triton_final_response")
    return outputs, bool(final is not None and final.bool_param)


class _GrpcStream:
    def __init__(self, client: Any, model: str, inputs: list[Any], timeout: float, headers: dict[str, str]) -> None:
        self._client = client
        self._answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self._done = False
        client.start_stream(
            callback=lambda result=None, error=None: self._answers.put((result, error)),
            stream_timeout=timeout,
            headers=headers,
        )
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)

    def next(self, timeout: float) -> Mapping[str, Any] | None:
        while not self._done:
            try:
                result, error = self._answers.get(timeout=max(timeout, 0.001))
            except queue.Empty:
                raise TimeoutError("no response from the stream within the call's timeout") from None
            if error is not None:
                raise error
            outputs, self._done = stream_outputs(result)
            if outputs:
                return outputs
        return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.stop_stream(cancel_requests=True)  # cancels the request on the server
        with contextlib.suppress(Exception):
            self._client.close()


class GrpcTransport:
    """tritonclient.grpc: one shared client for unary calls, a private one per stream."""

    def __init__(
        self, endpoint: Endpoint, headers: Mapping[str, str] | None = None, ca_file: str | None = None
    ) -> None:
        import tritonclient.grpc as grpcclient

        self._grpc = grpcclient
        self.endpoint = endpoint
        self._headers = grpc_headers(headers or {})
        self._ca_file = ca_file
        self._client = self._new_client()

    def _new_client(self) -> Any:
        return self._grpc.InferenceServerClient(
            self.endpoint.address,
            ssl=self.endpoint.tls,
            root_certificates=self._ca_file,
            channel_args=grpc_channel_args(self.endpoint),
        )

    def headers(self) -> dict[str, str]:
        """A fresh copy per call: tritonclient adds its own headers to the dict it is given."""
        return dict(self._headers)

    def _inputs(self, inputs: Tensors) -> list[Any]:
        wire = []
        for name, array in inputs.items():
            tensor = self._grpc.InferInput(name, list(array.shape), datatype(array))
            tensor.set_data_from_numpy(array)
            wire.append(tensor)
        return wire

    def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors:
        requested = [self._grpc.InferRequestedOutput(name) for name in outputs]
        result = self._client.infer(
            model, self._inputs(inputs), outputs=requested, client_timeout=timeout, headers=self.headers()
        )
        return {name: result.as_numpy(name) for name in outputs}

    def open_stream(self, model: str, inputs: Tensors, timeout: float) -> StreamHandle:
        client = self._new_client()
        try:
            return _GrpcStream(client, model, self._inputs(inputs), timeout, self._headers)
        except BaseException:
            client.close()
            raise

    def model_config(self, model: str, timeout: float) -> Mapping[str, Any]:
        return dict(self._client.get_model_config(model, as_json=True, client_timeout=timeout, headers=self.headers()))

    def repository_index(self, timeout: float) -> list[Mapping[str, Any]]:
        index = self._client.get_model_repository_index(as_json=True, client_timeout=timeout, headers=self.headers())
        return list(index.get("models", []))

    def load_model(self, model: str, timeout: float) -> None:
        self._client.load_model(model, client_timeout=timeout, headers=self.headers())

    def unload_model(self, model: str, timeout: float) -> None:
        self._client.unload_model(model, client_timeout=timeout, headers=self.headers())

    def is_ready(self, timeout: float) -> bool:
        return bool(self._client.is_server_ready(client_timeout=timeout, headers=self.headers()))

    def is_model_ready(self, model: str, timeout: float) -> bool:
        return bool(self._client.is_model_ready(model, client_timeout=timeout, headers=self.headers()))

    def statistics(self, model: str, timeout: float) -> Mapping[str, Any]:
        return dict(
            self._client.get_inference_statistics(model, as_json=True, client_timeout=timeout, headers=self.headers())
        )

    def server_metadata(self, timeout: float) -> Mapping[str, Any]:
        return dict(self._client.get_server_metadata(as_json=True, client_timeout=timeout, headers=self.headers()))

    def close(self) -> None:
        self._client.close()


class _SseStream:
    """Triton's ``generate_stream`` (server-sent events) over http.client, read against a deadline."""

    def __init__(self, endpoint: Endpoint, model: str, body: bytes, headers: dict[str, str], timeout: float) -> None:
        connection_class = http.client.HTTPSConnection if endpoint.tls else http.client.HTTPConnection
        self._connection = connection_class(endpoint.host, endpoint.port, timeout=max(timeout, 0.001))
        try:
            path = f"/v2/models/{urllib.parse.quote(model, safe='')}/generate_stream"
            self._connection.request("POST", path, body, {"Content-Type": "application/json", **headers})
            self._response = self._connection.getresponse()
            if self._response.status != 200:
                # An error before the stream started carries its real status (400, 404 ...).
                raise StatusError(self._response.status, sse_error(self._response.read()))
        except BaseException:
            self._connection.close()
            raise

    def next(self, timeout: float) -> Mapping[str, Any] | None:
        sock = self._connection.sock
        if sock is not None:
            sock.settimeout(max(timeout, 0.001))
        while True:
            try:
                line = self._response.readline()
            except http.client.IncompleteRead as exc:
                raise ConnectionError(f"the stream broke off before it was complete ({exc})") from exc
            if not line:
                return None
            event = sse_event(line)
            if event is not None:
                return event

    def close(self) -> None:
        self._connection.close()  # Triton sees the client go and cancels the request


class HttpTransport:
    """tritonclient.http (one client per calling thread, held weakly); SSE for streams."""

    def __init__(
        self, endpoint: Endpoint, headers: Mapping[str, str] | None = None, ca_file: str | None = None
    ) -> None:
        import tritonclient.http as httpclient

        self._http = httpclient
        self.endpoint = endpoint
        self._headers = dict(headers or {})
        self._ca_file = ca_file
        self._local = threading.local()
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()

    def headers(self) -> dict[str, str]:
        """A fresh copy per call: tritonclient adds its own headers to the dict it is given."""
        return dict(self._headers)

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            options = {"ca_certs": self._ca_file} if self._ca_file else None
            client = self._http.InferenceServerClient(
                self.endpoint.address, ssl=self.endpoint.tls, ssl_options=options, network_timeout=3600.0
            )
            self._local.client = client
            self._live.add(client)
        return client

    def _bounded(self, timeout: float, action: Any) -> Any:
        """``action(client)`` within ``timeout`` seconds (a gevent timeout in this thread's hub)."""
        import gevent

        client = self._client()
        try:
            with gevent.Timeout(max(timeout, 0.001), TimeoutError(f"no answer within {timeout:.3g} s")):
                return action(client)
        except TimeoutError:
            self._drop(client)  # its connection is mid-request: never reuse it
            raise

    def _drop(self, client: Any) -> None:
        self._local.client = None
        self._live.discard(client)
        with contextlib.suppress(Exception):
            client.close()

    def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors:
        wire = []
        for name, array in inputs.items():
            tensor = self._http.InferInput(name, list(array.shape), datatype(array))
            tensor.set_data_from_numpy(array, binary_data=True)
            wire.append(tensor)
        requested = [self._http.InferRequestedOutput(name, binary_data=True) for name in outputs]
        result = self._bounded(timeout, lambda c: c.infer(model, wire, outputs=requested, headers=self.headers()))
        return {name: result.as_numpy(name) for name in outputs}

    def open_stream(self, model: str, inputs: Tensors, timeout: float) -> StreamHandle:
        return _SseStream(self.endpoint, model, json_body(inputs), self.headers(), timeout)

    def model_config(self, model: str, timeout: float) -> Mapping[str, Any]:
        return dict(self._bounded(timeout, lambda c: c.get_model_config(model, headers=self.headers())))

    def repository_index(self, timeout: float) -> list[Mapping[str, Any]]:
        return list(self._bounded(timeout, lambda c: c.get_model_repository_index(headers=self.headers())))

    def load_model(self, model: str, timeout: float) -> None:
        self._bounded(timeout, lambda c: c.load_model(model, headers=self.headers()))

    def unload_model(self, model: str, timeout: float) -> None:
        self._bounded(timeout, lambda c: c.unload_model(model, headers=self.headers()))

    def is_ready(self, timeout: float) -> bool:
        return bool(self._bounded(timeout, lambda c: c.is_server_ready(headers=self.headers())))

    def is_model_ready(self, model: str, timeout: float) -> bool:
        return bool(self._bounded(timeout, lambda c: c.is_model_ready(model, headers=self.headers())))

    def statistics(self, model: str, timeout: float) -> Mapping[str, Any]:
        return dict(self._bounded(timeout, lambda c: c.get_inference_statistics(model, headers=self.headers())))

    def server_metadata(self, timeout: float) -> Mapping[str, Any]:
        return dict(self._bounded(timeout, lambda c: c.get_server_metadata(headers=self.headers())))

    def close(self) -> None:
        for client in list(self._live):
            with contextlib.suppress(Exception):  # a client of a finished thread may not close cleanly
                client.close()
        self._live.clear()


def connect(endpoint: Endpoint, headers: Mapping[str, str] | None = None, ca_file: str | None = None) -> Transport:
    if endpoint.protocol == "grpc":
        return GrpcTransport(endpoint, headers, ca_file)
    return HttpTransport(endpoint, headers, ca_file)
