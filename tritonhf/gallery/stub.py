"""A stand-in for ``triton_python_backend_utils``: a template runs in this process, outside the Triton stub.

It mimics the few parts templates use: Tensor, InferenceResponse, TritonError, the input
lookup, a response sender for decoupled models, and BLS (a request to another model by
name, answered by the function put in ``bls_models``). ``gallery add`` runs a template with it to check
its answers against the model's library (``gallery.inprocess``); tests drive templates with it. Requests
carry numpy arrays exactly as the stub hands them over (BYTES as object arrays of bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
# BLS: model name -> function {input name: array} -> {output name: array}
bls_models: dict[str, Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]] = {}


class TritonError:
    INTERNAL = 13
    INVALID_ARG = 3
    UNAVAILABLE = 14
    CANCELLED = 1

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self.code = code

    def message(self) -> str:
        return self._message


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self.output_tensors = output_tensors or []
        self._error = error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def output(self, name: str) -> np.ndarray:
        return next(t.as_numpy() for t in self.output_tensors if t.name() == name)


class ResponseSender:
    def __init__(self) -> None:
        self.responses: list[InferenceResponse] = []
        self.closed = False
        # A test sets it: the next N sends raise, as the stub's do when the server refuses a response.
        self.refusals = 0

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise RuntimeError("Unable to send response")
        if self.closed:
            raise RuntimeError("response sent after the final flag")
        if response is not None:
            self.responses.append(response)
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.closed = True


class InferenceRequest:
    """A request as a template receives it (``InferenceRequest(TEXT=...)``), or a BLS request it
    builds (``InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])``)."""

    def __init__(
        self,
        model_name: str | None = None,
        inputs: list[Tensor] | None = None,
        requested_output_names: list[str] | None = None,
        **named: Any,
    ) -> None:
        self.model_name = model_name
        self.inputs = {name: Tensor(name, value) for name, value in named.items()}
        self.inputs.update({tensor.name(): tensor for tensor in inputs or []})
        self.requested = requested_output_names or []
        self.sender = ResponseSender()
        self.cancelled = False  # a test sets it: the client went away

    def is_cancelled(self) -> bool:
        return self.cancelled

    def exec(self) -> InferenceResponse:
        if self.model_name not in bls_models:
            return InferenceResponse(error=TritonError(f"Request for unknown model: '{self.model_name}'"))
        outputs = bls_models[self.model_name]({name: t.as_numpy() for name, t in self.inputs.items()})
        return InferenceResponse([Tensor(name, outputs[name]) for name in self.requested])

    def get_response_sender(self) -> ResponseSender:
        return self.sender


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return request.inputs.get(name)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors if t.name() == name), None)


def texts(*values: str | bytes) -> np.ndarray:
    """A BYTES input of shape [n, 1], as the stub delivers it."""
    return np.array([[v if isinstance(v, bytes) else v.encode()] for v in values], dtype=np.object_)


class Metric:
    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None = None) -> None:
        self.family, self.labels, self.buckets = family, labels, buckets
        self.value = 0.0
        self.observations: list[float] = []

    def increment(self, value: float) -> None:
        self.value += value

    def set(self, value: float) -> None:
        self.value = value

    def observe(self, value: float) -> None:
        self.observations.append(value)


class MetricFamily:
    """Triton's custom metrics API (the stub's ``pb_utils.MetricFamily``), recorded in ``metric_families``."""

    COUNTER, GAUGE, HISTOGRAM = 0, 1, 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.description, self.kind = name, description, kind
        self.metrics: list[Metric] = []
        metric_families[name] = self

    def Metric(self, labels: dict[str, str], buckets: list[float] | None = None) -> Metric:
        if self.kind == MetricFamily.HISTOGRAM and not buckets:
            raise ValueError("a histogram needs buckets")
        metric = Metric(self, labels, buckets)
        self.metrics.append(metric)
        return metric


metric_families: dict[str, MetricFamily] = {}
