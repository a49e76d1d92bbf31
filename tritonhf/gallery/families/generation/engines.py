"""Text generation's engines: one registry (``GENERATION``: ``--engine``, config parameter ``tritonhf.engine``), read
by ``gallery add`` (the option's choices and help, the choice of engine in ``choice``, the config's notes) and by the
template, which loads the module ``NAME_engine.py`` beside its model.py and makes its ``ENGINE``.

An engine is one module and one line here. The module holds the engine the template drives (the interface is in
``templates/text_generation/model.py``'s docstring); the line says how ``gallery add`` serves a model with it: when
it cannot be used here, the weights it writes and checks (none: the model's own folder, vendored as it is), what the
config says of it, and how ``auto`` times it. ``--engine auto`` takes the first engine that can be used and whose
weights are written and checked; the last one, transformers, serves any model transformers loads. A GGUF file that
more than one engine reads as it is (the engines with a ``runner``) goes to the one that measures better here
(``measure``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonhf.errors import GalleryError
from tritonhf.gallery.families.generation import llamacpp, openvino
from tritonhf.gallery.families.generation.params import PARAM_ENGINE_REASON

if TYPE_CHECKING:
    from tritonhf._progress import Progress
    from tritonhf.gallery import sources
    from tritonhf.gallery.families.generation.measure import Runner
    from tritonhf.gallery.request import AddRequest

# (request, weight format, resolved source, the version folder, progress) -> (the parameters it writes, the source as
# served); ModelSourceError when its weights cannot be written or fail their check (--engine auto takes the next)
Weights = Callable[
    ["AddRequest", str, "sources.ResolvedSource", Path, "Progress"], tuple[dict[str, str], "sources.ResolvedSource"]
]
# (request, progress) -> (the source resolved for this engine, the weight format its export writes when not the one
# asked, why this engine cannot serve that source or None)
Resolve = Callable[["AddRequest", "Progress"], tuple["sources.ResolvedSource", str | None, str | None]]
# (the GGUF file as served, the weights folder, the parameters its weights wrote, request) -> how --engine auto times it
MakeRunner = Callable[[Path, Path, Mapping[str, str], "AddRequest"], "Runner"]


def _usable(request: AddRequest) -> str | None:
    return None


def _no_notes(params: Mapping[str, str]) -> list[str]:
    return []


@dataclass(frozen=True)
class GenerationEngine:
    """One engine of the text-generation template."""

    name: str  # --engine NAME and the config's tritonhf.engine; the template loads NAME_engine.py
    label: str  # how gallery add and the config name it
    summary: str  # its line in --engine's help
    backend: str  # the config's tritonhf.backend (what computes: "pytorch", "openvino" ...)
    module: Path | None = None  # NAME_engine.py when it is not one of the template's own: copied beside model.py
    unavailable: Callable[[AddRequest], str | None] = _usable  # why it cannot serve a model here; None: it can
    resolve: Resolve | None = None  # reads the source its own way (None: as every engine, a folder)
    weights: Weights | None = None  # writes and checks its own weights (None: the model's folder, vendored)
    notes: Callable[[Mapping[str, str]], list[str]] = _no_notes  # the config's comment lines about it
    runner: MakeRunner | None = None  # how auto times it on a GGUF file it reads as it is (None: never timed)


@dataclass(frozen=True)
class EnginePlan:
    """The engine to try (one that writes weights may still fail its check) or to use, and why; the weight format
    its export writes when not the one asked."""

    engine: GenerationEngine
    reason: str
    weight_format: str | None = None


def _transformers_notes(params: Mapping[str, str]) -> list[str]:
    reason = params.get(PARAM_ENGINE_REASON)
    return [f"Engine: transformers (PyTorch), because {reason}."] if reason else []


def _gguf_engine(name: str, label: str, summary: str, module: Any) -> GenerationEngine:
    """An engine whose module says all of it: when it cannot be used (``unavailable``), how it reads the source
    (``source``), writes and checks its weights (``weights``), what the config says (``notes``) and how auto times it
    on a GGUF file (``runner``)."""
    return GenerationEngine(name, label, summary, name, unavailable=module.unavailable, resolve=module.source,
                            weights=module.weights, notes=module.notes, runner=module.runner)  # fmt: skip


GENERATION: tuple[GenerationEngine, ...] = (
    _gguf_engine(
        "openvino",
        "OpenVINO GenAI's continuous batching",
        "OpenVINO GenAI's continuous batching over a GGUF or IR export, checked against transformers (CPU)",
        openvino,
    ),
    _gguf_engine(
        "llamacpp",
        "llama.cpp",
        "llama.cpp's kernels and llama-server's scheduler over a GGUF file as it is, any architecture and quant type "
        "(xllamacpp, CPU)",
        llamacpp,
    ),
    GenerationEngine(
        "transformers",
        "transformers",
        "the model's own PyTorch code, CPU or GPU; serves any model transformers loads",
        "pytorch",
        notes=_transformers_notes,
    ),
)


def engine(name: str) -> GenerationEngine:
    """The registered engine called ``name``; a GalleryError listing them otherwise."""
    for found in GENERATION:
        if found.name == name:
            return found
    raise GalleryError(f"--engine must be auto or one of {', '.join(names())}, not {name!r}.")


def names() -> list[str]:
    return [found.name for found in GENERATION]


def fallback() -> GenerationEngine:
    """The engine --engine auto ends with: the registry's last."""
    return GENERATION[-1]


def engine_help() -> str:
    """--engine's help, from the registry."""
    listed = "; ".join(f"{found.name}: {found.summary}" for found in GENERATION)
    return f"text-generation: auto (the first of {', '.join(names())} that serves the model here); {listed}."
