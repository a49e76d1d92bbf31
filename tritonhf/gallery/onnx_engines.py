"""An ONNX export run by ONNX Runtime or OpenVINO, for the families that export to ONNX (text encoders, image
classifiers, image-text towers): the tolerance an export is held to, the sample inputs it is checked on, and
``--backend auto``'s measurement of the two engines (whichever runs the export faster here).

Both run the same ``model.onnx``; which is faster depends on the CPU (instruction sets, cores,
caches) and on the model, so ``gallery add`` measures instead of guessing. It runs the file
with each engine exactly as the served model will (the runtime's own ``OnnxModel`` and
``OpenVinoModel``, this instance's share of the cores) for a short while: one text at a time
(what a lone request waits for) and full batches (what a loaded model gets through), the two
engines in alternating rounds so that a noisy machine slows both alike. OpenVINO is kept only
when it gets through a batch clearly faster (``GAIN``) without making a lone text much slower
(``LONE_SLOWDOWN``); both engines' figures go into config.pbtxt either way. OpenVINO must also
give PyTorch's answers (``onnx_export.check_openvino``), or it is not measured at all.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonhf.errors import ModelSourceError
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.gallery.timing import threads
from tritonhf.tasks import PARAM_BACKEND

TOLERANCE = 1e-3  # an export's outputs against PyTorch's, and OpenVINO's run of it
SAMPLES = ["This movie is absolutely wonderful", "short", "Alice met Bob in Paris to talk about the new office."]
NAMES = {"onnx": "ONNX Runtime", "pytorch": "PyTorch", "openvino": "OpenVINO"}  # how gallery add names each backend
BATCH = 16  # texts per batch: what a loaded model computes at once here (c16 in the benchmarks)
ROUNDS = 3  # alternating rounds per engine
LONE_CALLS, BATCH_CALLS = 12, 3  # calls per round: a few hundred ms per engine for MiniLM on 2 cores
GAIN = 1.10  # OpenVINO must get through a batch at least this much faster ...
LONE_SLOWDOWN = 1.15  # ... and keep a lone text within this factor of ONNX Runtime's time


@dataclass(frozen=True)
class Speed:
    """One engine on this machine: a lone item's time and the rate at a batch of ``batch`` items."""

    lone_ms: float
    batch_per_s: float
    batch: int = BATCH
    item: str = "text"

    def __str__(self) -> str:
        return f"{self.lone_ms:.1f} ms for one {self.item}, {self.batch_per_s:.0f} {self.item}s/s at batch {self.batch}"


@dataclass(frozen=True)
class Measured:
    """Both engines' figures on this machine and the one they make the better (what ``gallery add`` then
    chooses, with this summary as its reason: ``request.Choice``)."""

    backend: str  # "onnx" or "openvino"
    onnx: Speed
    openvino: Speed
    threads: int  # each engine's intra-op threads, as the served instance gets them

    @property
    def summary(self) -> str:
        """One line for the console and the config: both figures, and why the winner won."""
        kept = "OpenVINO" if self.backend == "openvino" else "ONNX Runtime"
        return (
            f"{kept}, measured here with {self.threads} threads: ONNX Runtime {self.onnx}; OpenVINO {self.openvino} "
            f"(OpenVINO is kept at >= {GAIN:.2f}x the batch rate and <= {LONE_SLOWDOWN:.2f}x the lone time)"
        )


def choose(onnx: Speed, openvino: Speed) -> str:
    """``"openvino"`` when it is clearly faster under load and not much slower alone, else ``"onnx"``."""
    faster = openvino.batch_per_s >= GAIN * onnx.batch_per_s
    lone_ok = openvino.lone_ms <= LONE_SLOWDOWN * onnx.lone_ms
    return "openvino" if faster and lone_ok else "onnx"


