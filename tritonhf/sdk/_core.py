"""The pure part of the SDK: what to send, how to split it, how to read the answer.

No I/O happens here. ``Client`` and ``AsyncClient`` are thin shells that take a ``Plan``
from one of the task functions below, resolve the model, send each chunk through their
transport (sync or async) within one ``Deadline``, and hand the merged outputs back to
the plan's ``decode``. Everything that decides *what* a call means lives in this module,
once, for both shells; the unit tests exercise it through the in-memory transport.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from tritonhf._wire import codecs
from tritonhf._wire.config import ModelConfig
from tritonhf.errors import (
    AmbiguousModelError,
    ClientError,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    RequestTimeoutError,
    ServerBusyError,
    ServerUnavailableError,
)
from tritonhf.sdk.results import (
    Answer,
    Classification,
    Embeddings,
    Entity,
    FillMask,
    ModelInfo,
    Ranked,
    Usage,
    ZeroShotClassification,
)
from tritonhf.sdk.sampling import OPTIONS as SAMPLING_OPTIONS
from tritonhf.tasks import TASKS

R = TypeVar("R")
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


# ---------------------------------------------------------------------------- plans


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

    Chunks may return matrices of different widths (LABELS or a reranker's ORDER padded per
    chunk): they are padded to the widest before joining, with the value the task's contract
    gives that output (``TensorSpec.pad``: -1 for ORDER), else empty strings or 0.
    """
    if len(parts) == 1:
        return dict(parts[0])
    merged = {}
    for name in names:
        arrays = [part[name] for part in parts]
        if arrays[0].ndim == 2 and len({array.shape[1] for array in arrays}) > 1:
            width = max(array.shape[1] for array in arrays)
            fill: Any = b"" if arrays[0].dtype == np.object_ else _PADS.get(name, 0)
            arrays = [
                np.concatenate([array, np.full((len(array), width - array.shape[1]), fill, array.dtype)], axis=1)
                for array in arrays
            ]
        merged[name] = np.concatenate(arrays)
    return merged


@dataclass(frozen=True)
class Plan(Generic[R]):
    """One task call: which model, how many rows, how to build each chunk, how to read the answer."""

    tasks: tuple[str, ...]  # tasks to look for when model is None
    model: str | None
    rows: int
    build: Callable[[ModelConfig, slice], Tensors]
    outputs: Callable[[ModelConfig], list[str]]
    decode: Callable[[ModelConfig, Tensors], R]
    empty: Callable[[ModelConfig | None], R]  # the answer for zero rows (no request is sent)
    needs_model_for_empty: bool = False


def _check_model(model: str | None) -> str | None:
    if model is not None and (not isinstance(model, str) or not model):
        raise InvalidInputError(f"model must be a model name (str), not {model!r}.")
    return model


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, not {value!r}.")


ALL_LABELS = 10_000  # TOP_K for "every label": the templates return as many as the model has


def _truncate_inputs(config: ModelConfig, truncate: bool, rows: int) -> Tensors:
    """TRUNCATE only when it differs from the server's default (true), so older models still answer."""
    if truncate:
        return {}
    if "TRUNCATE" not in config.inputs:
        raise InvalidInputError(
            f"Model '{config.name}' was added by an older tritonhf and cannot refuse long texts (truncate=False). "
            "Re-add it with `tritonhf gallery add`, or leave truncate=True.",
            config.name,
        )
    return {"TRUNCATE": codecs.column(False, "BOOL", rows)}


def _truncated(config: ModelConfig, result: Tensors, rows: int) -> list[bool]:
    if "TRUNCATED" in result:
        return [bool(value) for value in result["TRUNCATED"].reshape(-1)]
    return [False] * rows


def _with_truncated(config: ModelConfig, names: list[str]) -> list[str]:
    return [*names, "TRUNCATED"] if "TRUNCATED" in config.outputs else names


def _ranked(labels: Array, scores: Array, truncated: bool, limit: int | None) -> list[Classification]:
    pairs = [(str(label), float(score)) for label, score in zip(labels, scores) if str(label)]
    return [Classification(label, score, truncated) for label, score in pairs[:limit]]


