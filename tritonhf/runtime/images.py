"""Encoded images in, model inputs out: decoding with limits, as transformers' ``load_image`` does.

Requests carry encoded bytes (JPEG, PNG, WebP, GIF, BMP), never pixels: a few kB instead of
600 kB per 224x224 image on the wire, and one decoder (Pillow's, here) for every client.
Each image is read exactly as ``transformers.image_utils.load_image`` reads a file (EXIF
orientation applied, then RGB: an alpha channel is dropped, a palette expanded, grey
replicated, a GIF's or animated WebP's first frame), so a served answer equals the same
model run in-process on the same file.

Limits come before the pixels: Pillow reads the size from the header, so an image past
``max_pixels`` (a decompression bomb: a few kB of PNG that inflate to gigabytes) is refused
before anything is decoded. A refused image fails its request alone (``BadRequest``).
"""

from __future__ import annotations

import io
import warnings
from typing import Any

from .common import BadRequest

FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP")
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000  # 40 MP: a large phone photo is 12-50 MP
PARAM_MAX_IMAGE_PIXELS = "max_image_pixels"
# The image processor's backend, written into the config by `gallery add`: "pil" always, so the served
# model and an in-process reference resize alike whether or not torchvision is installed (its resize differs).
PARAM_IMAGE_BACKEND = "tritonhf.image_backend"
IMAGE_BACKEND = "pil"


def decode_image(data: bytes, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Any:
    """One encoded image as an RGB ``PIL.Image``; ``BadRequest`` saying what is wrong with it."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not data:
        raise BadRequest("is empty (0 bytes); send the bytes of a JPEG, PNG, WebP, GIF or BMP file.")
    try:
        with warnings.catch_warnings():  # Pillow's own bomb warning (89 MP): the size check below decides
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.DecompressionBombError as exc:  # past twice Pillow's limit: refused while reading the header
        raise BadRequest(f"is too large to decode ({exc}); send a smaller image.") from None
    except UnidentifiedImageError:
        served = _served_format(data)
        if served:  # the signature of a format we serve, and a header Pillow refused: a broken file
            raise BadRequest(f"is a damaged {served} image: its header cannot be read ({len(data)} bytes).") from None
        kind = _other_format(data)
        what = f"is {kind}, which is not supported" if kind else "is not an image Pillow can read"
        raise BadRequest(f"{what} ({len(data)} bytes); send JPEG, PNG, WebP, GIF or BMP.") from None
    except (OSError, ValueError, SyntaxError) as exc:  # a header Pillow recognised and then could not read
        raise BadRequest(f"is a damaged or truncated image ({exc}).") from None
    width, height = image.size
    if width < 1 or height < 1:
        raise BadRequest(f"is a {width}x{height} {image.format} image: it has no pixels.")
    if width * height > max_pixels:
        raise BadRequest(
            f"is {width}x{height} = {width * height:,} pixels, over the limit of {max_pixels:,} "
            f"(parameter {PARAM_MAX_IMAGE_PIXELS}); send a smaller image."
        )
    try:
        image.load()
        return ImageOps.exif_transpose(image).convert("RGB")
    except (OSError, ValueError, SyntaxError) as exc:
        raise BadRequest(f"is a damaged or truncated {image.format} image ({exc}).") from None


_SIGNATURES = {
    b"II*\x00": "a TIFF image",
    b"MM\x00*": "a TIFF image",
    b"\x00\x00\x01\x00": "an ICO image",
    b"%PDF": "a PDF document",
    b"\x89HDF": "an HDF5 file",
    b"8BPS": "a Photoshop image",
}


def _served_format(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "WebP"
    return "BMP" if data.startswith(b"BM") and len(data) > 14 else None


def _other_format(data: bytes) -> str | None:
    """A name for a known format that is not served, to say more than "cannot read"."""
    if data[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1", b"ftypavif"):
        return "a HEIC/AVIF image"
    return next((name for magic, name in _SIGNATURES.items() if data.startswith(magic)), None)


def load_image_processor(location: str, trust_remote_code: bool = False) -> Any:
    """The model's own image processor, on the PIL backend (see ``PARAM_IMAGE_BACKEND``)."""
    from transformers import AutoImageProcessor

    auto: Any = AutoImageProcessor  # untyped in transformers
    return auto.from_pretrained(location, backend=IMAGE_BACKEND, trust_remote_code=trust_remote_code)


def blank_pixels(processor: Any) -> Any:
    """``pixel_values`` of one black image as the processor makes them: a template's warm-up input, so that the
    first real request is not the slow one."""
    import numpy as np

    return processor(images=[np.zeros((8, 8, 3), dtype=np.uint8)], return_tensors="np")["pixel_values"]


def pixel_rows(batch: Any, processor: Any, max_pixels: int, name: str = "IMAGE") -> dict[int, Any]:
    """Each live row's image decoded and run through the processor: ``{row: pixel_values [3, H, W]}``.

    An image that cannot be used fails its request alone (``batch.fail_row``), naming the input and
    the row. The processor resizes each image on its own, so a row's pixels do not depend on the batch.
    """
    decoded: dict[int, Any] = {}
    for row in batch.live_rows():
        try:
            decoded[row] = decode_image(batch.texts[row], max_pixels)
        except BadRequest as exc:
            batch.fail_row(row, f"input '{name}' {exc}")
    live = set(batch.live_rows())  # a request with one bad image fails whole: its other images are not run
    rows = [row for row in decoded if row in live]
    if not rows:
        return {}
    pixel_values = processor(images=[decoded[row] for row in rows], return_tensors="np")["pixel_values"]
    return dict(zip(rows, pixel_values))
