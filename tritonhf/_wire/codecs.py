"""Pure functions between Python values and Triton tensors, over one datatype table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tritonhf.errors import InvalidInputError

# The KServe v2 wire datatype of each numpy dtype kind, and back.
DATATYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


def text_list(texts: str | Sequence[str], name: str = "texts") -> tuple[list[str], bool]:
    """``(list of texts, was_single)``; anything but str raises InvalidInputError naming the argument."""
    if isinstance(texts, str):
        check_unicode(texts, name)
        return [texts], True
    if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Sequence):
        raise InvalidInputError(f"{name} must be a str or a list of str, not {type(texts).__name__}.")
    items = list(texts)
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidInputError(f"{name}[{index}] must be a str, not {type(item).__name__} ({item!r:.40}).")
        check_unicode(item, f"{name}[{index}]")
    return items, False


def check_unicode(text: str, name: str) -> None:
    """Text goes to Triton as UTF-8: a lone surrogate (JSON's "\\ud800", a bad decode) is refused by name."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{name} is not valid Unicode: {exc.reason} at character {exc.start} ({text[exc.start]!r}). "
            "Send text that encodes as UTF-8."
        ) from exc


def bytes_column(values: Sequence[str]) -> np.ndarray[Any, Any]:
    """A BYTES tensor of shape [n, 1]: one UTF-8 string per batch row."""
    return np.array([[value.encode("utf-8")] for value in values], dtype=np.object_).reshape(len(values), 1)


def bytes_matrix(rows: Sequence[Sequence[str]]) -> np.ndarray[Any, Any]:
    return np.array([[value.encode("utf-8") for value in row] for row in rows], dtype=np.object_)


def column(value: Any, datatype: str, rows: int) -> np.ndarray[Any, Any]:
    """The same scalar for each of ``rows`` batch rows, shape [rows, 1]; a value the datatype cannot hold is an
    ``InvalidInputError`` (numpy's OverflowError never reaches a caller: each option's range is checked by name
    first, this is the last guard)."""
    try:
        return np.full((rows, 1), value, dtype=DATATYPES[datatype])
    except (OverflowError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"{value!r} does not fit a {datatype} tensor ({exc}).") from exc


def decode(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """BYTES arrays with ``str`` items; other arrays unchanged."""
    if array.dtype == np.object_:
        as_text = np.vectorize(lambda item: item.decode("utf-8") if isinstance(item, bytes) else item, otypes=[object])
        return np.asarray(as_text(array))
    return array


def to_tensor(value: Any, datatype: str, dims: Sequence[int], batched: bool) -> np.ndarray[Any, Any]:
    """A Python value (str, list, number, numpy array) as an array of ``datatype``.

    With a batched model a single item gets the batch axis added: ``"a"`` for dims [1]
    becomes ``[["a"]]``.
    """
    if datatype == "BYTES":
        array = np.array(value, dtype=np.object_)
        array = (
            np.vectorize(lambda item: item if isinstance(item, bytes) else str(item).encode(), otypes=[object])(array)
            if array.size
            else array
        )
    else:
        array = np.asarray(value, dtype=DATATYPES[datatype])
    while array.ndim < len(dims):
        array = array[..., np.newaxis]
    if batched and array.ndim == len(dims):
        # One row when the trailing dims fit the model's dims; otherwise each item is a row.
        fits = all(want in (-1, have) for want, have in zip(dims, array.shape))
        array = array[np.newaxis, ...] if fits else array[..., np.newaxis]
    return array
