"""What ``gallery add`` is asked (``AddRequest``, checked once) and what each family's choice returns (``Choice``).

The choice of engine is one function per model family, each returning a ``Choice``: text encoders and
image classifiers (``encoder_choice``), image-text towers (``encoder_choice.towers``), speech
(``speech_choice``) and text generation (``generation_choice``). ``add.py`` only stages the model, asks
the family's function and writes what it returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import onnx_export, tower_export
from tritonhf.gallery.config import ModelOptions
from tritonhf.tasks import Task

ENCODER_BACKENDS = ("auto", "pytorch", "onnx", "openvino")  # speech's engines: gallery.engines.SPEECH
QUANTIZATIONS = ("int8",)
PARAM_INT8_QUALITY = "tritonhf.int8_quality"  # an int8 model's gate: its measured quality against fp32
PARAM_ENCODER_CHECK = "tritonhf.encoder_check"  # Whisper on CTranslate2: its encoder on OpenVINO, measured
ONNX_RUNTIMES = ("auto", "native", "python")
ENGINE_NAMES = {"onnx": "ONNX Runtime", "pytorch": "PyTorch", "openvino": "OpenVINO"}  # the encoders' backends


@dataclass(frozen=True)
class AddRequest:
    """Everything ``gallery add`` needs; the CLI builds one from its options."""

    task: str
    source: str
    repository: Path
    name: str | None = None
    revision: str | None = None
    vendor: bool = True
    allow_pickle: bool = False
    trust_remote_code: bool = False
    backend: str = "auto"  # auto | pytorch | onnx (exported once, served with onnxruntime)
    onnx_runtime: str = "auto"  # with backend onnx: one of ONNX_RUNTIMES
    quantize: str | None = None  # "int8": int8 weights and per-token activations, behind a quality gate
    calibration: tuple[str, ...] = ()  # texts for the int8 gate (default: onnx_export.CALIBRATION)
    force: bool = False  # keep an int8 model that fails its gate
    engine: str = "auto"  # text-generation: auto, or an engine of the registry (gallery.engines)
    weight_format: str = "int8"  # text-generation on OpenVINO: GGUF int8 | int4 | fp16 (a folder), or int4-ir | int8-ir
    labels: tuple[str, ...] = ()
    default_prompt_name: str | None = None  # feature-extraction: the prompt put before every text unless one is named
    options: ModelOptions = field(default_factory=ModelOptions)
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Choice:
    """A family's answer: the backend that serves the model, why (said in the config and while adding), and the
    parameters it writes (its measured figures among them). ``part`` is False when no ``NAME__onnx`` part is
    written."""

    backend: str
    reason: str
    params: Mapping[str, str] = field(default_factory=dict)
    part: bool = True
    label: str = ""  # how gallery add names what serves it (default: the backend's name)


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


def check(request: AddRequest, task: Task) -> None:
    """The options that cannot go together, refused before anything is read or written."""
    if request.onnx_runtime not in ONNX_RUNTIMES:
        raise GalleryError(f"--onnx-runtime must be one of {', '.join(ONNX_RUNTIMES)}, not {request.onnx_runtime!r}.")
    if request.quantize is not None and request.quantize not in QUANTIZATIONS:
        raise GalleryError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, not {request.quantize!r}.")
    if request.onnx_runtime == "native" and (task.name in onnx_export.IMAGE_TASKS or task.name == tower_export.TASK):
        raise GalleryError(f"{task.name} runs its ONNX graphs inside the Python backend: drop --onnx-runtime native.")
    if task.takes_audio:  # its engines and their options: gallery.speech_choice.check
        return
    if request.backend not in ENCODER_BACKENDS:
        raise GalleryError(f"--backend must be one of {', '.join(ENCODER_BACKENDS)}, not {request.backend!r}.")
    if request.quantize and (task.name in onnx_export.IMAGE_TASKS or task.name == tower_export.TASK):
        raise GalleryError(f"--quantize int8 is for text encoders; {task.name} is served in fp32 (drop --quantize).")
    if request.backend == "openvino" and request.quantize:
        raise GalleryError("--quantize int8 makes an ONNX Runtime model: use it with --backend onnx (or auto).")
    if request.backend == "openvino" and request.onnx_runtime == "native":
        raise GalleryError("--backend openvino runs model.onnx with OpenVINO inside the Python backend, not natively.")
    if request.backend in ("onnx", "openvino") or request.quantize:
        if task.name != tower_export.TASK:  # image-text models: two graphs (gallery/tower_export.py)
            onnx_export.check_exportable(task.name)
        if request.backend == "pytorch":
            raise GalleryError("--quantize int8 quantizes the ONNX model: use --backend onnx (or auto).")
        if not request.vendor:
            raise GalleryError(
                f"--backend {request.backend} writes model.onnx into the repository; "
                "it cannot be used with --no-vendor."
            )


class Gated(Protocol):
    """An int8 model measured against its float32 (``speech_int8.Int8Check``, ``onnx_export.Quantized``)."""

    @property
    def passed(self) -> bool: ...

    @property
    def summary(self) -> str: ...


def int8_gate(request: AddRequest, found: Gated, progress: Progress) -> dict[str, str]:
    """The int8 gate's verdict: its summary for the config, or a refusal (unless --force)."""
    progress.step(found.summary)
    verdict = int8_verdict(request, found)
    if verdict is None:
        raise GalleryError(
            f"{found.summary}: below the gate, so int8 is refused. Keep fp32 (drop --quantize), or pass --force."
        )
    return {PARAM_INT8_QUALITY: verdict}


def int8_verdict(request: AddRequest, found: Gated) -> str | None:
    """The int8 gate's summary for the config (said when --force keeps a model below it); None when refused."""
    if not found.passed and not request.force:
        return None
    return found.summary + (" (kept with --force)" if not found.passed else "")
