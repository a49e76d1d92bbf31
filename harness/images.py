"""Test images made here (no files checked in): every format and mode the image tasks take,
broken ones, and decompression bombs, plus transformers' in-process answer for one image.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
MODES = ("RGB", "RGBA", "L", "P")


def picture(rng: random.Random, width: int, height: int) -> np.ndarray:
    """Smooth colour gradients plus noise: something a classifier's scores depend on."""
    ys, xs = np.mgrid[0:height, 0:width]
    phase = [rng.uniform(0, 6.3) for _ in range(3)]
    scale = rng.uniform(0.02, 0.3)
    channels = [127 + 120 * np.sin(scale * (xs + 2 * ys) + p) for p in phase]
    noise = np.random.default_rng(rng.randint(0, 2**31)).integers(-20, 20, size=(height, width, 3))
    return np.clip(np.stack(channels, axis=-1) + noise, 0, 255).astype(np.uint8)


def encode(pixels: np.ndarray, image_format: str = "PNG", mode: str = "RGB", exif_orientation: int = 0) -> bytes:
    """``pixels`` (RGB) saved as ``image_format`` in ``mode``; an EXIF orientation tag on a JPEG when asked."""
    image = Image.fromarray(pixels, "RGB")
    if mode == "RGBA":
        ramp = (np.arange(pixels.shape[1]) * 7 % 256).astype(np.uint8)
        image.putalpha(Image.fromarray(np.repeat(ramp[None], pixels.shape[0], axis=0)))
    elif mode != "RGB":
        image = image.convert(mode)
    if image_format == "JPEG" and image.mode in ("RGBA", "P"):
        image = image.convert("RGB")
    buffer = io.BytesIO()
    extra: dict[str, Any] = {}
    if exif_orientation:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        extra["exif"] = exif.tobytes()
    if image_format == "WEBP":
        extra["lossless"] = True
    image.save(buffer, image_format, **extra)
    return buffer.getvalue()


def random_image(rng: random.Random) -> tuple[bytes, str]:
    """One encoded image of random size, format and mode, and a description of it."""
    width, height = rng.randint(1, 300), rng.randint(1, 300)
    image_format, mode = rng.choice(FORMATS), rng.choice(MODES)
    return encode(picture(rng, width, height), image_format, mode), f"{image_format} {mode} {width}x{height}"


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG of ``width`` x ``height`` black pixels (grey): kilobytes that decode to width*height bytes."""
    row = b"\x00" + bytes(width)  # filter 0, then the row
    compressor = zlib.compressobj(9)
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    return _png(width, height, 0, data)


def header_only_png(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` RGB pixels and whose data is a few bytes."""
    return _png(width, height, 2, zlib.compress(b"\x00" * 16))


def _png(width: int, height: int, colour: int, data: bytes) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


class ImageOracle:
    """What transformers answers for one image alone: ``load_image``, the model's processor (PIL
    backend, as the gallery serves it), one forward pass, softmax (sigmoid for multi-label)."""

    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import AutoModelForImageClassification

        from tritonhf.runtime.images import load_image_processor

        self.torch = torch
        self.processor = load_image_processor(str(folder))
        self.model = AutoModelForImageClassification.from_pretrained(folder).eval()
        config = self.model.config
        self.labels = [config.id2label[index] for index in range(config.num_labels)]
        self.multi_label = config.problem_type == "multi_label_classification"

    def scores(self, data: bytes) -> np.ndarray:
        from transformers.image_utils import load_image

        image = load_image(Image.open(io.BytesIO(data)))
        with self.torch.inference_mode():
            logits = self.model(**self.processor(images=[image], return_tensors="pt")).logits[0]
        probabilities = self.torch.sigmoid(logits) if self.multi_label else self.torch.softmax(logits, -1)
        return probabilities.numpy()

    def ranked(self, data: bytes, top_k: int | None = None) -> dict[str, Any]:
        scores = self.scores(data)
        order = np.argsort(-scores, kind="stable")[: top_k or len(self.labels)]
        return {"labels": [self.labels[i] for i in order], "scores": scores[order].tolist(), "truncated": False}


class ClipOracle:
    """What transformers answers for one image (or one text) alone with an image-text model: unit vectors from
    ``get_image_features`` / ``get_text_features``, each label's prompt embedded alone, CLIP's softmax of
    ``logit_scale * cosine`` (SigLIP's sigmoid with its bias)."""

    def __init__(self, folder: Path, template: str = "a photo of a {}.") -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from tritonhf.runtime.images import load_image_processor

        self.torch, self.template = torch, template
        self.processor = load_image_processor(str(folder))
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).eval()
        self.siglip = self.model.config.model_type.startswith("siglip")

    @staticmethod
    def _unit(features: Any) -> np.ndarray:
        vector = (features if hasattr(features, "norm") else features.pooler_output)[0].numpy()
        return vector / max(float(np.linalg.norm(vector)), 1e-12)

    def image_vector(self, data: bytes) -> np.ndarray:
        from transformers.image_utils import load_image

        image = load_image(Image.open(io.BytesIO(data)))
        with self.torch.inference_mode():
            return self._unit(self.model.get_image_features(**self.processor(images=[image], return_tensors="pt")))

    def text_vector(self, text: str) -> np.ndarray:
        padding = {"padding": "max_length", "max_length": self.tokenizer.model_max_length} if self.siglip else {}
        encoded = self.tokenizer([text], truncation=True, return_tensors="pt", **padding)
        if self.siglip:
            encoded.pop("attention_mask", None)
        with self.torch.inference_mode():
            return self._unit(self.model.get_text_features(**encoded))

    def ranked(self, data: bytes, labels: list[str]) -> dict[str, Any]:
        image = self.image_vector(data)
        cosines = np.array([float(image @ self.text_vector(self.template.format(label))) for label in labels])
        logits = float(self.model.logit_scale.detach().exp()) * cosines
        if self.siglip:
            scores = 1 / (1 + np.exp(-(logits + float(self.model.logit_bias.detach()))))
        else:
            scores = np.exp(logits - logits.max())
            scores /= scores.sum()
        order = np.argsort(-scores, kind="stable")
        return {"labels": [labels[i] for i in order], "scores": scores[order].tolist(), "truncated": False,
                "vector": image}  # fmt: skip
