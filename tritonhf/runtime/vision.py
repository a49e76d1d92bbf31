"""Images in a chat (the image-text-to-text task): each image as the model's own processor sizes it, and the prompt
as its processor widens it.

A chat's images arrive encoded, in the order of their ``{"type": "image"}`` parts. Each is decoded as
``images.decode_image`` reads a file (limits first: pixels, bytes), then resized by the model's own image
processor (``resize``, with the processor's size, resampling and patch factor: the pixels transformers would feed
its vision tower), and handed to the engine as uint8 pixels at that size, so the engine's own resize has nothing
left to do. The prompt's one placeholder per image is widened to the image's tokens by the processor's rule, which
is what ``usage.prompt_tokens`` and the context check count.

One class per family of models, registered by one line in ``FAMILIES`` (by ``model_type``): the placeholder token
and how many tokens an image's processed grid makes. A model of another family is refused by name at ``gallery add``
(``family_of``). Why not the model's ``AutoProcessor``: with transformers 5.x it cannot be made where torchvision
does not import (its video processor), which is the case with the CPU torch this project installs; the image
processor alone can, on its PIL backend.
"""

from __future__ import annotations

from typing import Any

from .audio import unwrap_data_uri
from .common import BadRequest
from .images import DEFAULT_MAX_IMAGE_PIXELS, decode_image, load_image_processor

DEFAULT_MAX_IMAGES = 8  # per request
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024  # per image, encoded
PARAM_MAX_IMAGES = "max_images"
PARAM_MAX_IMAGE_BYTES = "max_image_bytes"
IMAGE_TASK = "image-text-to-text"  # the task whose models take images in their chat


class QwenVision:
    """Qwen2-VL and Qwen2.5-VL: ``<|image_pad|>`` widened to one token per ``merge_size`` x ``merge_size``
    patches of the resized image (``image_grid_thw``), as their processors do."""

    placeholder = "<|image_pad|>"

    def __init__(self, processor: Any) -> None:
        self.processor = processor

    def tokens(self, grid: Any) -> int:
        merge = int(self.processor.merge_size)
        return int(grid[0]) * int(grid[1]) * int(grid[2]) // (merge * merge)

    def count(self, processed: Any) -> int:
        """The tokens of one image, from what the processor returned for it."""
        return self.tokens(processed["image_grid_thw"][0])


# qwen3_vl is left out: a tiny Qwen3-VL exported and served, and its greedy answers to chats with images differed
# from transformers' (2 of 4 equal at gallery add's check), where Qwen2-VL's and Qwen2.5-VL's were all equal.
FAMILIES: dict[str, type[QwenVision]] = {"qwen2_vl": QwenVision, "qwen2_5_vl": QwenVision}


def family_of(model_type: str) -> type[QwenVision] | None:
    """The vision rules of a model type; None: images of that family are not served."""
    return FAMILIES.get(model_type)


class Vision:
    """A model's images: decoded within the limits, sized by its processor, counted as its prompt counts them."""

    def __init__(self, folder: str, model_type: str, params: dict[str, str]) -> None:
        from .loading import int_parameter

        family = family_of(model_type)
        if family is None:
            raise ValueError(f"images of {model_type} models are not served (served: {', '.join(FAMILIES)}).")
        self.processor = load_image_processor(folder)
        self.family = family(self.processor)
        self.max_images = int_parameter(params, PARAM_MAX_IMAGES, DEFAULT_MAX_IMAGES, minimum=0)
        self.max_pixels = int_parameter(params, "max_image_pixels", DEFAULT_MAX_IMAGE_PIXELS)
        self.max_bytes = int_parameter(params, PARAM_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_BYTES)

    @property
    def placeholder(self) -> str:
        return self.family.placeholder

    def read(self, encoded: list[bytes], name: str = "images") -> list[tuple[Any, int]]:
        """The request's images, each as (uint8 pixels (height, width, 3) at the size the processor resizes it to,
        its tokens in the prompt); ``BadRequest`` naming the image and the limit it passes."""
        if len(encoded) > self.max_images:
            raise BadRequest(
                f"input '{name}' has {len(encoded)} images, more than this model's limit of {self.max_images} per "
                f"request (parameter {PARAM_MAX_IMAGES}); send fewer."
            )
        pixels = []
        for index, data in enumerate(encoded):
            try:
                data = unwrap_data_uri(data)  # the HTTP generate route's JSON carries a file as a data: URI
                if len(data) > self.max_bytes:
                    raise BadRequest(
                        f"is {len(data):,} bytes, over the limit of {self.max_bytes:,} (parameter "
                        f"{PARAM_MAX_IMAGE_BYTES}); send a smaller file."
                    )
                pixels.append(self.resized(decode_image(data, self.max_pixels)))
            except BadRequest as error:
                raise BadRequest(f"input '{name}' image {index} {error}") from None
        return pixels

    def resized(self, image: Any) -> tuple[Any, int]:
        """``image`` resized by the processor's own ``resize`` (its size, resampling and factor), as uint8 HWC, and
        its tokens."""
        import numpy as np

        seen: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []  # (its output, the call's other arguments)
        resize = self.processor.resize

        def keep(image: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append((resize(image, *args, **kwargs), args, kwargs))
            return seen[-1][0]

        self.processor.resize = keep  # the instance's own, for this one call: the processor decides every argument
        try:
            processed = self.processor(images=[image], return_tensors="np")
        finally:
            del self.processor.resize
        if len(seen) != 1:
            raise RuntimeError(f"the image processor resized an image {len(seen)} times; one was expected.")
        output, args, kwargs = seen[0]
        array = np.asarray(output)
        if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3):
            array = array.transpose(1, 2, 0)  # channels first -> last
        pixels = np.ascontiguousarray(np.clip(np.rint(array), 0, 255).astype(np.uint8))
        tokens = self.family.count(processed)
        # The engine resizes what it is given by the same rule; where the processor's own output is not a size the
        # rule keeps (a very elongated image, its short side held at one patch row), the engine would read another
        # image than transformers does: refused, never answered otherwise.
        if np.shape(resize(output, *args, **kwargs)) != np.shape(output):
            width, height = image.size
            raise BadRequest(
                f"is {width}x{height}: the model's processor resizes it to {pixels.shape[1]}x{pixels.shape[0]}, a "
                "size its own rule would change again, so the engine would not see the image transformers sees; "
                "send it cropped nearer to a square."
            )
        return pixels, tokens

    def widen(self, prompt: str, tokens: list[int]) -> str:
        """The prompt with each image's one placeholder widened to that image's tokens, as the processor does."""
        parts = prompt.split(self.placeholder)
        if len(parts) - 1 != len(tokens):
            raise BadRequest(
                f"the messages have {len(parts) - 1} image parts and input 'images' has {len(tokens)} images: send "
                "one image per image part, in order."
            )
        return parts[0] + "".join(self.placeholder * count + part for count, part in zip(tokens, parts[1:]))


def load(args: dict[str, str], params: dict[str, str]) -> Vision | None:
    """The images of a model added for image-text-to-text (its weights' ``model_type``); None for any other task."""
    import json
    from pathlib import Path

    from .common import PARAM_TASK
    from .loading import weights_location

    if params.get(PARAM_TASK) != IMAGE_TASK:
        return None
    folder = weights_location(args, params)
    model_type = json.loads((Path(folder) / "config.json").read_text()).get("model_type", "")
    return Vision(folder, model_type, params)
