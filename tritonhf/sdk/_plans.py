"""What each task call sends and how its answer reads: one ``Plan`` per ``Client`` method.

A plan is pure data and functions (no I/O): the shells resolve its model, send each chunk
that ``build`` makes, merge the outputs and hand them to ``decode``. The return type of each
plan is the union its method's overloads narrow (one text -> one result, a list -> a list).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from tritonhf._wire import codecs
from tritonhf._wire.config import ModelConfig
from tritonhf.errors import (
    InferenceError,
    InvalidInputError,
)
from tritonhf.sdk._policy import Array, Tensors
from tritonhf.sdk.results import (
    Answer,
    Classification,
    Embeddings,
    Entity,
    FillMask,
    Ranked,
    ZeroShotClassification,
)
from tritonhf.tasks import ALL_LABELS, ANSWERS_MAX, CANDIDATES_MAX

R = TypeVar("R")


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


def check_prompt(prompt: object, name: str = "prompt") -> str:
    if not isinstance(prompt, str):
        raise InvalidInputError(f"{name} must be a str, not {type(prompt).__name__}.")
    codecs.check_unicode(prompt, name)
    return prompt


def _check_model(model: str | None) -> str | None:
    if model is not None and (not isinstance(model, str) or not model):
        raise InvalidInputError(f"model must be a model name (str), not {model!r}.")
    return model


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, not {value!r}.")


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


Classified = Classification | list[Classification] | list[list[Classification]]


def _check_top_k(top_k: int | None) -> None:
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise InvalidInputError(f"top_k must be a positive int, not {top_k!r}.")


def _label_outputs(config: ModelConfig, top_k: int | None) -> list[str]:
    return _with_truncated(config, ["LABEL", "SCORE"] if top_k is None else ["LABELS", "SCORES"])


def _labels_read(config: ModelConfig, result: Tensors, rows: int, top_k: int | None, single: bool) -> Classified:
    """LABEL/SCORE (or LABELS/SCORES with ``top_k``) as Classifications: one, or one per row."""
    truncated = _truncated(config, result, rows)
    if top_k is None:
        labels, scores = codecs.decode(result["LABEL"])[:, 0], result["SCORE"][:, 0]
        best = [Classification(str(label), float(score), cut) for label, score, cut in zip(labels, scores, truncated)]
        return best[0] if single else best
    ranked = [
        _ranked(labels, scores, cut, top_k)
        for labels, scores, cut in zip(codecs.decode(result["LABELS"]), result["SCORES"], truncated)
    ]
    return ranked[0] if single else ranked


def classify(texts: str | Sequence[str], model: str | None, top_k: int | None, truncate: bool) -> Plan[Classified]:
    """``Client.classify``: the best label per text, or the ``top_k`` best."""
    items, single = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    _check_top_k(top_k)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), **_truncate_inputs(config, truncate, count)}
        if top_k is not None and "TOP_K" in config.inputs:
            inputs["TOP_K"] = codecs.column(top_k, "INT32", count)
        return inputs

    return labels_plan(("text-classification", "zero-shot-classification"), model, len(items), build, top_k, single)


def labels_plan(
    tasks: tuple[str, ...],
    model: str | None,
    count: int,
    build: Callable[[ModelConfig, slice], Tensors],
    top_k: int | None,
    single: bool,
) -> Plan[Classified]:
    """A classifier's plan (texts or images): the best label per row, or the ``top_k`` best."""
    return Plan(
        tasks,
        model,
        count,
        build,
        lambda config: _label_outputs(config, top_k),
        lambda config, result: _labels_read(config, result, count, top_k, single),
        lambda _: [],
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
    _check_top_k(top_k)

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


def zero_shot(
    texts: str | Sequence[str],
    labels: Sequence[str] | None,
    model: str | None,
    truncate: bool,
    multi_label: bool = False,
) -> Plan[ZeroShotClassification | list[ZeroShotClassification]]:
    """``Client.zero_shot``: each text's candidate labels ranked (``labels`` for every text, or the model's);
    ``multi_label`` scores each label on its own (an entailment model)."""
    items, single = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    _check_flag("multi_label", multi_label)
    candidates = _candidates(labels)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), **_truncate_inputs(config, truncate, count)}
        if candidates is not None:
            inputs["CANDIDATE_LABELS"] = codecs.bytes_matrix([candidates] * count)
        if multi_label:
            if "MULTI_LABEL" not in config.inputs:
                raise InvalidInputError(
                    f"model {config.name!r} takes no multi_label: re-add it with `tritonhf gallery add`."
                )
            inputs["MULTI_LABEL"] = codecs.column(True, "BOOL", count)
        return inputs

    def decode(config: ModelConfig, result: Tensors) -> ZeroShotClassification | list[ZeroShotClassification]:
        found = _zero_shot_read(result, _truncated(config, result, len(items)))
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


