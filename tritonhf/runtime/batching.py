"""One ``execute`` call: ``Batch`` gathers the rows of every request into one list, reads
per-row options (one value per row, never row 0's for all), and fails a request alone
when its input is unusable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .common import BadRequest, pb_utils
from .replies import error_response


def decode_texts(array: np.ndarray[Any, Any], name: str) -> list[str]:
    """A BYTES tensor (object array of bytes) as a list of str, one per item."""
    texts = []
    for index, item in enumerate(array.reshape(-1)):
        if isinstance(item, bytes):
            try:
                texts.append(item.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise BadRequest(f"input '{name}' item {index} is not valid UTF-8 ({exc.reason}).") from exc
        else:
            texts.append(str(item))
    return texts


def raw_items(array: np.ndarray[Any, Any], name: str) -> list[bytes]:
    """A BYTES tensor of encoded files (images, audio) as a list of bytes, one per item."""
    items = []
    for index, item in enumerate(array.reshape(-1)):
        if not isinstance(item, bytes):
            kind = type(item).__name__
            raise BadRequest(f"input '{name}' item {index} must be BYTES (the encoded file), not {kind}.")
        items.append(item)
    return items


def optional_array(request: Any, name: str) -> np.ndarray[Any, Any] | None:
    tensor = pb_utils().get_input_tensor_by_name(request, name)
    return None if tensor is None else np.asarray(tensor.as_numpy())


def input_array(request: Any, name: str) -> np.ndarray[Any, Any]:
    array = optional_array(request, name)
    if array is None:
        # Triton lets a request through without a required input when the model has optional ones.
        raise BadRequest(f"missing required input '{name}'.")
    return array


def _plain(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()


def optional_scalar(request: Any, name: str, default: Any, check: Callable[[Any], bool], rule: str) -> Any:
    """The single value of an optional input of a one-row request (generation), or ``default``."""
    array = optional_array(request, name)
    if array is None or array.size == 0:
        return default
    if array.size != 1:
        raise BadRequest(f"input '{name}' has {array.size} values; send one.")
    value = _plain(array.reshape(-1)[0])
    if not check(value):
        raise BadRequest(f"input '{name}' is {value!r}; it must be {rule}.")
    return value


def optional_strings(request: Any, name: str) -> list[str] | None:
    """The non-empty strings of an optional BYTES input of a one-row request, or None."""
    array = optional_array(request, name)
    if array is None:
        return None
    return [text for text in decode_texts(array, name) if text]


class Batch:
    """The rows of every request that one ``execute`` received, in one flat list.

    Triton's dynamic batcher hands ``execute`` several requests, each with one or more rows
    (its batch axis). ``texts[i]`` is row i; ``spans[r]`` is the range of rows of request r.
    Options are read per row (``option``): a request's row j gets *its* value, never the
    first row's or another request's. A request whose input is unusable is failed alone
    (``fail``): its rows are skipped by ``live_rows`` and it is answered with the error.
    """

    def __init__(self, requests: Sequence[Any], text_input: str = "TEXT", binary: bool = False) -> None:
        """``binary``: the rows are encoded files (``texts`` then holds their bytes, undecoded)."""
        self.requests = list(requests)
        self.texts: list[Any] = []
        self.spans: list[range] = []
        self.errors: dict[int, str] = {}
        for index, request in enumerate(self.requests):
            start = len(self.texts)
            try:
                array = input_array(request, text_input)
                self.texts.extend(raw_items(array, text_input) if binary else decode_texts(array, text_input))
            except BadRequest as exc:
                self.errors[index] = str(exc)
            self.spans.append(range(start, len(self.texts)))
        self.owner = [index for index, span in enumerate(self.spans) for _ in span]

    def fail(self, request_index: int, message: str) -> None:
        """Answer request ``request_index`` with this error (the first error of a request wins)."""
        self.errors.setdefault(request_index, message)

    def fail_row(self, row: int, message: str) -> None:
        request_index = self.owner[row]
        position = row - self.spans[request_index].start
        prefix = f"row {position}: " if len(self.spans[request_index]) > 1 else ""
        self.fail(request_index, prefix + message)

    def live_rows(self) -> list[int]:
        """Rows of the requests that have not failed, in order."""
        return [row for row, owner in enumerate(self.owner) if owner not in self.errors]

    def option(self, name: str, default: Any, check: Callable[[Any], bool] | None = None, rule: str = "") -> list[Any]:
        """One value per row of the optional input ``name`` ([rows, 1]); ``default`` where absent.

        A value refused by ``check`` fails its request with a message that names the input,
        the row and ``rule``.
        """
        values: list[Any] = [default] * len(self.texts)
        for index, request in enumerate(self.requests):
            if index in self.errors:
                continue
            array = optional_array(request, name)
            if array is None or array.size == 0:
                continue
            span = self.spans[index]
            flat = array.reshape(len(span), -1) if array.size % max(len(span), 1) == 0 else None
            if flat is None or flat.shape[1] != 1:
                self.fail(index, f"input '{name}' must have one value per row of TEXT ({len(span)}), not {array.size}.")
                continue
            for offset, row in enumerate(span):
                value = _plain(flat[offset, 0])
                if check is not None and not check(value):
                    where = f" row {offset}" if len(span) > 1 else ""
                    self.fail(index, f"input '{name}'{where} is {value!r}; it must be {rule}.")
                    break
                values[row] = value
        return values

    def strings(self, name: str) -> list[str]:
        """One string per row of the required input ``name`` ([rows, 1]); a request without it fails."""
        values = [""] * len(self.texts)
        for index, request in enumerate(self.requests):
            if index in self.errors:
                continue
            try:
                found = decode_texts(input_array(request, name), name)
            except BadRequest as exc:
                self.fail(index, str(exc))
                continue
            if len(found) != len(self.spans[index]):
                self.fail(index, f"input '{name}' must have one value per row ({len(self.spans[index])}).")
                continue
            for offset, row in enumerate(self.spans[index]):
                values[row] = found[offset]
        return values

    def string_lists(self, name: str) -> list[list[str] | None]:
        """Per row, the non-empty strings of row j of the optional input ``name`` ([rows, k]); None where absent.

        Rows may use fewer strings than k by padding with empty strings.
        """
        values: list[list[str] | None] = [None] * len(self.texts)
        for index, request in enumerate(self.requests):
            if index in self.errors:
                continue
            array = optional_array(request, name)
            if array is None:
                continue
            span = self.spans[index]
            if array.ndim != 2 or array.shape[0] != len(span):
                self.fail(
                    index, f"input '{name}' must have one row per row of TEXT ({len(span)}), shape {array.shape}."
                )
                continue
            try:
                for offset, row in enumerate(span):
                    values[row] = [text for text in decode_texts(array[offset], name) if text.strip()]
            except BadRequest as exc:
                self.fail(index, str(exc))
        return values

    def respond(self, answer: Callable[[range], Any]) -> list[Any]:
        """One response per request, in order: ``answer(rows)``, or that request's error.

        ``answer`` may raise ``BadRequest`` for a request that only it can judge; that request
        alone gets the error.
        """
        responses = []
        for index, span in enumerate(self.spans):
            if index in self.errors:
                responses.append(error_response(self.errors[index]))
                continue
            try:
                responses.append(answer(span))
            except BadRequest as exc:
                responses.append(error_response(str(exc)))
        return responses
