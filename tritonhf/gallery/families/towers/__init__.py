"""Image-text models (CLIP, SigLIP), zero-shot image classification: both towers exported to ONNX (``export``) when
they give PyTorch's vectors, run by ONNX Runtime or (``--backend openvino``, or ``auto`` where it measures faster)
OpenVINO inside the Python backend; else PyTorch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import installed, onnx_engines, sources
from tritonhf.gallery.families.towers import export
from tritonhf.gallery.family import Family, Staging
from tritonhf.gallery.onnx_engines import TOLERANCE, else_pytorch
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.runtime.common import PARAM_OPENVINO_DIFF
from tritonhf.tasks import PARAM_CALIBRATION

BACKENDS = ("auto", "pytorch", "onnx", "openvino")


class Towers(Family):
    tasks = ("zero-shot-image-classification",)

    @classmethod
    def takes_backend(cls, name: str) -> bool:
        return name in BACKENDS

    def check(self) -> None:
        request, task = self.request, self.task
        if request.onnx_runtime == "native":
            raise GalleryError(
                f"{task.name} runs its ONNX graphs inside the Python backend: drop --onnx-runtime native."
            )
        if request.backend not in BACKENDS:
            raise GalleryError(f"--backend must be one of {', '.join(BACKENDS)}, not {request.backend!r}.")
        if request.quantize:
            raise GalleryError(
                f"--quantize int8 is for text encoders; {task.name} is served in fp32 (drop --quantize)."
            )
        if request.backend in ("onnx", "openvino") and not request.vendor:
            raise GalleryError(
                f"--backend {request.backend} writes model.onnx into the repository; "
                "it cannot be used with --no-vendor."
            )

    def parameters(self, folder: Path) -> dict[str, str]:
        return self.request.label_parameters()

    def output_dims(self, folder: Path) -> dict[str, tuple[int, ...]]:
        config = sources.model_config(folder)
        if isinstance(config.get("projection_dim"), int):
            return {"EMBEDDING": (int(config["projection_dim"]),)}  # CLIP's shared space
        vision = config.get("vision_config")  # SigLIP: the towers' hidden size is the space
        if isinstance(vision, dict) and isinstance(vision.get("hidden_size"), int):
            return {"EMBEDDING": (int(vision["hidden_size"]),)}
        return {}

    def choose(
        self, resolved: sources.ResolvedSource, staging: Staging, params: dict[str, str], progress: Progress
    ) -> Choice:
        request = self.request
        if request.backend == "pytorch":
            chosen = Choice("pytorch", "--backend pytorch", part=False)
        elif not request.vendor:
            chosen = Choice("pytorch", f"{self.task.name} runs on PyTorch", part=False)
        else:
            chosen = towers(request, staging.weights, progress)
        return dataclasses.replace(chosen, label=chosen.label or onnx_engines.NAMES[chosen.backend])

    def notes(self, params: Mapping[str, str]) -> list[str]:
        return onnx_engines.notes(params)


def towers(request: AddRequest, weights: Path, progress: Progress) -> Choice:
    """An image-text model's engine: both towers in ONNX when they match PyTorch, run by ONNX
    Runtime or (``--backend openvino``, or ``auto`` where it measures faster) OpenVINO; else PyTorch."""
    return else_pytorch(request, lambda: _towers(request, weights, progress))


def _towers(request: AddRequest, weights: Path, progress: Progress) -> Choice:
    """Both towers exported and checked (a ModelSourceError when they are not), run by ONNX Runtime or OpenVINO."""
    missing = installed.onnx_missing()
    if missing is not None:
        raise ModelSourceError(missing)
    exported = export.export(weights, progress)
    params = dict(exported.parameters)
    backend, reason = "onnx", f"both towers exported, within {TOLERANCE} of PyTorch"
    if request.backend == "openvino" or (request.backend == "auto" and installed.openvino_available()):
        try:
            difference = export.check_openvino(exported)
            if request.backend == "openvino":
                backend, reason = "openvino", f"{reason}, run by OpenVINO"
            else:
                progress.step("Measuring ONNX Runtime and OpenVINO on the vision tower (--backend auto)")
                choice = _measure_vision(weights, exported, request.options.instances)
                params[PARAM_CALIBRATION] = choice.summary
                progress.step(choice.summary)
                backend = choice.backend
                if backend == "openvino":
                    reason += ", run by OpenVINO (kept over ONNX Runtime by measuring both here)"
                else:
                    reason += "; kept over OpenVINO by measuring both here"
            if backend == "openvino":
                params[PARAM_OPENVINO_DIFF] = f"{difference:.2e}"
        except ModelSourceError as exc:
            if request.backend == "openvino":
                raise
            reason += f"; OpenVINO not used ({exc})"
    sources.drop_source_weights(weights)  # served from the two graphs
    return Choice(backend, reason, params)


def _measure_vision(weights: Path, towers: export.Towers, instances: int) -> onnx_engines.Measured:
    """The vision tower (where an image-text model spends its time) on both engines: the sample images one
    at a time and in a batch of 8, two short rounds (a ViT-B/32 batch takes about a second on 2 cores)."""
    import torch

    pixels = torch.from_numpy(towers.pixels["pixel_values"])
    lone = [{"pixel_values": pixels[index : index + 1]} for index in range(len(pixels))]
    full = {"pixel_values": pixels[[index % len(pixels) for index in range(8)]]}
    return onnx_engines.compare_inputs(weights, export.VISION, lone, full, instances, "image", (2, 3, 1))
