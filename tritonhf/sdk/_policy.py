"""The SDK's call policy, free of I/O: one deadline per call, what is retried and how long
to wait, which model a call means, and how rows are split into chunks and merged back.

``Client`` and ``AsyncClient`` are thin shells over this module and ``_plans`` (what each task
sends and how its answer reads) and ``_generation`` (streams); the unit tests exercise all
three through the in-memory transport.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tritonhf._wire.config import ModelConfig
from tritonhf.errors import (
    AmbiguousModelError,
    ClientError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    RequestTimeoutError,
    ServerBusyError,
    ServerUnavailableError,
)
from tritonhf.sdk.results import (
    ModelInfo,
)
from tritonhf.tasks import TASKS

Array = np.ndarray[Any, Any]
Tensors = dict[str, Array]

# Worth retrying within a call's deadline: the server restarting, a model being loaded or repaired.
TRANSIENT: tuple[type[ClientError], ...] = (ServerUnavailableError, ModelNotReadyError)
DIRECTORY_TTL_S = 5.0  # how long a model list / config is trusted without asking again


# ---------------------------------------------------------------------------- time


class Deadline:
    """One deadline for a whole call: retries, chunks and streams all spend from it."""

    def __init__(
        self, seconds: float, clock: Callable[[], float] = time.monotonic, unreachable: float | None = None
    ) -> None:
        """``unreachable``: seconds an unreachable server is retried within the call (None: until the deadline)."""
        if seconds <= 0:
            raise InvalidInputError(f"timeout must be a positive number of seconds, not {seconds!r}.")
        if unreachable is not None and unreachable < 0:
            raise InvalidInputError(f"unavailable_timeout must be >= 0 seconds, not {unreachable!r}.")
        self.seconds = seconds
        self.unreachable = unreachable
        self._clock = clock
        self._start = clock()
        self._end = self._start + seconds

    def remaining(self) -> float:
        return max(self._end - self._clock(), 0.0)

    def elapsed(self) -> float:
        return self._clock() - self._start

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def timeout_error(self, model: str | None, what: str = "answer") -> RequestTimeoutError:
        where = f"Model '{model}'" if model else "The server"
        return RequestTimeoutError(
            f"{where} did not {what} within the call's timeout of {self.seconds:g} s. Raise timeout= or send less.",
            model,
        )


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): 0.1, 0.2, 0.4 ... at most 2."""
    return float(min(0.1 * 2 ** max(attempt - 1, 0), 2.0))


def retry_delay(error: ClientError, attempt: int, deadline: Deadline) -> float | None:
    """How long to wait before trying again after ``error``, or None to raise it now."""
    if not isinstance(error, TRANSIENT):
        return None
    delay = backoff(attempt)
    if isinstance(error, ServerBusyError) and deadline.unreachable is not None:
        return None  # a caller that must answer fast (the gateway) passes the refusal on at once: its 429
    if isinstance(error, ServerUnavailableError) and deadline.unreachable is not None:
        # A caller that must answer fast (the gateway's 503) gives up on an unreachable server early.
        return delay if deadline.elapsed() + delay <= deadline.unreachable else None
    return delay if deadline.remaining() > delay else None


# ---------------------------------------------------------------------------- models and configs


def model_infos(index: Sequence[Mapping[str, Any]], configs: Mapping[str, ModelConfig]) -> list[ModelInfo]:
    """The repository index as ``ModelInfo``s; ready models get their task and batch size from ``configs``."""
    found = []
    for entry in index:
        name, state = str(entry.get("name", "")), str(entry.get("state", "UNKNOWN"))
        config = configs.get(name)
        found.append(
            ModelInfo(
                name,
                str(entry.get("version", "")),
                state,
                config.task if config else None,
                config.max_batch_size if config else 0,
                str(entry.get("reason", "")),
                config.instances if config else 1,
                config.batch_invariant if config else True,
                config.matryoshka if config else False,
                config.reasoning if config else False,
                config.engine if config else "",
                config.engine_reason if config else "",
                config.images if config else None,
            )
        )
    return found


def choose_model(models: Sequence[ModelInfo], tasks: Sequence[str], url: str) -> str:
    """The single ready model of the first task in ``tasks`` that has any; a clear error otherwise."""
    ready = [info for info in models if info.ready]
    for task in tasks:
        candidates = [info.name for info in ready if info.task == task]
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            raise AmbiguousModelError(
                f"Several ready {task} models: {', '.join(candidates)}. Pass model=NAME to choose one."
            )
    others = ", ".join(f"{i.name} ({i.task or 'no task'})" for i in ready) or "none"
    raise AmbiguousModelError(
        f"No ready {' or '.join(tasks)} model on {url}. Ready models: {others}. Add one with "
        f"`tritonhf gallery add {tasks[0]} --model ...`, or pass model=NAME."
    )


