"""An in-memory Triton for tests: ``Client(transport=MemoryTransport(server))``.

``FakeServer`` holds models whose answers are Python functions: ``handler(inputs) ->
outputs`` for ordinary models, ``stream(inputs) -> iterable of responses`` for decoupled
ones. A handler raises ``StatusError(status, message)`` to answer like Triton does (400,
``NOT_FOUND`` ...). ``delay`` makes a model slow (``math.inf``: it never answers). Every call
is recorded in ``server.calls``; streams that were closed early in ``server.cancelled``.
Nothing here touches the network, so a whole client test runs in milliseconds.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tritonhf._wire.transport import Endpoint, StatusError, Tensors
from tritonhf.tasks import PARAM_TASK, get_task

Handler = Callable[[Tensors], Mapping[str, Any]]
StreamHandler = Callable[[Tensors], Iterable[Mapping[str, Any]]]

__all__ = ["AsyncMemoryTransport", "FakeModel", "FakeServer", "MemoryTransport", "StatusError", "task_config"]


def task_config(
    name: str, task: str, max_batch_size: int = 8, output_dims: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The config JSON Triton would report for a gallery model of ``task``."""
    spec = get_task(task)
    dims = dict(output_dims or {})

    def tensor(item: Any) -> dict[str, Any]:
        shape = [dims[item.name]] if item.name in dims else list(item.dims)
        return {"name": item.name, "data_type": item.data_type, "dims": shape}

    return {
        "name": name,
        "max_batch_size": max_batch_size,
        "input": [tensor(item) for item in spec.inputs],
        "output": [tensor(item) for item in spec.outputs],
        "parameters": {PARAM_TASK: {"string_value": spec.name}},
        "model_transaction_policy": {"decoupled": spec.decoupled},
    }


@dataclass
class FakeModel:
    config: dict[str, Any]
    handler: Handler | None = None
    stream: StreamHandler | None = None
    state: str = "READY"
    delay: float = 0.0  # seconds before each answer (each streamed response); math.inf: never


@dataclass
class FakeServer:
    models: dict[str, FakeModel] = field(default_factory=dict)
    calls: list[tuple[str, int]] = field(default_factory=list)  # (model, rows) per infer
    streams: int = 0
    cancelled: list[str] = field(default_factory=list)  # models whose stream the client closed early
    index_requests: int = 0
    config_requests: int = 0
    failures: list[Exception] = field(default_factory=list)  # raised by the next calls, first first
    ready: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(
        self,
        name: str,
        task: str,
        handler: Handler | None = None,
        *,
        stream: StreamHandler | None = None,
        max_batch_size: int = 8,
        output_dims: Mapping[str, int] | None = None,
        delay: float = 0.0,
    ) -> FakeModel:
        model = FakeModel(task_config(name, task, max_batch_size, output_dims), handler, stream, delay=delay)
        self.models[name] = model
        return model

    def _pop_failure(self) -> None:
        with self.lock:
            failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            raise failure

    def model(self, name: str) -> FakeModel:
        self._pop_failure()
        model = self.models.get(name)
        if model is None:
            raise StatusError(404, f"Request for unknown model: '{name}' is not found")
        if model.state != "READY":
            raise StatusError(404, f"Request for unknown model: '{name}' has no available versions")
        return model

    def infer(self, name: str, inputs: Tensors, outputs: list[str]) -> Tensors:
        model = self.model(name)
        rows = len(next(iter(inputs.values()))) if inputs else 0
        limit = int(model.config.get("max_batch_size", 0))
        if limit and rows > limit:
            raise StatusError(400, f"inference request batch-size must be <= {limit} for '{name}'")
        if model.handler is None:
            raise StatusError(501, "HTTP end point doesn't support models with decoupled transaction policy")
        with self.lock:
            self.calls.append((name, rows))
        answer = model.handler(inputs)
        return {key: np.asarray(answer[key]) for key in outputs}

    def open(self, name: str, inputs: Tensors) -> tuple[FakeModel, Iterator[Mapping[str, Any]]]:
        model = self.model(name)
        if model.stream is None:
            raise StatusError(400, f"model '{name}' does not stream")
        with self.lock:
            self.streams += 1
        return model, iter(model.stream(inputs))

    def index(self) -> list[Mapping[str, Any]]:
        self._pop_failure()
        with self.lock:
            self.index_requests += 1
        return [{"name": name, "version": "1", "state": model.state} for name, model in self.models.items()]

    def config(self, name: str) -> Mapping[str, Any]:
        with self.lock:
            self.config_requests += 1
        return self.model(name).config


ENDPOINT = Endpoint("http", "memory.invalid", 8000)


