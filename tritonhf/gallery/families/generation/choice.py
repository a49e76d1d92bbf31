"""Which engine serves a text-generation model (``gallery add``), read from the registry (``engines``): the
plan from ``--engine``, the source resolved as that engine reads it, and its weights with their checks, the next
engine taking over under ``--engine auto`` when one cannot serve the model."""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import sources
from tritonhf.gallery.families.generation import engines, measure, openvino
from tritonhf.gallery.families.generation.engines import EnginePlan
from tritonhf.gallery.families.generation.params import PARAM_ENGINE_CHECK, PARAM_ENGINE_REASON
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.tasks import PARAM_CALIBRATION, PARAM_ENGINE, PARAM_GGUF_FILE, VENDORED_WEIGHTS_DIR


def resolve(request: AddRequest, progress: Progress) -> tuple[EnginePlan, sources.ResolvedSource]:
    """The engine to try and the source as it reads it; under --engine auto, an engine that cannot serve that source
    gives way to the next."""
    return _resolved(plan(request), request, progress)


def _resolved(
    planned: EnginePlan, request: AddRequest, progress: Progress
) -> tuple[EnginePlan, sources.ResolvedSource]:
    """From ``planned`` on, the first engine that reads the source (its own way, else as a folder), and the source."""
    while planned.engine.resolve is not None:
        resolved, weight_format, why_not = planned.engine.resolve(request, progress)
        if why_not is None:
            return EnginePlan(planned.engine, planned.reason, weight_format), resolved
        if request.engine == planned.engine.name:
            raise GalleryError(f"--engine {planned.engine.name} cannot serve {request.source}: {why_not}.")
        planned = _after(planned.engine, why_not, request)
    return planned, sources.resolve(request.source, request.revision, progress)


def vendor(
    request: AddRequest, plan: EnginePlan, resolved: sources.ResolvedSource, version_dir: Path, progress: Progress
) -> tuple[Choice, sources.ResolvedSource]:
    """The weights copied into ``version_dir``: the engine's own, written and checked (under --engine auto, an engine
    whose weights fail gives way to the next), else the model's folder; the engine's module beside model.py when it
    is not one of the template's own. The choice and the source as served."""
    found: dict[str, str] = {}
    while plan.engine.weights is not None:
        try:
            found, resolved = plan.engine.weights(
                request, plan.weight_format or openvino.weight_format(request), resolved, version_dir, progress
            )
            break
        except ModelSourceError as failure:
            shutil.rmtree(version_dir / VENDORED_WEIGHTS_DIR, ignore_errors=True)
            if request.engine == plan.engine.name:
                raise
            plan = _after(plan.engine, f"{plan.engine.label} was not usable ({failure})", request)
            if resolved.kind == "gguf":  # a GGUF file read as it is: read again as the next engine reads it
                plan, resolved = _resolved(plan, request, progress)
            progress.step(f"{plan.engine.label} serves it instead: {plan.reason}")
    # a GGUF source served as it is: the other engines that read it so are measured against this one
    if request.engine == "auto" and resolved.kind == "gguf" and PARAM_GGUF_FILE in found and plan.engine.runner:
        plan, found = _measured(request, plan, found, resolved, version_dir, progress)
    if not found:
        sources.vendor(resolved.folder, version_dir / VENDORED_WEIGHTS_DIR, request.allow_pickle)
    if plan.engine.module is not None:
        shutil.copy2(plan.engine.module, version_dir / f"{plan.engine.name}_engine.py")
    return choice(request, plan, found), resolved