def classify(texts: str | Sequence[str], model: str | None, top_k: int | None, truncate: bool) -> Plan[Any]:
    """``Client.classify``: the best label per text, or the ``top_k`` best."""
    items, single = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise InvalidInputError(f"top_k must be a positive int, not {top_k!r}.")

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), **_truncate_inputs(config, truncate, count)}
        if top_k is not None and "TOP_K" in config.inputs:
            inputs["TOP_K"] = codecs.column(top_k, "INT32", count)
        return inputs

    def outputs(config: ModelConfig) -> list[str]:
        return _with_truncated(config, ["LABEL", "SCORE"] if top_k is None else ["LABELS", "SCORES"])

    def decode(config: ModelConfig, result: Tensors) -> Any:
        truncated = _truncated(config, result, len(items))
        if top_k is None:
            labels, scores = codecs.decode(result["LABEL"])[:, 0], result["SCORE"][:, 0]
            found: list[Any] = [
                Classification(str(label), float(score), cut) for label, score, cut in zip(labels, scores, truncated)
            ]
        else:
            found = [
                _ranked(labels, scores, cut, top_k)
                for labels, scores, cut in zip(codecs.decode(result["LABELS"]), result["SCORES"], truncated)
            ]
        return found[0] if single else found

    return Plan(
        ("text-classification", "zero-shot-classification"), model, len(items), build, outputs, decode, lambda _: []
    )