def _candidates(labels: Sequence[str] | None) -> list[str] | None:
    if labels is None:
        return None
    candidates, _ = codecs.text_list(labels, "labels")
    if not candidates or not all(label.strip() for label in candidates):
        raise InvalidInputError("labels must be a non-empty list of non-empty strings.")
    return candidates


def _zero_shot_read(result: Tensors, truncated: Sequence[bool]) -> list[ZeroShotClassification]:
    found = []
    for ranked, scores, cut in zip(codecs.decode(result["LABELS"]), result["SCORES"], truncated):
        pairs = [(str(label), float(score)) for label, score in zip(ranked, scores) if str(label)]
        found.append(ZeroShotClassification(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), cut))
    return found


def _check_normalize(normalize: object) -> None:
    if normalize is not None and not isinstance(normalize, bool):
        raise InvalidInputError(f"normalize must be True, False or None, not {normalize!r}.")


def _vectors_plan(
    tasks: tuple[str, ...], model: str | None, rows: int, build: Callable[[ModelConfig, slice], Tensors]
) -> Plan[np.ndarray[Any, np.dtype[np.float32]]]:
    """EMBEDDING as float32 (n, dim); zero rows give (0, dim) when the model's config is known."""

    def empty(config: ModelConfig | None) -> np.ndarray[Any, np.dtype[np.float32]]:
        dims = config.outputs.get("EMBEDDING", (0,)) if config is not None else (0,)
        return np.zeros((0, max(dims[-1], 0) if dims else 0), dtype=np.float32)

    return Plan(
        tasks,
        model,
        rows,
        build,
        lambda _: ["EMBEDDING"],
        lambda _, result: result["EMBEDDING"].astype(np.float32),
        empty,
        needs_model_for_empty=model is not None,
    )


def _file_column(items: Sequence[bytes]) -> Array:
    """Encoded files (images, audio), one per row, as a [n, 1] BYTES column."""
    return np.array(list(items), dtype=np.object_).reshape(len(items), 1)


AGGREGATIONS = ("none", "simple", "first", "average", "max")


def ner(
    texts: str | Sequence[str], model: str | None, aggregation: str | None
) -> Plan[list[Entity] | list[list[Entity]]]:
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

    def decode(config: ModelConfig, result: Tensors) -> list[Entity] | list[list[Entity]]:
        found = [[Entity(**entity) for entity in json.loads(text)] for text in codecs.decode(result["ENTITIES"])[:, 0]]
        return found[0] if single else found

    return Plan(("token-classification",), model, len(items), build, lambda _: ["ENTITIES"], decode, lambda _: [])


def embed(
    texts: str | Sequence[str],
    model: str | None,
    normalize: bool | None,
    truncate: bool,
    prompt_name: str | None = None,
) -> Plan[np.ndarray[Any, np.dtype[np.float32]]]:
    """``Client.embed``: one float32 vector per text, shape (n, dim); ``prompt_name`` one of the model's prompts."""
    items, _ = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    _check_normalize(normalize)
    if prompt_name is not None and (not isinstance(prompt_name, str) or not prompt_name):
        raise InvalidInputError(
            f"prompt_name must be a non-empty string (one of the model's prompts), not {prompt_name!r}."
        )

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), **_truncate_inputs(config, truncate, count)}
        if normalize is not None:
            inputs["NORMALIZE"] = codecs.column(normalize, "BOOL", count)
        if prompt_name is not None:
            if "PROMPT_NAME" not in config.inputs:
                raise InvalidInputError(
                    f"model {config.name!r} takes no prompt_name: it was added before prompts were served, or is not "
                    "a text-embedding model; re-add it with `tritonhf gallery add`."
                )
            inputs["PROMPT_NAME"] = codecs.bytes_column([prompt_name] * count)
        return inputs

    return _vectors_plan(("feature-extraction",), model, len(items), build)