def _wait(delay: float, timeout: float) -> None:
    if delay > timeout:
        time.sleep(min(timeout, 3600.0))
        raise TimeoutError(f"no answer within {timeout:.3g} s")
    time.sleep(delay)


class _MemoryStream:
    def __init__(self, server: FakeServer, model: FakeModel, responses: Iterator[Mapping[str, Any]], name: str) -> None:
        self._server, self._model, self._responses, self._name = server, model, responses, name
        self._finished = False
        self._closed = False

    def _advance(self) -> Mapping[str, Any] | None:
        try:
            return next(self._responses)
        except StopIteration:
            self._finished = True
            return None

    def next(self, timeout: float) -> Mapping[str, Any] | None:
        _wait(self._model.delay, timeout)
        return self._advance()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if not self._finished:
                self._server.cancelled.append(self._name)


class MemoryTransport:
    """The sync transport interface, answered by a ``FakeServer`` in this process."""

    def __init__(self, server: FakeServer, endpoint: Endpoint = ENDPOINT) -> None:
        self.server = server
        self.endpoint = endpoint

    def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors:
        _wait(self.server.models[model].delay if model in self.server.models else 0.0, timeout)
        return self.server.infer(model, inputs, outputs)

    def open_stream(self, model: str, inputs: Tensors, timeout: float) -> _MemoryStream:
        found, responses = self.server.open(model, inputs)
        return _MemoryStream(self.server, found, responses, model)

    def model_config(self, model: str, timeout: float) -> Mapping[str, Any]:
        return self.server.config(model)

    def repository_index(self, timeout: float) -> list[Mapping[str, Any]]:
        return self.server.index()

    def load_model(self, model: str, timeout: float) -> None:
        self.server.model(model).state = "READY"

    def unload_model(self, model: str, timeout: float) -> None:
        self.server.model(model).state = "UNAVAILABLE"

    def is_ready(self, timeout: float) -> bool:
        if not self.server.ready:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        return True

    def is_model_ready(self, model: str, timeout: float) -> bool:
        return model in self.server.models and self.server.models[model].state == "READY"

    def statistics(self, model: str, timeout: float) -> Mapping[str, Any]:
        return {
            "model_stats": [
                {"name": name, "calls": sum(1 for m, _ in self.server.calls if m == name)}
                for name in self.server.models
                if not model or name == model
            ]
        }

    def server_metadata(self, timeout: float) -> Mapping[str, Any]:
        return {"name": "triton", "version": "memory"}

    def close(self) -> None:
        pass


class _AsyncMemoryStream:
    def __init__(self, stream: _MemoryStream) -> None:
        self._stream = stream

    async def next(self, timeout: float) -> Mapping[str, Any] | None:
        delay = self._stream._model.delay
        if delay > timeout:
            await asyncio.sleep(min(timeout, 3600.0))
            raise TimeoutError(f"no answer within {timeout:.3g} s")
        await asyncio.sleep(delay)
        return self._stream._advance()

    async def close(self) -> None:
        self._stream.close()


class AsyncMemoryTransport:
    """The async transport interface over the same ``FakeServer``."""

    def __init__(self, server: FakeServer, endpoint: Endpoint = ENDPOINT) -> None:
        self._sync = MemoryTransport(server, endpoint)
        self.server = server
        self.endpoint = endpoint

    async def infer(self, model: str, inputs: Tensors, outputs: list[str], timeout: float) -> Tensors:
        delay = self.server.models[model].delay if model in self.server.models else 0.0
        if delay > timeout:
            await asyncio.sleep(min(timeout, 3600.0))
            raise TimeoutError(f"no answer within {timeout:.3g} s")
        await asyncio.sleep(delay)
        return self.server.infer(model, inputs, outputs)

    async def open_stream(self, model: str, inputs: Tensors, timeout: float) -> _AsyncMemoryStream:
        return _AsyncMemoryStream(self._sync.open_stream(model, inputs, timeout))

    async def model_config(self, model: str, timeout: float) -> Mapping[str, Any]:
        return self._sync.model_config(model, timeout)

    async def repository_index(self, timeout: float) -> list[Mapping[str, Any]]:
        return self._sync.repository_index(timeout)

    async def is_ready(self, timeout: float) -> bool:
        return self._sync.is_ready(timeout)

    async def is_model_ready(self, model: str, timeout: float) -> bool:
        return self._sync.is_model_ready(model, timeout)

    async def statistics(self, model: str, timeout: float) -> Mapping[str, Any]:
        return self._sync.statistics(model, timeout)

    async def close(self) -> None:
        pass


NEVER = math.inf  # delay= for a model that never answers
