"""Text encoders and image classifiers, and the text tasks PyTorch serves as they are (question answering,
text2text generation): served with PyTorch, or exported to ONNX and run by ONNX Runtime (inside the Python backend,
or natively as a second model ``NAME__onnx``) or by OpenVINO, whichever gives PyTorch's answers and measures faster
here (``choice``); int8 behind its gate (``onnx_export``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery import onnx_engines, sentence, sources
from tritonhf.gallery.families.encoders import choice, onnx_export
from tritonhf.gallery.family import Family, Staging
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.runtime.common import PARAM_ENTAILMENT_ID, PARAM_ZERO_SHOT_METHOD
from tritonhf.tasks import Task

BACKENDS = ("auto", "pytorch", "onnx", "openvino")
ONNX_RUNTIMES = ("auto", "native", "python")


class Encoders(Family):
    tasks = (
        "text-classification",
        "token-classification",
        "feature-extraction",
        "zero-shot-classification",
        "text-ranking",
        "question-answering",
        "fill-mask",
        "image-classification",
        "text2text-generation",
    )

    @classmethod
    def takes_backend(cls, name: str) -> bool:
        return name in BACKENDS

    @classmethod
    def refuse_foreign(cls, request: AddRequest, task: Task, own: type[Family]) -> None:
        """--onnx-runtime's value for any task, --default-prompt-name for any but feature-extraction, and an ONNX
        backend for a task whose family has none (and no list of its own to answer with)."""
        _check_values(request, task)
        if (
            request.backend in ("onnx", "openvino")
            and not own.takes_backend(request.backend)
            and not own.lists_backends
        ):
            onnx_export.check_exportable(task.name)

    @classmethod
    def backend_help(cls) -> str:
        return (
            f"Encoder and image tasks: {', '.join(BACKENDS)} (auto: ONNX Runtime where the export matches PyTorch, "
            "measured against OpenVINO running the same export; else PyTorch)."
        )

    def check(self) -> None:
        request, task = self.request, self.task
        _check_values(request, task)
        if request.onnx_runtime == "native" and task.name in onnx_export.IMAGE_TASKS:
            raise GalleryError(
                f"{task.name} runs its ONNX graphs inside the Python backend: drop --onnx-runtime native."
            )
        if request.backend not in BACKENDS:
            raise GalleryError(f"--backend must be one of {', '.join(BACKENDS)}, not {request.backend!r}.")
        if request.quantize and task.name in onnx_export.IMAGE_TASKS:
            raise GalleryError(
                f"--quantize int8 is for text encoders; {task.name} is served in fp32 (drop --quantize)."
            )
        if request.backend == "openvino" and request.quantize:
            raise GalleryError("--quantize int8 makes an ONNX Runtime model: use it with --backend onnx (or auto).")
        if request.backend == "openvino" and request.onnx_runtime == "native":
            raise GalleryError(
                "--backend openvino runs model.onnx with OpenVINO inside the Python backend, not natively."
            )
        if request.backend in ("onnx", "openvino") or request.quantize:
            onnx_export.check_exportable(task.name)
            if request.backend == "pytorch":
                raise GalleryError("--quantize int8 quantizes the ONNX model: use --backend onnx (or auto).")
            if not request.vendor:
                raise GalleryError(
                    f"--backend {request.backend} writes model.onnx into the repository; "
                    "it cannot be used with --no-vendor."
                )

    def reserve(self, name: str, repository: Path) -> str | None:
        return choice.native_part(self.request, self.task, name, repository)

    def parameters(self, folder: Path) -> dict[str, str]:
        if self.task.name == "feature-extraction":
            return sentence.options(folder, self.request.default_prompt_name)
        if self.task.name != "zero-shot-classification":
            return {}
        entailment = entailment_id(folder)
        if entailment is None:
            params = {**sentence.options(folder), PARAM_ZERO_SHOT_METHOD: "embeddings"}
        else:
            params = {PARAM_ZERO_SHOT_METHOD: "entailment", PARAM_ENTAILMENT_ID: str(entailment)}
        return {**params, **self.request.label_parameters()}

    def output_dims(self, folder: Path) -> dict[str, tuple[int, ...]]:
        config = sources.model_config(folder)
        if self.task.name == "feature-extraction" and isinstance(config.get("hidden_size"), int):
            return {"EMBEDDING": (sentence.embedding_dimension(folder, int(config["hidden_size"])),)}
        return {}

    def choose(
        self, resolved: sources.ResolvedSource, staging: Staging, params: dict[str, str], progress: Progress
    ) -> Choice:
        chosen = choice.choose(self.task, self.request, staging, params, progress)
        return dataclasses.replace(chosen, label=chosen.label or onnx_engines.NAMES[chosen.backend])

    def notes(self, params: Mapping[str, str]) -> list[str]:
        return onnx_engines.notes(params)


def _check_values(request: AddRequest, task: Task) -> None:
    if request.onnx_runtime not in ONNX_RUNTIMES:
        raise GalleryError(f"--onnx-runtime must be one of {', '.join(ONNX_RUNTIMES)}, not {request.onnx_runtime!r}.")
    if request.default_prompt_name is not None and task.name != "feature-extraction":
        raise GalleryError(f"--default-prompt-name is for feature-extraction models, not {task.name}.")


def entailment_id(folder: Path) -> int | None:
    """The entailment label's id of a natural-language-inference classifier, found as transformers' zero-shot
    pipeline finds it (the first label starting with "entail"); None for any other model (an embedding model)."""
    config = sources.model_config(folder)
    architectures = config.get("architectures") or []
    if not any(str(name).endswith("ForSequenceClassification") for name in architectures):
        return None
    label2id = config.get("label2id") or {}
    found = [int(index) for label, index in label2id.items() if str(label).lower().startswith("entail")]
    return found[0] if found else None
