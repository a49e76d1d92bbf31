"""What ``gallery add`` is asked (``AddRequest``), what a family answers (``Choice``), and the int8 gate every family
with an int8 path keeps.

The choice of engine is one class per family of tasks (``gallery.families``), each returning a ``Choice``; ``add.py``
stages the model, asks the family and writes what it returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery.config import ModelOptions

QUANTIZATIONS = ("int8",)
PARAM_INT8_QUALITY = "tritonhf.int8_quality"  # an int8 model's gate: its measured quality against fp32


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
    backend: str = "auto"  # auto, or the engine of the task's family (--backend's help lists them)
    onnx_runtime: str = "auto"  # with backend onnx: auto | native | python
    quantize: str | None = None  # "int8": int8 weights and per-token activations, behind a quality gate
    calibration: tuple[str, ...] = ()  # texts for the text encoders' int8 gate (default: their own)
    force: bool = False  # keep an int8 model that fails its gate
    engine: str = "auto"  # text-generation: auto, or an engine of its registry (families.generation.engines)
    weight_format: str = ""  # the family's default when empty: text-generation on OpenVINO int8 (GGUF int8 | int4 |
    # fp16 from a folder, or int4-ir | int8-ir | fp16-ir), image-text-to-text fp16 (IR: fp16 | int8 | int4)
    labels: tuple[str, ...] = ()
    default_prompt_name: str | None = None  # feature-extraction: the prompt put before every text unless one is named
    options: ModelOptions = field(default_factory=ModelOptions)
    params: Mapping[str, str] = field(default_factory=dict)

    def label_parameters(self) -> dict[str, str]:
        """``--labels`` as the zero-shot templates read them (none given: {})."""
        if any("," in label or not label.strip() for label in self.labels):
            raise GalleryError("--labels must be non-empty labels separated by commas.")
        return {"labels": ",".join(label.strip() for label in self.labels)} if self.labels else {}


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


def check(request: AddRequest) -> None:
    """The options every family reads alike, refused before anything is read or written."""
    if request.quantize is not None and request.quantize not in QUANTIZATIONS:
        raise GalleryError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, not {request.quantize!r}.")


class Gated(Protocol):
    """An int8 model measured against its float32 (speech's ``Int8Check``, the text encoders' ``Quantized``)."""

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