class Directory:
    """Model lists and configs, trusted for ``ttl`` seconds, forgotten at once when a call says stale.

    ``model=None`` costs one repository index request per ``ttl`` (not per call); a model that
    answers not-found or not-ready is dropped, so a re-added model's new config is read again.
    """

    def __init__(self, ttl: float = DIRECTORY_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._models: tuple[float, list[ModelInfo]] | None = None
        self._configs: dict[str, tuple[float, ModelConfig]] = {}

    def _fresh(self, stamp: float) -> bool:
        return self._clock() - stamp < self.ttl

    def models(self) -> list[ModelInfo] | None:
        if self._models is not None and self._fresh(self._models[0]):
            return self._models[1]
        return None

    def store_models(self, models: list[ModelInfo]) -> None:
        self._models = (self._clock(), models)

    def config(self, name: str) -> ModelConfig | None:
        entry = self._configs.get(name)
        return entry[1] if entry is not None and self._fresh(entry[0]) else None

    def store_config(self, config: ModelConfig) -> None:
        self._configs[config.name] = (self._clock(), config)

    def forget(self, name: str | None, error: ClientError) -> None:
        """After ``error`` from model ``name``: drop what may be stale (a busy model's config is not)."""
        if isinstance(error, ServerBusyError):
            return
        if isinstance(error, (ModelNotFoundError, ModelNotReadyError, InvalidInputError, ServerUnavailableError)):
            self._models = None
            if name is not None:
                self._configs.pop(name, None)


# ---------------------------------------------------------------------------- chunks


def rows_per_request(config: ModelConfig) -> int:
    """Rows one request carries: ``max_batch_size``, or one for a decoupled model (a streaming speech model),
    whose answers come as a stream of one request's parts (and Triton's JSON generate routes take one row)."""
    return 1 if config.decoupled else config.max_batch_size


def response_tensors(response: Mapping[str, Any], names: Sequence[str]) -> Tensors:
    """One streamed response as [1, ...] arrays: gRPC streams send arrays, the generate routes JSON values."""
    tensors = {}
    for name in names:
        value = response[name]
        if isinstance(value, str):
            value = np.array(value.encode(), dtype=np.object_)
        tensors[name] = np.asarray(value).reshape(1, -1)
    return tensors


def chunks(rows: int, max_batch_size: int) -> list[slice]:
    """Rows split into slices of at most ``max_batch_size`` (one slice when the model does not batch)."""
    return split(slice(0, rows), max_batch_size)


def split(rows: slice, max_batch_size: int) -> list[slice]:
    """``rows`` split into slices of at most ``max_batch_size`` rows."""
    count = rows.stop - rows.start
    size = max_batch_size if max_batch_size > 0 else max(count, 1)
    return [slice(start, min(start + size, rows.stop)) for start in range(rows.start, rows.stop, size)]


# Output padding that readers tell from data (tasks.TensorSpec.pad): ORDER's -1, say.
_PADS = {spec.name: spec.pad for task in TASKS.values() for spec in task.outputs if spec.pad is not None}


def merge(parts: Sequence[Tensors], names: Sequence[str]) -> Tensors:
    """The chunks' outputs concatenated along the batch axis, in chunk order.

    Chunks may return arrays of different widths (LABELS or a reranker's ORDER padded per
    chunk, TOKEN_EMBEDDINGS padded to each chunk's longest text): they are padded to the widest
    on every axis after the first before joining, with the value the task's contract gives that
    output (``TensorSpec.pad``: -1 for ORDER), else empty strings or 0.
    """
    if len(parts) == 1:
        return dict(parts[0])
    merged = {}
    for name in names:
        found = [part.get(name) for part in parts]
        arrays = [array for array in found if array is not None]
        if len(arrays) < len(found):  # an optional output some chunk did not send: not merged
            continue
        if arrays[0].ndim >= 2 and len({array.shape[1:] for array in arrays}) > 1:
            widest = tuple(max(sizes) for sizes in zip(*(array.shape[1:] for array in arrays)))
            fill: Any = b"" if arrays[0].dtype == np.object_ else _PADS.get(name, 0)
            grown = []
            for array in arrays:
                padded = np.full((len(array), *widest), fill, array.dtype)
                padded[tuple(slice(0, size) for size in array.shape)] = array
                grown.append(padded)
            arrays = grown
        merged[name] = np.concatenate(arrays)
    return merged


def never_answered(model: str, deadline: Deadline) -> ClientError:
    return deadline.timeout_error(model, "finish the stream")