def classify_pairs(
    pairs: Sequence[tuple[str, str]], model: str | None, top_k: int | None, truncate: bool
) -> Plan[list[list[Classification]]]:
    """``Client.classify_pairs``: every label of each (text, text_pair), best first (NLI, cross-encoders)."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise InvalidInputError(f"pairs must be a list of (text, text_pair) tuples, not {type(pairs).__name__}.")
    for index, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidInputError(f"pairs[{index}] must be a (text, text_pair) tuple, not {pair!r:.60}.")
    firsts, _ = codecs.text_list([pair[0] for pair in pairs], "pairs[i][0]")
    seconds, _ = codecs.text_list([pair[1] for pair in pairs], "pairs[i][1]")
    _check_model(model)
    _check_flag("truncate", truncate)
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise InvalidInputError(f"top_k must be a positive int, not {top_k!r}.")

    def build(config: ModelConfig, rows: slice) -> Tensors:
        if "TEXT_PAIR" not in config.inputs:
            raise InvalidInputError(
                f"Model '{config.name}' takes no text pairs (an older tritonhf added it, or it is not a "
                "text-classification model): re-add it with `tritonhf gallery add`.", config.name
            )  # fmt: skip
        count = rows.stop - rows.start
        return {
            "TEXT": codecs.bytes_column(firsts[rows]),
            "TEXT_PAIR": codecs.bytes_column(seconds[rows]),
            "TOP_K": codecs.column(top_k or ALL_LABELS, "INT32", count),
            **_truncate_inputs(config, truncate, count),
        }

    def decode(config: ModelConfig, result: Tensors) -> list[list[Classification]]:
        truncated = _truncated(config, result, len(firsts))
        return [
            _ranked(labels, scores, cut, top_k)
            for labels, scores, cut in zip(codecs.decode(result["LABELS"]), result["SCORES"], truncated)
        ]

    return Plan(
        ("text-classification",),
        model,
        len(firsts),
        build,
        lambda config: _with_truncated(config, ["LABELS", "SCORES"]),
        decode,
        lambda _: [],
    )


def zero_shot(texts: str | Sequence[str], labels: Sequence[str] | None, model: str | None, truncate: bool) -> Plan[Any]:
    """``Client.zero_shot``: each text's candidate labels ranked (``labels`` for every text, or the model's)."""
    items, single = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    candidates = None
    if labels is not None:
        candidates, _ = codecs.text_list(labels, "labels")
        if not candidates or not all(label.strip() for label in candidates):
            raise InvalidInputError("labels must be a non-empty list of non-empty strings.")

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), **_truncate_inputs(config, truncate, count)}
        if candidates is not None:
            inputs["CANDIDATE_LABELS"] = codecs.bytes_matrix([candidates] * count)
        return inputs

    def decode(config: ModelConfig, result: Tensors) -> Any:
        truncated = _truncated(config, result, len(items))
        found = []
        for ranked, scores, cut in zip(codecs.decode(result["LABELS"]), result["SCORES"], truncated):
            pairs = [(str(label), float(score)) for label, score in zip(ranked, scores) if str(label)]
            found.append(ZeroShotClassification(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), cut))
        return found[0] if single else found

    return Plan(
        ("zero-shot-classification",),
        model,
        len(items),
        build,
        lambda config: _with_truncated(config, ["LABELS", "SCORES"]),
        decode,
        lambda _: [],
    )


AGGREGATIONS = ("none", "simple", "first", "average", "max")


def ner(texts: str | Sequence[str], model: str | None, aggregation: str | None) -> Plan[Any]:
    """``Client.ner``: entities per text with character offsets; long texts are read whole (windows)."""
    items, single = codecs.text_list(texts)
    _check_model(model)
    if aggregation is not None and aggregation not in AGGREGATIONS:
        raise InvalidInputError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, not {aggregation!r}.")

    def build(config: ModelConfig, rows: slice) -> Tensors:
        inputs = {"TEXT": codecs.bytes_column(items[rows])}
        if aggregation is not None:
            inputs["AGGREGATION"] = codecs.bytes_column([aggregation] * (rows.stop - rows.start))
        return inputs

    def decode(config: ModelConfig, result: Tensors) -> Any:
        found = [[Entity(**entity) for entity in json.loads(text)] for text in codecs.decode(result["ENTITIES"])[:, 0]]
        return found[0] if single else found

    return Plan(("token-classification",), model, len(items), build, lambda _: ["ENTITIES"], decode, lambda _: [])


def embed(
    texts: str | Sequence[str], model: str | None, normalize: bool | None, truncate: bool
) -> Plan[np.ndarray[Any, np.dtype[np.float32]]]:
    """``Client.embed``: one float32 vector per text, shape (n, dim)."""
    items, _ = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    if normalize is not None and not isinstance(normalize, bool):
        raise InvalidInputError(f"normalize must be True, False or None, not {normalize!r}.")

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), **_truncate_inputs(config, truncate, count)}
        if normalize is not None:
            inputs["NORMALIZE"] = codecs.column(normalize, "BOOL", count)
        return inputs

    def empty(config: ModelConfig | None) -> np.ndarray[Any, np.dtype[np.float32]]:
        dims = config.outputs.get("EMBEDDING", (0,)) if config is not None else (0,)
        return np.zeros((0, max(dims[-1], 0) if dims else 0), dtype=np.float32)

    return Plan(
        ("feature-extraction",),
        model,
        len(items),
        build,
        lambda _: ["EMBEDDING"],
        lambda _, result: result["EMBEDDING"].astype(np.float32),
        empty,
        needs_model_for_empty=model is not None,
    )


def embeddings(
    texts: str | Sequence[str], model: str | None, normalize: bool | None, truncate: bool
) -> Plan[Embeddings]:
    """``Client.embeddings``: ``embed`` with token counts and truncation flags (for usage figures)."""
    plain = embed(texts, model, normalize, truncate)

    def outputs(config: ModelConfig) -> list[str]:
        return [name for name in ("EMBEDDING", "TRUNCATED", "TOKENS") if name in config.outputs]

    def decode(config: ModelConfig, result: Tensors) -> Embeddings:
        rows = len(result["EMBEDDING"])
        tokens = tuple(int(v) for v in result["TOKENS"].reshape(-1)) if "TOKENS" in result else (0,) * rows
        return Embeddings(result["EMBEDDING"].astype(np.float32), tokens, tuple(_truncated(config, result, rows)))

    return Plan(
        plain.tasks,
        plain.model,
        plain.rows,
        plain.build,
        outputs,
        decode,
        lambda config: Embeddings(plain.empty(config), (), ()),
        plain.needs_model_for_empty,
    )


def rerank(
    query: str, documents: Sequence[str], model: str | None, top_n: int | None, truncate: bool
) -> Plan[list[Ranked]]:
    """``Client.rerank``: documents by relevance to ``query``, best first; one request per
    ``max_batch_size`` documents, merged back in order."""
    check_prompt(query, "query")
    docs, _ = codecs.text_list(documents, "documents")
    if not docs:
        raise InvalidInputError("documents must hold at least one document.")
    empty = [index for index, doc in enumerate(docs) if not doc.strip()]
    if empty:
        raise InvalidInputError(f"documents[{empty[0]}] is empty: every document needs some text.")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise InvalidInputError(f"top_n must be a positive int, not {top_n!r}.")
    _check_model(model)
    _check_flag("truncate", truncate)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        inputs = {"QUERY": codecs.bytes_column([query]), "DOCUMENTS": codecs.bytes_matrix([docs[rows]])}
        return {**inputs, **_truncate_inputs(config, truncate, 1)}

    def decode(config: ModelConfig, result: Tensors) -> list[Ranked]:
        scores: list[float] = []
        cut: list[bool] = []
        for row in range(len(result["ORDER"])):  # one row per request; padding has ORDER -1
            count = int((result["ORDER"][row] >= 0).sum())
            scores += [float(value) for value in result["SCORES"][row, :count]]
            cut += (
                [bool(value) for value in result["TRUNCATED"][row, :count]]
                if "TRUNCATED" in result
                else [False] * count
            )
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_n]
        return [Ranked(i, scores[i], docs[i], cut[i]) for i in order]

    def outputs(config: ModelConfig) -> list[str]:
        return [name for name in ("SCORES", "ORDER", "TRUNCATED") if name in config.outputs]

    return Plan(("text-ranking",), model, len(docs), build, outputs, decode, lambda _: [])


def answer(question: str, context: str, model: str | None, top_k: int | None) -> Plan[Any]:
    """``Client.answer``: the best span of ``context`` (or the ``top_k`` best) answering ``question``."""
    check_prompt(question, "question")
    if not isinstance(context, str):
        raise InvalidInputError(f"context must be a str, not {type(context).__name__}.")
    if not question.strip() or not context.strip():
        raise InvalidInputError("question and context must both hold some text.")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 100):
        raise InvalidInputError(f"top_k must be an int from 1 to 100, not {top_k!r}.")
    _check_model(model)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        inputs = {"QUESTION": codecs.bytes_column([question]), "CONTEXT": codecs.bytes_column([context])}
        if top_k is not None:
            inputs["TOP_K"] = codecs.column(top_k, "INT32", 1)
        return inputs

    def decode(config: ModelConfig, result: Tensors) -> Any:
        found = [
            Answer(str(text), float(score), int(start), int(end))
            for text, score, start, end in zip(
                codecs.decode(result["ANSWER"])[0], result["SCORE"][0], result["START"][0], result["END"][0]
            )
            if int(start) >= 0
        ]
        if top_k is None:
            if not found:
                raise InferenceError(f"Model '{config.name}' found no answer span.", config.name)
            return found[0]
        return found

    return Plan(
        ("question-answering",), model, 1, build, lambda _: ["ANSWER", "SCORE", "START", "END"], decode, lambda _: []
    )


def fill_mask(texts: str | Sequence[str], model: str | None, top_k: int, truncate: bool) -> Plan[Any]:
    """``Client.fill_mask``: candidates for each text's one mask token, best first."""
    items, single = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 1000:
        raise InvalidInputError(f"top_k must be an int from 1 to 1000, not {top_k!r}.")

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), "TOP_K": codecs.column(top_k, "INT32", count)}
        return {**inputs, **_truncate_inputs(config, truncate, count)}

    def decode(config: ModelConfig, result: Tensors) -> Any:
        found = [
            [FillMask(str(token), float(score)) for token, score in zip(tokens, scores) if str(token)]
            for tokens, scores in zip(codecs.decode(result["TOKENS"]), result["SCORES"])
        ]
        return found[0] if single else found

    return Plan(("fill-mask",), model, len(items), build, lambda _: ["TOKENS", "SCORES"], decode, lambda _: [])


