"""Images as the SDK sends them: encoded bytes, whatever the caller holds.

The server decodes (one decoder for every client, a few kB on the wire instead of raw
pixels), so the SDK only turns what it is given into the bytes of a file:

* a path (``str`` or ``os.PathLike``): the file's bytes, unchanged;
* ``bytes``: sent as they are (JPEG, PNG, WebP, GIF, BMP);
* a ``PIL.Image.Image``: encoded as PNG (lossless: the server sees the same pixels);
* a numpy array ``[H, W]`` (grey) or ``[H, W, C]`` with C = 1, 2, 3 or 4 (grey, grey + alpha,
  RGB, RGBA), ``uint8``: encoded as PNG here, without Pillow.

One image gives one answer; a list or tuple (or a 4-D array) gives a list.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from tritonhf.errors import InvalidInputError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

# What an image may be, for the SDK's image methods.
ImageInput = Union[str, "os.PathLike[str]", bytes, "np.ndarray[Any, Any]", "PILImage"]

_PNG_COLOUR = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type: grey, grey+alpha, RGB, RGBA


def image_list(images: ImageInput | Sequence[ImageInput], name: str = "images") -> tuple[list[bytes], bool]:
    """``(encoded images, was_single)``; InvalidInputError naming the argument and item otherwise."""
    if isinstance(images, np.ndarray) and images.ndim == 4:
        return [encode_image(image, f"{name}[{index}]") for index, image in enumerate(images)], False
    if isinstance(images, Sequence) and not isinstance(images, (str, bytes, bytearray, memoryview)):
        return [encode_image(image, f"{name}[{index}]") for index, image in enumerate(images)], False
    return [encode_image(images, name)], True  # a str is a path here, bytes one encoded file


def encode_image(image: object, name: str = "image") -> bytes:
    """One image as the bytes of a file."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
        if not data:
            raise InvalidInputError(f"{name} is empty (0 bytes).")
        return data
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"{name}: cannot read {str(path)!r} ({exc.strerror or exc}).") from exc
    if isinstance(image, np.ndarray):
        return png(image, name)
    if hasattr(image, "save") and hasattr(image, "mode"):  # a PIL image (Pillow need not be installed otherwise)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return buffer.getvalue()
    raise InvalidInputError(
        f"{name} must be a path, bytes, a PIL image or a uint8 array [H, W(, C)], not {type(image).__name__}."
    )


def png(array: np.ndarray[Any, Any], name: str = "image") -> bytes:
    """A uint8 array [H, W] or [H, W, C] (C in 1-4) as PNG bytes (no compression filter, zlib level 1)."""
    if array.dtype != np.uint8:
        raise InvalidInputError(f"{name} is a {array.dtype} array; images are uint8 (0-255) [H, W] or [H, W, C].")
    pixels = array[:, :, None] if array.ndim == 2 else array
    if pixels.ndim != 3 or pixels.shape[2] not in _PNG_COLOUR or 0 in pixels.shape[:2]:
        raise InvalidInputError(
            f"{name} has shape {tuple(array.shape)}; an image array is [H, W] or [H, W, C] with C in 1-4, H, W > 0."
        )
    height, width, channels = pixels.shape
    rows = np.ascontiguousarray(pixels).reshape(height, width * channels)
    raw = np.hstack([np.zeros((height, 1), dtype=np.uint8), rows]).tobytes()  # filter byte 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, _PNG_COLOUR[channels], 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b"")
