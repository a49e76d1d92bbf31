"""Asynchronous transports: ``tritonclient.grpc.aio`` and ``tritonclient.http.aio``.

The same interface as ``_transport.Transport``, awaitable. Real async I/O, no threads:

* gRPC: one ``tritonclient.grpc.aio`` client per event loop (a grpc.aio channel belongs to
  the loop that made it); streams are bidirectional gRPC calls, and cancelling one (task
  cancellation, ``aclose()``, a timeout) cancels the request on the server.
* HTTP: ``tritonclient.http.aio`` (aiohttp) for unary calls; streams read Triton's
  ``generate_stream`` server-sent events through the same aiohttp session, and closing the
  response closes the connection, which cancels the request.

Every call runs under ``bounded`` with the call's remaining deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from tritonhf._wire.transport import (
    Endpoint,
    StatusError,
    Tensors,
    datatype,
    grpc_channel_args,
    grpc_headers,
    json_body,
    sse_error,
    sse_event,
    stream_outputs,
)

T = TypeVar("T")


class AsyncStreamHandle(Protocol):
    async def next(self, timeout: float) -> Mapping[str, Any] | None: ...

    async def close(self) -> None: ...


class AsyncTransport(Protocol):
    endpoint: Endpoint

    async def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors: ...

    async def open_stream(self, model: str, inputs: Tensors, timeout: float) -> AsyncStreamHandle: ...

    async def model_config(self, model: str, timeout: float) -> Mapping[str, Any]: ...

    async def repository_index(self, timeout: float) -> list[Mapping[str, Any]]: ...

    async def is_ready(self, timeout: float) -> bool: ...

    async def is_model_ready(self, model: str, timeout: float) -> bool: ...

    async def statistics(self, model: str, timeout: float) -> Mapping[str, Any]: ...

    async def close(self) -> None: ...


async def bounded(awaitable: Awaitable[T], timeout: float) -> T:
    """``awaitable`` within ``timeout`` seconds; a TimeoutError (mapped by the caller) after.

    Not ``asyncio.wait_for``: before Python 3.12, when the caller is cancelled just as the awaitable
    finishes, it returns the result and the cancellation is lost (CPython gh-86296). A stream read
    finishes often, so a gateway whose client had left went on reading the generation to its end.
    Here a cancellation always propagates, after the awaitable itself is cancelled and has ended.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(timeout, 0.001))
    except asyncio.CancelledError:
        await cancel_and_wait(task)
        raise
    if not done:
        await cancel_and_wait(task)
        raise TimeoutError(f"no answer within {timeout:.3g} s")
    return task.result()