def embeddings(
    texts: str | Sequence[str],
    model: str | None,
    normalize: bool | None,
    truncate: bool,
    prompt_name: str | None = None,
) -> Plan[Embeddings]:
    """``Client.embeddings``: ``embed`` with token counts and truncation flags (for usage figures)."""
    plain = embed(texts, model, normalize, truncate, prompt_name)

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


def embed_tokens(
    texts: str | Sequence[str], model: str | None, truncate: bool, prompt_name: str | None = None
) -> Plan[list[np.ndarray[Any, np.dtype[np.float32]]]]:
    """``Client.embed_tokens``: each text's token vectors (ALL_TOKENS), row i cut to its TOKENS; with
    ``prompt_name``, the prompted text's."""
    plain = embed(texts, model, False, truncate, prompt_name)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        if "TOKEN_EMBEDDINGS" not in config.outputs:
            raise InvalidInputError(
                f"Model '{config.name}' was added by an older tritonhf and returns no token vectors. Re-add it with "
                "`tritonhf gallery add`.",
                config.name,
            )
        return {**plain.build(config, rows), "ALL_TOKENS": codecs.column(True, "BOOL", rows.stop - rows.start)}

    def decode(config: ModelConfig, result: Tensors) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
        found = result["TOKEN_EMBEDDINGS"].astype(np.float32)
        return [found[row, :count] for row, count in enumerate(int(v) for v in result["TOKENS"].reshape(-1))]

    return Plan(
        plain.tasks,
        plain.model,
        plain.rows,
        build,
        lambda _: ["TOKEN_EMBEDDINGS", "TOKENS"],
        decode,
        lambda _: [],
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


def answer(question: str, context: str, model: str | None, top_k: int | None) -> Plan[Answer | list[Answer]]:
    """``Client.answer``: the best span of ``context`` (or the ``top_k`` best) answering ``question``."""
    check_prompt(question, "question")
    if not isinstance(context, str):
        raise InvalidInputError(f"context must be a str, not {type(context).__name__}.")
    if not question.strip() or not context.strip():
        raise InvalidInputError("question and context must both hold some text.")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= ANSWERS_MAX):
        raise InvalidInputError(f"top_k must be an int from 1 to {ANSWERS_MAX}, not {top_k!r}.")
    _check_model(model)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        inputs = {"QUESTION": codecs.bytes_column([question]), "CONTEXT": codecs.bytes_column([context])}
        if top_k is not None:
            inputs["TOP_K"] = codecs.column(top_k, "INT32", 1)
        return inputs

    def decode(config: ModelConfig, result: Tensors) -> Answer | list[Answer]:
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


def fill_mask(
    texts: str | Sequence[str], model: str | None, top_k: int, truncate: bool
) -> Plan[list[FillMask] | list[list[FillMask]]]:
    """``Client.fill_mask``: candidates for each text's one mask token, best first."""
    items, single = codecs.text_list(texts)
    _check_model(model)
    _check_flag("truncate", truncate)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= CANDIDATES_MAX:
        raise InvalidInputError(f"top_k must be an int from 1 to {CANDIDATES_MAX}, not {top_k!r}.")

    def build(config: ModelConfig, rows: slice) -> Tensors:
        count = rows.stop - rows.start
        inputs = {"TEXT": codecs.bytes_column(items[rows]), "TOP_K": codecs.column(top_k, "INT32", count)}
        return {**inputs, **_truncate_inputs(config, truncate, count)}

    def decode(config: ModelConfig, result: Tensors) -> list[FillMask] | list[list[FillMask]]:
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
        # an optional output the model did not send this time (TOKEN_EMBEDDINGS without ALL_TOKENS) is left out
        lambda _, result: {name: codecs.decode(array) for name, array in result.items() if array is not None},
        lambda _: {},
    )