def compare(weights: Path, onnx_file: str, texts: list[str], instances: int = 1) -> Measured:
    """Both engines on ``weights/onnx_file`` (config and tokenizer beside it), measured on ``texts``."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(weights)
    lone = [dict(tokenizer(text, return_tensors="pt")) for text in texts]
    batch_texts = [texts[index % len(texts)] for index in range(BATCH)]
    full = dict(tokenizer(batch_texts, padding=True, return_tensors="pt"))
    return compare_inputs(weights, onnx_file, lone, full, instances)


def compare_inputs(
    weights: Path,
    onnx_file: str,
    lone: list[dict[str, Any]],
    full: dict[str, Any],
    instances: int = 1,
    item: str = "text",
    calls: tuple[int, int, int] = (ROUNDS, LONE_CALLS, BATCH_CALLS),
) -> Measured:
    """Both engines on ``weights/onnx_file``: ``lone`` inputs one at a time, then the batch ``full`` (torch
    tensors by input name), in ``calls`` = (rounds, lone calls, batch calls per round)."""
    import torch

    from tritonhf.runtime.loading import OnnxModel, OpenVinoModel

    rounds, lone_calls, batch_calls = calls
    size, count = len(next(iter(full.values()))), threads(instances)
    engines: dict[str, Any] = {
        "onnx": OnnxModel(str(weights), count, onnx_file),
        "openvino": OpenVinoModel(str(weights), count, onnx_file),
    }
    runs: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in engines}
    with torch.inference_mode():
        for model in engines.values():  # a shape's first call pays for allocation and (OpenVINO) kernels for it
            for batch in [*lone, full]:
                model(**batch)
        for round_ in range(rounds):
            for name in engines if round_ % 2 == 0 else reversed(list(engines)):
                model = engines[name]
                lone_times, batch_times = runs[name]
                lone_times += [_timed(model, lone[i % len(lone)]) for i in range(lone_calls)]
                batch_times += [_timed(model, full) for _ in range(batch_calls)]
    speeds = {
        name: Speed(1000 * statistics.median(lone_times), size / statistics.median(batch_times), size, item)
        for name, (lone_times, batch_times) in runs.items()
    }
    return Measured(choose(speeds["onnx"], speeds["openvino"]), speeds["onnx"], speeds["openvino"], count)


def _timed(model: Callable[..., Any], batch: dict[str, Any]) -> float:
    started = time.perf_counter()
    model(**batch)
    return time.perf_counter() - started


def image_samples(folder: Path) -> dict[str, Any]:
    """The image processor's ``pixel_values`` of three sample images (sizes and colours that differ)."""
    import numpy as np

    from tritonhf.runtime.images import load_image_processor

    rng = np.random.default_rng(0)
    shapes = ((48, 64, 3), (300, 200, 3), (32, 32, 3))
    images = [rng.integers(0, 256, size=shape, dtype=np.uint8) for shape in shapes]
    return {"pixel_values": load_image_processor(str(folder))(images=images, return_tensors="np")["pixel_values"]}


def else_pytorch(request: AddRequest, attempt: Callable[[], Choice], undo: Callable[[], None] = lambda: None) -> Choice:
    """What ``attempt`` chose from the ONNX export; when the export fails (ModelSourceError: it could not be made,
    or its answers are not PyTorch's), ``undo`` clears it and PyTorch serves the model, saying why, unless
    ``--backend`` named that path (the failure is then the answer)."""
    try:
        return attempt()
    except ModelSourceError as exc:
        if request.backend != "auto":
            raise
        undo()
        return Choice("pytorch", f"the ONNX export was not usable ({exc})", part=False)


def notes(params: Mapping[str, str]) -> list[str]:
    """The config's line about a model whose export ONNX Runtime runs."""
    if params.get(PARAM_BACKEND) != "onnx":
        return []
    return [
        "ONNX Runtime: intra-op threads = this instance's share of the cores, inter-op 1, all graph "
        "optimisations (measured against the alternatives in tritonhf's docs/performance.md)."
    ]