def choice(request: AddRequest, plan: EnginePlan, found: dict[str, str]) -> Choice:
    """The engine that serves, why, and what it writes into the config (``found``: its weights' parameters and
    checks)."""
    engine = plan.engine
    params = {**found, PARAM_ENGINE: engine.name}
    check = params.pop(PARAM_ENGINE_CHECK, None)
    if plan.reason:  # why not the engines before it (said in the config's notes)
        params[PARAM_ENGINE_REASON] = plan.reason
    if check is not None:  # its weights' own account of how they were made and checked
        return Choice(engine.backend, check, params, label=engine.label)
    why = "--backend pytorch" if request.backend == "pytorch" else f"the {engine.label} engine: {plan.reason}"
    return Choice(engine.backend, why, params, label=engine.label)


def plan(request: AddRequest) -> EnginePlan:
    """The engine to try first: the one --engine names, or under auto the first that can serve a model here."""
    openvino.check_weight_format(openvino.weight_format(request))
    if request.engine != "auto":
        engine = engines.engine(request.engine)
        why_not = engine.unavailable(request)
        if why_not is not None:
            raise GalleryError(f"--engine {engine.name} cannot be used: {why_not}.")
        return EnginePlan(engine, f"--engine {engine.name}")
    return _first_usable(engines.GENERATION, request, "")


def _after(engine: engines.GenerationEngine, why_not: str, request: AddRequest) -> EnginePlan:
    """The plan under --engine auto once ``engine`` cannot serve the model: the next usable engine, saying why."""
    later = engines.GENERATION[engines.GENERATION.index(engine) + 1 :]
    return _first_usable(later, request, why_not)


def _first_usable(candidates: tuple[engines.GenerationEngine, ...], request: AddRequest, why: str) -> EnginePlan:
    """The first of ``candidates`` that can serve a model here (the registry's last one always does), with the
    reasons the ones before it could not."""
    reasons = [why] if why else []
    for engine in candidates:
        why_not = engine.unavailable(request)
        if why_not is None or engine is engines.fallback():
            return EnginePlan(engine, "; ".join(reasons))
        reasons.append(why_not)
    raise AssertionError("the registry's last engine serves every model")


def _measured(
    request: AddRequest,
    plan: EnginePlan,
    found: dict[str, str],
    resolved: sources.ResolvedSource,
    version_dir: Path,
    progress: Progress,
) -> tuple[EnginePlan, dict[str, str]]:
    """--engine auto on a GGUF file: the later engines that read it as it is and can serve it here write and check
    their weights too (the same file, beside the same tokenizer), and each is measured as it will serve; the better
    kept, with every figure in the config."""
    weights_dir = version_dir / VENDORED_WEIGHTS_DIR
    written = {plan.engine.name: found}
    for engine in engines.GENERATION[engines.GENERATION.index(plan.engine) + 1 :]:
        if engine.runner is None or engine.weights is None or engine.unavailable(request) is not None:
            continue
        if engine.resolve is not None and engine.resolve(request, progress)[2] is not None:
            continue  # it does not read this source as it is
        try:
            written[engine.name], _ = engine.weights(
                request, openvino.weight_format(request), resolved, version_dir, progress
            )
        except ModelSourceError as failure:
            progress.step(f"{engine.label} not measured: {failure}")
    if len(written) == 1:
        return plan, found
    chosen = {engine.name: engine for engine in engines.GENERATION if engine.name in written}
    served = weights_dir / found.get(PARAM_GGUF_FILE, "model.gguf")
    progress.step(
        f"Measuring {' and '.join(engine.label for engine in chosen.values())} on this machine (--engine auto)"
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(weights_dir)
    prompt_ids = [list(tokenizer(prompt)["input_ids"]) for prompt in measure.PROMPTS]
    runners = {
        engine.label: engine.runner(served, weights_dir, written[name], request)
        for name, engine in chosen.items()
        if engine.runner is not None
    }
    streams = int(request.params.get("max_running", "8"))
    measured = measure.measure(runners, prompt_ids, streams)
    progress.step(measured.summary)
    kept = next(engine for engine in chosen.values() if engine.label == measured.kept)
    return EnginePlan(kept, plan.reason), {**written[kept.name], PARAM_CALIBRATION: measured.summary}