def infer(model: str, values: Mapping[str, Any]) -> Plan[dict[str, Array]]:
    """``Client.infer``: any model, inputs by name as Python values; one request, no splitting."""
    _check_model(model)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        unknown = sorted(set(values) - set(config.inputs))
        if unknown:
            raise InvalidInputError(
                f"Model '{model}' has no input(s) {', '.join(unknown)}; it takes {', '.join(config.inputs) or 'none'}.",
                model,
            )
        batched = config.max_batch_size > 0
        return {
            name: codecs.to_tensor(value, config.inputs[name][0], config.inputs[name][1], batched)
            for name, value in values.items()
        }

    return Plan(
        (),
        model,
        1,
        build,
        lambda config: list(config.outputs),
        lambda _, result: {name: codecs.decode(array) for name, array in result.items()},
        lambda _: {},
    )


# ---------------------------------------------------------------------------- generation


def generation_inputs(text: str, chat: bool, sampling: Mapping[str, Any]) -> Tensors:
    """The text-generation template's tensors (Triton's generate extension names), one row.

    ``sampling`` holds the ``Sampling`` options; an unknown one is refused by name (a typo such
    as ``max_token`` would otherwise be dropped silently). ``truncate`` lets the server cut a prompt
    past the model's context (its start goes; the usage says how many tokens); without it such
    a prompt is a ``ContextLengthError``.
    """
    unknown = sorted(set(sampling) - set(SAMPLING_OPTIONS))
    if unknown:
        raise InvalidInputError(
            f"unknown generation option(s) {', '.join(unknown)}; the options are {', '.join(SAMPLING_OPTIONS)}."
        )
    inputs = {"text_input": codecs.bytes_column([text])}
    for key, datatype in (("max_tokens", "INT32"), ("temperature", "FP32"), ("top_p", "FP32"), ("seed", "INT64")):
        value = sampling.get(key)
        if value is None:
            continue
        integral = datatype.startswith("INT")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integral and not isinstance(value, int)):
            raise InvalidInputError(f"{key} must be {'an int' if integral else 'a number'}, not {value!r}.")
        inputs[key] = codecs.column(value, datatype, 1)
    stop = sampling.get("stop")
    if stop:
        stops, _ = codecs.text_list(stop, "stop")
        inputs["stop"] = codecs.bytes_matrix([stops])
    if chat:
        inputs["chat"] = codecs.column(True, "BOOL", 1)
    truncate = sampling.get("truncate", False)
    if not isinstance(truncate, bool):
        raise InvalidInputError(f"truncate must be True or False, not {truncate!r}.")
    if truncate:
        inputs["truncate"] = codecs.column(True, "BOOL", 1)
    return inputs


