"""What the image tasks' calls send and how their answers read (``Client.classify_images``, ``zero_shot_images``,
``embed_images``): plans as ``_plans`` makes them, for encoded images going out one per row."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tritonhf._wire import codecs
from tritonhf._wire.config import ModelConfig
from tritonhf.errors import InvalidInputError
from tritonhf.sdk import media
from tritonhf.sdk._plans import (
    Classified,
    Plan,
    _candidates,
    _check_model,
    _check_normalize,
    _check_top_k,
    _file_column,
    _vectors_plan,
    _zero_shot_read,
    labels_plan,
)
from tritonhf.sdk._policy import Tensors
from tritonhf.sdk.media import ImageInput
from tritonhf.sdk.results import ZeroShotClassification


def classify_images(
    images: ImageInput | Sequence[ImageInput], model: str | None, top_k: int | None
) -> Plan[Classified]:
    """``Client.classify_images``: the best label per image, or the ``top_k`` best (encoded bytes go out)."""
    items, single = media.image_list(images)
    _check_model(model)
    _check_top_k(top_k)

    build = _images_with(items, "TOP_K", top_k, "INT32")
    return labels_plan(("image-classification",), model, len(items), build, top_k, single)


def _images_with(
    items: Sequence[bytes], option: str, value: int | bool | None, datatype: str
) -> Callable[[ModelConfig, slice], Tensors]:
    """A plan's builder for encoded images, with ``option`` on every row when ``value`` is given."""

    def build(config: ModelConfig, rows: slice) -> Tensors:
        chunk = items[rows]
        inputs = {"IMAGE": _file_column(chunk)}
        if value is not None:
            inputs[option] = codecs.column(value, datatype, len(chunk))
        return inputs

    return build


IMAGE_TEXT_TASKS = ("zero-shot-image-classification",)


def zero_shot_images(
    images: ImageInput | Sequence[ImageInput], labels: Sequence[str] | None, model: str | None
) -> Plan[ZeroShotClassification | list[ZeroShotClassification]]:
    """``Client.zero_shot_images``: each image's labels ranked by an image-text model (CLIP, SigLIP)."""
    items, single = media.image_list(images)
    _check_model(model)
    candidates = _candidates(labels)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        chunk = items[rows]
        inputs = {"IMAGE": _file_column(chunk)}
        if candidates is not None:
            inputs["CANDIDATE_LABELS"] = codecs.bytes_matrix([candidates] * len(chunk))
        return inputs

    def decode(config: ModelConfig, result: Tensors) -> ZeroShotClassification | list[ZeroShotClassification]:
        found = _zero_shot_read(result, [False] * len(items))
        if any(not row.labels for row in found):
            raise InvalidInputError(
                f"Model '{config.name}' has no default labels: pass labels=[...] (or re-add it with --labels).",
                config.name,
            )
        return found[0] if single else found

    return Plan(IMAGE_TEXT_TASKS, model, len(items), build, lambda _: ["LABELS", "SCORES"], decode, lambda _: [])


def embed_images(
    images: ImageInput | Sequence[ImageInput], model: str | None, normalize: bool | None
) -> Plan[np.ndarray[Any, np.dtype[np.float32]]]:
    """``Client.embed_images``: one float32 vector per image, shape (n, dim), in the model's text space."""
    items, _ = media.image_list(images)
    _check_model(model)
    _check_normalize(normalize)

    build = _images_with(items, "NORMALIZE", normalize, "BOOL")
    return _vectors_plan(IMAGE_TEXT_TASKS, model, len(items), build)
