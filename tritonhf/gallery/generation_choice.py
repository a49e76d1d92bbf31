"""Which engine serves a text-generation model (``gallery add``): the plan from ``--engine``, the source resolved
for it (a GGUF file is read, not converted), and the OpenVINO engine's weights with their checks, falling back
to transformers under ``--engine auto`` (``gallery.generation`` has the engines' own rules)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import generation, gguf_export, ir_export, models
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.tasks import PARAM_ENGINE, PARAM_GGUF_FILE, PARAM_OPENVINO_MODEL, VENDORED_WEIGHTS_DIR, Task


def resolve(
    request: AddRequest, task: Task, progress: Progress
) -> tuple[generation.EnginePlan | None, models.ResolvedSource]:
    """text-generation's engine to try (None for the other tasks, which take no --engine) and the source as a
    folder; for the OpenVINO engine, a GGUF file is not converted (its tokenizer and config are read, and the file
    itself is vendored), and a model the GGUF export cannot write goes to transformers under --engine auto."""
    engine = _plan(request, task)
    path = Path(request.source).expanduser()
    if engine and engine.engine == "openvino" and path.suffix == ".gguf" and path.is_file():
        return engine, models.ResolvedSource(request.source, "gguf", models.gguf_metadata(path.absolute(), progress))
    resolved = models.resolve(request.source, request.revision, progress)
    exported_to_gguf = request.weight_format not in ir_export.IR_FORMATS  # optimum-intel exports what GGUF cannot
    if engine and engine.engine == "openvino" and resolved.kind != "gguf" and exported_to_gguf:
        why_not = gguf_export.supported(resolved.folder)
        ir_format = generation.IR_OF_GGUF_FORMAT.get(request.weight_format)
        if why_not is not None and ir_format is not None:  # optimum-intel exports the families GGUF's writer lacks
            progress.step(f"Not a GGUF export: {why_not}; exporting to OpenVINO IR ({ir_format}) instead")
            engine = generation.EnginePlan("openvino", why_not, weight_format=ir_format)
        elif why_not is not None:
            if request.engine == "openvino":
                raise GalleryError(f"--engine openvino cannot serve {request.source}: {why_not}.")
            engine = generation.EnginePlan("transformers", f"the OpenVINO engine needs a GGUF export, and {why_not}")
    return engine, resolved


def vendor(
    request: AddRequest,
    engine: generation.EnginePlan | None,
    resolved: models.ResolvedSource,
    version_dir: Path,
    progress: Progress,
) -> tuple[Choice | None, models.ResolvedSource]:
    """The weights copied into ``version_dir``: for the OpenVINO engine model.gguf and its checks (falling back to
    transformers with --engine auto); text-generation's choice (None for the other tasks) and the source as
    served."""
    found: dict[str, str] = {}
    if engine and engine.engine == "openvino":
        engine, found, resolved = _openvino_weights(request, engine, resolved, version_dir, progress)
    if not found:
        models.vendor(resolved.folder, version_dir / VENDORED_WEIGHTS_DIR, request.allow_pickle)
    return choice(request, engine, found), resolved


def choice(request: AddRequest, engine: generation.EnginePlan | None, found: dict[str, str]) -> Choice | None:
    """OpenVINO's continuous batching when its weights were written (``found``: its checks), else transformers
    and why; None for a task that is not text generation."""
    if engine is None:
        return None
    if found:
        served = found.get(PARAM_OPENVINO_MODEL, found.get(PARAM_GGUF_FILE, ""))
        return Choice("openvino", f"continuous batching on {served}; " + found.pop(generation.PARAM_ENGINE_CHECK),
                      found)  # fmt: skip
    why = "--backend pytorch" if request.backend == "pytorch" else f"the transformers engine: {engine.reason}"
    return Choice("pytorch", why, {generation.PARAM_ENGINE_REASON: engine.reason, PARAM_ENGINE: "transformers"})


def _plan(request: AddRequest, task: Task) -> generation.EnginePlan | None:
    """text-generation's engine to try; None for the other tasks (which take no --engine)."""
    if task.name != "text-generation":
        if request.engine != "auto":
            raise GalleryError(f"--engine chooses text-generation's engine; {task.name} takes --backend.")
        return None
    generation.check_weight_format(request.weight_format)
    return generation.plan(request.engine, request.options.device, request.vendor)


def _openvino_weights(
    request: AddRequest,
    engine: generation.EnginePlan,
    resolved: models.ResolvedSource,
    version_dir: Path,
    progress: Progress,
) -> tuple[generation.EnginePlan, dict[str, str], models.ResolvedSource]:
    """model.gguf (or the IR export) and its checks. A GGUF export the check refuses is tried again as the IR
    export of the same width; with --engine auto, what still fails falls back to transformers (a GGUF source is
    then converted as transformers needs it)."""
    weights_dir = version_dir / VENDORED_WEIGHTS_DIR
    formats = [engine.weight_format or request.weight_format]
    if resolved.kind != "gguf" and formats[0] in generation.IR_OF_GGUF_FORMAT:
        formats.append(generation.IR_OF_GGUF_FORMAT[formats[0]])
    settings = generation.settings_for(request.params, request.options.instances)
    for weight_format in formats:
        try:
            found = generation.add_openvino_weights(resolved, weights_dir, weight_format, progress, settings)
            return generation.EnginePlan("openvino", ""), found, resolved
        except ModelSourceError as exc:
            failure = exc
            shutil.rmtree(weights_dir, ignore_errors=True)
            if weight_format != formats[-1]:
                progress.step(f"The GGUF export is not usable ({exc}); exporting to OpenVINO IR instead")
    if request.engine == "openvino":
        raise failure
    progress.step(f"The OpenVINO engine is not usable ({failure}); serving with transformers")
    if resolved.kind == "gguf":
        resolved = models.resolve(request.source, request.revision, progress)
    return generation.EnginePlan("transformers", f"the OpenVINO engine was not usable ({failure})"), {}, resolved