def chat_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """Chat messages as the JSON the template reads with chat=true."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError('messages must be a list of {"role": ..., "content": ...} dicts.')
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
            raise InvalidInputError(f'messages[{index}] must be a {{"role": ..., "content": str}} dict.')
        codecs.check_unicode(message["content"], f"messages[{index}].content")
    return json.dumps([dict(message) for message in messages])


def check_prompt(prompt: object, name: str = "prompt") -> str:
    if not isinstance(prompt, str):
        raise InvalidInputError(f"{name} must be a str, not {type(prompt).__name__}.")
    codecs.check_unicode(prompt, name)
    return prompt


def _scalar(value: Any) -> Any:
    array = np.asarray(value)
    item = array.reshape(-1)[0] if array.size else None
    if isinstance(item, bytes):
        return item.decode("utf-8", "replace")
    return item.item() if isinstance(item, np.generic) else item


@dataclass
class StreamProgress:
    """What a generation stream has delivered so far: chunks, and at its end the usage and why it ended."""

    chunks: int = 0
    finish_reason: str | None = None
    usage: Usage | None = None

    def read(self, response: Mapping[str, Any]) -> str:
        """The text of one streamed response (possibly ""); records usage and finish reason when present."""
        text = _scalar(response["text_output"]) if "text_output" in response else ""
        if "finish_reason" in response:
            self.finish_reason = str(_scalar(response["finish_reason"]) or "") or None
        if "prompt_tokens" in response and "completion_tokens" in response:
            cut = int(_scalar(response["prompt_tokens_cut"])) if "prompt_tokens_cut" in response else 0
            self.usage = Usage(
                int(_scalar(response["prompt_tokens"])), int(_scalar(response["completion_tokens"])), cut
            )
        text = str(text or "")
        if text:
            self.chunks += 1
        return text

    def stream_error(self, error: ClientError, model: str) -> ClientError:
        """An error inside a stream: after the first chunk it is the model failing, whatever its text."""
        if self.chunks and isinstance(error, (InvalidInputError, ModelNotFoundError)):
            return InferenceError(f"Model '{model}' failed after {self.chunks} chunk(s): {error.message}", model)
        return error


def never_answered(model: str, deadline: Deadline) -> ClientError:
    return deadline.timeout_error(model, "finish the stream")
