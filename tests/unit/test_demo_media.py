"""The online demo's media section over the in-memory Triton: drawn pictures against CLIP's labels,
an ImageNet label, and speech when espeak-ng is there (said plainly when it is not)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from tritonhf import Client
from tritonhf import demo as demo_module
from tritonhf.bootstrap.layout import Workspace
from tritonhf.demo import SHAPES, SPOKEN, Demo
from tritonhf.sdk.testing import FakeServer, MemoryTransport


def _colour(item: bytes) -> str:
    pixels = np.asarray(Image.open(io.BytesIO(item)).convert("RGB"))[112, 112]
    return "a red square" if pixels[0] > pixels[2] else "a blue circle"


def clip(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    found = [_colour(item) for item in inputs["IMAGE"].reshape(-1)]
    labels = [[label] + [other for other in SHAPES if other != label] for label in found]
    return {
        "EMBEDDING": np.ones((len(found), 4), dtype=np.float32),
        "LABELS": np.array([[label.encode() for label in row] for row in labels], dtype=object),
        "SCORES": np.array([[0.9, 0.06, 0.04]] * len(found), dtype=np.float32),
    }


def vit(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    rows = len(inputs["IMAGE"])
    label, score = np.array([[b"tile roof"]] * rows, dtype=object), np.full((rows, 1), 0.3, np.float32)
    return {"LABEL": label, "SCORE": score, "LABELS": label, "SCORES": score}


def whisper(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    rows = len(inputs["AUDIO"])
    return {"TEXT": np.array([[SPOKEN.encode()]] * rows, dtype=object),
            "SPOKEN_LANGUAGE": np.array([[b"en"]] * rows, dtype=object),
            "DURATION": np.full((rows, 1), 2.5, np.float32),
            "SEGMENTS": np.array([[json.dumps([]).encode()]] * rows, dtype=object)}  # fmt: skip


@pytest.mark.parametrize("speaks", [True, False])
def test_the_online_demo_shows_images_and_speech(speaks: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    server = FakeServer()
    server.add("clip", "zero-shot-image-classification", clip, output_dims={"EMBEDDING": 4})
    server.add("vit", "image-classification", vit)
    server.add("whisper", "automatic-speech-recognition", whisper)
    monkeypatch.setattr(demo_module, "_spoken", lambda text: b"RIFF fake wav" if speaks else None)
    console = Console(record=True, width=120)
    shown = Demo(console, None, Workspace(tmp_path), online=True)  # type: ignore[arg-type]
    names = {"zero-shot-image-classification": "clip", "image-classification": "vit",
             "automatic-speech-recognition": "whisper"}  # fmt: skip
    with Client(transport=MemoryTransport(server), timeout=5) as client:
        shown.media(client, names)
    text = console.export_text()
    assert "drawn 'a red square'   -> 'a red square' 0.90" in text
    assert "drawn 'a blue circle'  -> 'a blue circle' 0.90" in text
    assert "tile roof" in text
    if speaks:
        assert f"heard: {SPOKEN!r}" in text
    else:
        assert "espeak-ng is not installed" in text