async def cancel_and_wait(task: asyncio.Future[T]) -> None:
    """Cancels ``task`` and waits until it has ended (its own exception, if any, is not raised here)."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved: asyncio would log it as never retrieved


async def all_or_none(works: Iterable[Awaitable[T]]) -> list[T]:
    """Every result of ``works``, run at once, in their order. At the first failure the others are cancelled, and
    waited for (their requests and streams close, so Triton stops computing them), before it is raised:
    ``asyncio.gather`` would leave them running to their end, holding the model's slots for an answer no one will
    read."""
    tasks = [asyncio.ensure_future(work) for work in works]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:  # all at once, then waited for: none generates while another closes
            task.cancel()
        await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: asyncio would log it as never retrieved
        raise


class _PerLoop:
    """One client per running event loop, made on first use in that loop."""

    def __init__(self) -> None:
        self._clients: dict[int, Any] = {}

    def get(self, make: Any) -> Any:
        loop = id(asyncio.get_running_loop())
        if loop not in self._clients:
            self._clients[loop] = make()
        return self._clients[loop]

    def take_all(self) -> list[Any]:
        clients, self._clients = list(self._clients.values()), {}
        return clients


class _AioGrpcStream:
    def __init__(self, responses: Any) -> None:
        self._responses = responses
        self._iterator: AsyncIterator[Any] = responses.__aiter__()
        self._done = False

    async def next(self, timeout: float) -> Mapping[str, Any] | None:
        while not self._done:
            try:
                result, error = await bounded(self._iterator.__anext__(), timeout)
            except StopAsyncIteration:
                return None
            if error is not None:
                raise error
            outputs, self._done = stream_outputs(result)
            if outputs:
                return outputs
        return None

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._responses.cancel()  # cancels the request on the server


class AsyncGrpcTransport:
    def __init__(
        self, endpoint: Endpoint, headers: Mapping[str, str] | None = None, ca_file: str | None = None
    ) -> None:
        import tritonclient.grpc.aio as grpcaio

        self._aio = grpcaio
        self.endpoint = endpoint
        self._headers = grpc_headers(headers or {})
        self._ca_file = ca_file
        self._clients = _PerLoop()

    @property
    def _client(self) -> Any:
        return self._clients.get(
            lambda: self._aio.InferenceServerClient(
                self.endpoint.address,
                ssl=self.endpoint.tls,
                root_certificates=self._ca_file,
                channel_args=grpc_channel_args(self.endpoint),
            )
        )

    def headers(self) -> dict[str, str]:
        """A fresh copy per call: tritonclient adds its own headers to the dict it is given."""
        return dict(self._headers)

    def _inputs(self, inputs: Tensors) -> list[Any]:
        wire = []
        for name, array in inputs.items():
            tensor = self._aio.InferInput(name, list(array.shape), datatype(array))
            tensor.set_data_from_numpy(array)
            wire.append(tensor)
        return wire

    async def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors:
        requested = [self._aio.InferRequestedOutput(name) for name in outputs]
        call = self._client.infer(
            model, self._inputs(inputs), outputs=requested, client_timeout=timeout, headers=self.headers()
        )
        result = await bounded(call, timeout + 0.5)  # gRPC's own deadline fires first
        return {name: result.as_numpy(name) for name in outputs}

    async def open_stream(self, model: str, inputs: Tensors, timeout: float) -> AsyncStreamHandle:
        request = {"model_name": model, "inputs": self._inputs(inputs), "enable_empty_final_response": True}

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request

        responses = self._client.stream_infer(requests(), stream_timeout=timeout, headers=self.headers())
        return _AioGrpcStream(responses)

    async def model_config(self, model: str, timeout: float) -> Mapping[str, Any]:
        call = self._client.get_model_config(model, as_json=True, client_timeout=timeout, headers=self.headers())
        return dict(await bounded(call, timeout + 0.5))

    async def repository_index(self, timeout: float) -> list[Mapping[str, Any]]:
        call = self._client.get_model_repository_index(as_json=True, client_timeout=timeout, headers=self.headers())
        return list((await bounded(call, timeout + 0.5)).get("models", []))

    async def is_ready(self, timeout: float) -> bool:
        return bool(
            await bounded(self._client.is_server_ready(headers=self.headers(), client_timeout=timeout), timeout)
        )

    async def is_model_ready(self, model: str, timeout: float) -> bool:
        call = self._client.is_model_ready(model, headers=self.headers(), client_timeout=timeout)
        return bool(await bounded(call, timeout + 0.5))

    async def statistics(self, model: str, timeout: float) -> Mapping[str, Any]:
        call = self._client.get_inference_statistics(
            model, as_json=True, client_timeout=timeout, headers=self.headers()
        )
        return dict(await bounded(call, timeout + 0.5))

    async def close(self) -> None:
        for client in self._clients.take_all():
            with contextlib.suppress(Exception):
                await client.close()


class _AioSseStream:
    def __init__(self, response: Any) -> None:
        self._response = response

    async def next(self, timeout: float) -> Mapping[str, Any] | None:
        while True:
            line = await bounded(self._response.content.readline(), timeout)
            if not line:
                return None
            event = sse_event(line)
            if event is not None:
                return event

    async def close(self) -> None:
        self._response.close()  # closes the connection: Triton cancels the request


class AsyncHttpTransport:
    def __init__(
        self, endpoint: Endpoint, headers: Mapping[str, str] | None = None, ca_file: str | None = None
    ) -> None:
        import tritonclient.http.aio as httpaio

        self._aio = httpaio
        self.endpoint = endpoint
        self._headers = dict(headers or {})
        self._ssl = ssl.create_default_context(cafile=ca_file) if endpoint.tls else None
        self._clients = _PerLoop()

    def headers(self) -> dict[str, str]:
        """A fresh copy per call: tritonclient adds its own headers to the dict it is given."""
        return dict(self._headers)

    @property
    def _client(self) -> Any:
        return self._clients.get(
            lambda: self._aio.InferenceServerClient(
                self.endpoint.address, ssl=self.endpoint.tls, ssl_context=self._ssl, conn_timeout=3600.0
            )
        )

    async def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors:
        wire = []
        for name, array in inputs.items():
            tensor = self._aio.InferInput(name, list(array.shape), datatype(array))
            tensor.set_data_from_numpy(array, binary_data=True)
            wire.append(tensor)
        requested = [self._aio.InferRequestedOutput(name, binary_data=True) for name in outputs]
        call = self._client.infer(model, wire, outputs=requested, headers=self.headers())
        result = await bounded(call, timeout)
        return {name: result.as_numpy(name) for name in outputs}

    async def open_stream(self, model: str, inputs: Tensors, timeout: float) -> AsyncStreamHandle:
        session = self._client._stub  # tritonclient's own aiohttp session: one connection pool
        path = f"/v2/models/{urllib.parse.quote(model, safe='')}/generate_stream"
        response = await bounded(
            session.post(
                f"{self.endpoint.url}{path}",
                data=json_body(inputs),
                headers={"Content-Type": "application/json", **self.headers()},
            ),
            timeout,
        )
        if response.status != 200:
            body = await response.read()
            response.close()
            raise StatusError(response.status, sse_error(body))
        return _AioSseStream(response)

    async def model_config(self, model: str, timeout: float) -> Mapping[str, Any]:
        return dict(await bounded(self._client.get_model_config(model, headers=self.headers()), timeout))

    async def repository_index(self, timeout: float) -> list[Mapping[str, Any]]:
        return list(await bounded(self._client.get_model_repository_index(headers=self.headers()), timeout))

    async def is_ready(self, timeout: float) -> bool:
        return bool(await bounded(self._client.is_server_ready(headers=self.headers()), timeout))

    async def is_model_ready(self, model: str, timeout: float) -> bool:
        return bool(await bounded(self._client.is_model_ready(model, headers=self.headers()), timeout))

    async def statistics(self, model: str, timeout: float) -> Mapping[str, Any]:
        return dict(await bounded(self._client.get_inference_statistics(model, headers=self.headers()), timeout))

    async def close(self) -> None:
        for client in self._clients.take_all():
            with contextlib.suppress(Exception):
                await client.close()


def connect_async(
    endpoint: Endpoint, headers: Mapping[str, str] | None = None, ca_file: str | None = None
) -> AsyncTransport:
    if endpoint.protocol == "grpc":
        return AsyncGrpcTransport(endpoint, headers, ca_file)
    return AsyncHttpTransport(endpoint, headers, ca_file)
