"""Long inputs and token budgets: ``encode`` tokenizes each row once (windows when asked)
and truncates, saying so, or refuses; ``budget_groups`` splits rows where padding would
cost more than another forward pass; ``pad``, ``model_inputs``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from .batching import Batch
from .common import PASS_COST_TOKENS

K = TypeVar("K", bound=Hashable)  # a row's key: its index, or (row, document) for pairs


@dataclass
class Encoded:
    """Tokenized items: per key its token features (windows, for ``windows=True``) and whether it was cut.

    ``features[key]`` is a list of windows; each window is a dict of lists (input_ids,
    attention_mask, ... as the tokenizer returns them). Without windows an item has one.
    ``too_long`` lists the keys that were too long where cutting was not allowed; ``first_too_long``
    the pairs whose first text alone leaves no room (they are not tokenized at all).
    """

    features: dict[Any, list[dict[str, list[Any]]]] = field(default_factory=dict)
    truncated: dict[Any, bool] = field(default_factory=dict)
    too_long: list[Any] = field(default_factory=list)
    first_too_long: list[Any] = field(default_factory=list)  # pairs whose first text alone fills the limit

    def length(self, key: Any) -> int:
        return max(len(window["input_ids"]) for window in self.features[key])


def encode(
    tokenizer: Any,
    items: Sequence[tuple[Any, str, str | None]],
    limit: int,
    truncate: Callable[[Any], bool] | None = None,
    windows: bool = False,
    stride: int = 0,
    cut_first: bool = False,
    **extra: Any,
) -> Encoded:
    """Tokenize ``items`` (key, text, optional second text of a pair) once, each to at most ``limit`` tokens.

    The long-input policy, the same in every template:
    * ``windows=True`` (token classification, question answering): a long item becomes
      overlapping windows of ``limit`` tokens that overlap by ``stride``; nothing is dropped.
    * otherwise the item is cut to ``limit`` tokens and ``truncated[key]`` says so; where
      ``truncate(key)`` is False it is listed in ``too_long`` instead, for the template to refuse.
    A pair's second text (a document, a context) is cut before the first (the query); with ``cut_first`` the
    first (an NLI premise before its hypothesis, as transformers' zero-shot pipeline cuts) and never the second.
    """
    encoded = Encoded()
    if cut_first:
        extra = {**extra, "truncation": "only_first"}
    elif items and items[0][2] is not None:
        # A pair whose first text (a query, a question) leaves no room for its second cannot be cut.
        room = {key: limit - len(tokenizer(text)["input_ids"]) - 2 for key, text, _ in items}
        encoded.first_too_long = [key for key, _, _ in items if room[key] < 2]
        items = [item for item in items if item[0] not in encoded.first_too_long]
        if windows:  # each pair alone: the overlap must fit the room its own first text leaves
            for key, text, pair in items:
                own = _tokenize(tokenizer, [(key, text, pair)], limit, windows, min(stride, room[key] // 2), extra)
                _merge(encoded, own)
            encoded.too_long = [
                key for key in encoded.features if encoded.truncated[key] and truncate and not truncate(key)
            ]
            return encoded
    _merge(encoded, _tokenize(tokenizer, items, limit, windows, stride, extra))
    encoded.too_long = [key for key in encoded.features if encoded.truncated[key] and truncate and not truncate(key)]
    return encoded


def _merge(into: Encoded, part: Encoded) -> None:
    into.features.update(part.features)
    into.truncated.update(part.truncated)


def _tokenize(
    tokenizer: Any, items: Sequence[tuple[Any, str, str | None]], limit: int, windows: bool, stride: int, extra: Any
) -> Encoded:
    encoded = Encoded()
    if not items:
        return encoded
    keys = [key for key, _, _ in items]
    texts = [text for _, text, _ in items]
    second = [pair or "" for _, _, pair in items] if items[0][2] is not None else None
    options: dict[str, Any] = dict(extra)
    truncation = options.pop("truncation", "only_second" if second is not None else True)
    if tokenizer.is_fast:
        options.update(return_overflowing_tokens=True, stride=stride if windows else 0)
    result = tokenizer(
        texts,
        second,
        truncation=truncation,
        max_length=limit,
        padding=False,
        **options,
    )
    mapping = result.get("overflow_to_sample_mapping") or list(range(len(texts)))
    names = [name for name in result if name != "overflow_to_sample_mapping"]
    for window_index, sample in enumerate(mapping):
        window = {name: list(result[name][window_index]) for name in names}
        if second is not None and tokenizer.is_fast:  # which tokens are the pair's second text (a context)
            window["sequence_ids"] = list(result.sequence_ids(window_index))
        encoded.features.setdefault(keys[sample], []).append(window)
    if tokenizer.is_fast:  # one window per item unless windows were asked for; more means it was cut
        for key in keys:
            encoded.truncated[key] = not windows and len(encoded.features[key]) > 1
            if not windows:
                del encoded.features[key][1:]
    else:  # a slow tokenizer gives no overflow information: count the full length separately
        full = tokenizer(texts, second, truncation=False, padding=False)["input_ids"]
        for key, ids in zip(keys, full, strict=True):
            encoded.truncated[key] = len(ids) > limit
    return encoded


def too_long_message(limit: int, name: str = "TEXT") -> str:
    """The refusal of a too-long text; "context length" is the phrase the SDK maps to ContextLengthError."""
    return (
        f"input '{name}' is longer than the model's context length of {limit} tokens. Shorten it, or send "
        "truncate=true (TRUNCATE) to have it cut."
    )


def encode_rows(
    tokenizer: Any,
    batch: Batch,
    limit: int,
    truncate: Sequence[bool] | None = None,
    windows: bool = False,
    stride: int = 0,
    pairs: Sequence[str] | None = None,
    **extra: Any,
) -> Encoded:
    """``encode`` of the live rows of ``batch``; a row too long to cut fails its request, naming the limit.

    ``pairs`` (one per row, "" for none) pairs a row with a second text; rows with and without one are
    tokenized apart, so a single text is never given a pair's separators by its neighbours.
    """
    live = batch.live_rows()
    cut = (lambda row: bool(truncate[row])) if truncate is not None else None
    singles = [(row, batch.texts[row], None) for row in live if not (pairs and pairs[row])]
    encoded = encode(tokenizer, singles, limit, cut, windows, stride, **extra)
    if pairs:
        paired = encode(tokenizer, [(row, batch.texts[row], pairs[row]) for row in live if pairs[row]], limit, cut,
                        windows, stride, **extra)  # fmt: skip
        _merge(encoded, paired)
        encoded.too_long += paired.too_long
        for row in paired.first_too_long:
            batch.fail_row(row, too_long_message(limit))
    for row in encoded.too_long:
        batch.fail_row(row, too_long_message(limit))
    return encoded


_PAD_VALUES = {"attention_mask": 0, "special_tokens_mask": 1, "offset_mapping": (0, 0)}


def pad(tokenizer: Any, windows: Sequence[dict[str, list[Any]]], device_name: str = "cpu") -> dict[str, Any]:
    """Right-pad windows of token features into tensors (input_ids with the pad token, masks with 0)."""
    import torch

    width = max(len(window["input_ids"]) for window in windows)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tensors: dict[str, Any] = {}
    for key in windows[0]:
        if key == "sequence_ids":  # bookkeeping, not a model input
            continue
        fill = _PAD_VALUES.get(key, pad_id if key == "input_ids" else 0)
        rows = [list(window[key]) + [fill] * (width - len(window[key])) for window in windows]
        tensors[key] = torch.tensor(rows).to(device_name)
    return tensors


def budget_groups(lengths: Mapping[K, int], budget: int, max_rows: int = 0) -> list[list[K]]:
    """Rows grouped for forward passes: sorted by length, split where padding costs more than a pass.

    A group costs one pass plus rows x its longest row in padded tokens. Sorting first means a
    long text pads only its neighbours in length (text-embeddings-inference does the same); the
    split points are then chosen to minimise the total cost, counting a pass as
    ``PASS_COST_TOKENS`` padded tokens, so a few long texts get passes of their own instead of
    padding every short one to their length. No group exceeds ``budget`` padded tokens (a row
    longer than the budget gets a group of its own) or ``max_rows`` rows when that is set.
    """
    rows = sorted(lengths, key=lambda r: (lengths[r], r))
    most = max_rows or len(rows)
    # best[j]: the cheapest grouping of rows[:j]; start[j]: where its last group begins
    best = [0.0] + [float("inf")] * len(rows)
    start = [0] * (len(rows) + 1)
    for end in range(1, len(rows) + 1):
        longest = lengths[rows[end - 1]]
        for first in range(end - 1, max(-1, end - 1 - most), -1):
            size = end - first
            if size > 1 and size * longest > budget:
                break
            cost = best[first] + PASS_COST_TOKENS + size * longest
            if cost < best[end]:
                best[end], start[end] = cost, first
    groups: list[list[K]] = []
    end = len(rows)
    while end > 0:
        groups.append(rows[start[end] : end])
        end = start[end]
    return groups[::-1]


def model_inputs(model: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """Only the tensors the model takes, whatever the tokenizer emitted (a BERT tokenizer's token_type_ids in
    front of DistilBERT): the graph's inputs (ONNX Runtime, OpenVINO, the ONNX part), else the names of the
    PyTorch forward's parameters."""
    names = getattr(model, "inputs", None)
    if names is None:
        names = _forward_names(cast(Hashable, type(model)))
    return {key: value for key, value in batch.items() if key in names}


@functools.cache
def _forward_names(model_class: Any) -> frozenset[str]:
    """The parameter names of a PyTorch model class's forward, read once per class (every forward pass asks)."""
    return frozenset(inspect.signature(model_class.forward).parameters)
