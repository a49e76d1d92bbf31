"""A stand-in for ``triton_python_backend_utils`` so templates run outside the Triton stub.

It mimics the few parts templates use: Tensor, InferenceResponse, TritonError, the input
lookup, and a response sender for decoupled models. Requests carry numpy arrays exactly
as the stub hands them over (BYTES as object arrays of bytes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class TritonError:
    INTERNAL = 13
    INVALID_ARG = 3

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
        self.error = error

    def has_error(self) -> bool:
        return self.error is not None

    def output(self, name: str) -> np.ndarray:
        return next(t.as_numpy() for t in self.output_tensors if t.name() == name)


class ResponseSender:
    def __init__(self) -> None:
        self.responses: list[InferenceResponse] = []
        self.closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self.closed:
            raise RuntimeError("response sent after the final flag")
        if response is not None:
            self.responses.append(response)
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.closed = True


class InferenceRequest:
    def __init__(self, **inputs: Any) -> None:
        self.inputs = {name: Tensor(name, value) for name, value in inputs.items()}
        self.sender = ResponseSender()

    def get_response_sender(self) -> ResponseSender:
        return self.sender


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return request.inputs.get(name)


def texts(*values: str | bytes) -> np.ndarray:
    """A BYTES input of shape [n, 1], as the stub delivers it."""
    return np.array([[v if isinstance(v, bytes) else v.encode()] for v in values], dtype=np.object_)
