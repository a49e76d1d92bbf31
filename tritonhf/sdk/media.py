"""Images and audio as the SDK sends them: encoded bytes, whatever the caller holds.

The server decodes (one decoder for every client, a few kB on the wire instead of raw
pixels), so the SDK only turns what it is given into the bytes of a file:

* a path (``str`` or ``os.PathLike``): the file's bytes, unchanged;
* ``bytes``: sent as they are (JPEG, PNG, WebP, GIF, BMP);
* a ``PIL.Image.Image``: encoded as PNG (lossless: the server sees the same pixels);
* a numpy array ``[H, W]`` (grey) or ``[H, W, C]`` with C = 1, 2, 3 or 4 (grey, grey + alpha,
  RGB, RGBA), ``uint8``: encoded as PNG here, without Pillow.

One image gives one answer; a list or tuple (or a 4-D array) gives a list.

Audio likewise: a path or ``bytes`` of a WAV, FLAC, OGG or MP3 file go as they are; samples as
``(array, sampling_rate)`` (float [frames] or [frames, channels]) go as a 32-bit float WAV, lossless
and written here without any audio library; the server mixes down and resamples. One file gives one
answer, a list gives a list.
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
from tritonhf.tasks import AUDIO_RATE_MAX, AUDIO_RATE_MIN

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

# What an image may be, for the SDK's image methods.
ImageInput = Union[str, "os.PathLike[str]", bytes, "np.ndarray[Any, Any]", "PILImage"]

# What audio may be, for Client.transcribe: a path, file bytes, or (samples, sampling rate).
AudioInput = Union[str, "os.PathLike[str]", bytes, "tuple[np.ndarray[Any, Any], int]"]

_PNG_COLOUR = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type: grey, grey+alpha, RGB, RGBA


def image_list(images: ImageInput | Sequence[ImageInput], name: str = "images") -> tuple[list[bytes], bool]:
    """``(encoded images, was_single)``; InvalidInputError naming the argument and item otherwise."""
    if isinstance(images, np.ndarray) and images.ndim == 4:
        return [encode_image(image, f"{name}[{index}]") for index, image in enumerate(images)], False
    if isinstance(images, Sequence) and not isinstance(images, (str, bytes, bytearray, memoryview)):
        return [encode_image(image, f"{name}[{index}]") for index, image in enumerate(images)], False
    return [encode_image(images, name)], True  # a str is a path here, bytes one encoded file


def file_bytes(item: object, name: str) -> bytes | None:
    """Bytes as they are, or a path's file; None for anything else (InvalidInputError: empty, unreadable)."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        data = bytes(item)
        if not data:
            raise InvalidInputError(f"{name} is empty (0 bytes).")
        return data
    if isinstance(item, (str, os.PathLike)):
        path = Path(item)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"{name}: cannot read {str(path)!r} ({exc.strerror or exc}).") from exc
    return None


def encode_image(image: object, name: str = "image") -> bytes:
    """One image as the bytes of a file."""
    data = file_bytes(image, name)
    if data is not None:
        return data
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


def audio_list(audio: AudioInput | Sequence[AudioInput], name: str = "audio") -> tuple[list[bytes], bool]:
    """``(encoded files, was_single)``; a ``(samples, rate)`` tuple is one file, a list many."""
    if _is_samples(audio) or isinstance(audio, (str, bytes, bytearray, memoryview, os.PathLike)):
        return [encode_audio(audio, name)], True
    if isinstance(audio, Sequence):
        return [encode_audio(item, f"{name}[{index}]") for index, item in enumerate(audio)], False
    return [encode_audio(audio, name)], True


def _is_samples(audio: object) -> bool:
    return isinstance(audio, tuple) and len(audio) == 2 and isinstance(audio[0], np.ndarray)


def encode_audio(audio: object, name: str = "audio") -> bytes:
    """One audio as the bytes of a file."""
    if isinstance(audio, tuple) and _is_samples(audio):
        return wav(audio[0], audio[1], name)
    data = file_bytes(audio, name)
    if data is not None:
        return data
    raise InvalidInputError(
        f"{name} must be a path, the bytes of an audio file or (samples, sampling_rate), not {type(audio).__name__}."
    )


def wav(samples: np.ndarray[Any, Any], rate: object, name: str = "audio") -> bytes:
    """Float samples [frames] or [frames, channels] as a 32-bit float WAV (WAVE_FORMAT_IEEE_FLOAT)."""
    if not isinstance(rate, int) or isinstance(rate, bool) or not AUDIO_RATE_MIN <= rate <= AUDIO_RATE_MAX:
        raise InvalidInputError(
            f"{name}: the sampling rate must be an int of Hz ({AUDIO_RATE_MIN}-{AUDIO_RATE_MAX}), not {rate!r}."
        )
    if samples.dtype.kind not in "fiu" or samples.ndim not in (1, 2) or samples.shape[0] == 0:
        raise InvalidInputError(
            f"{name} is a {samples.dtype} array of shape {tuple(samples.shape)}; samples are numbers, "
            "[frames] or [frames, channels]."
        )
    frames = np.ascontiguousarray(samples.reshape(samples.shape[0], -1), dtype="<f4")
    channels = frames.shape[1]
    data = frames.tobytes()
    fmt = struct.pack("<HHIIHH", 3, channels, rate, rate * channels * 4, channels * 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body
