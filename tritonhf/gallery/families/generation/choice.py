"""Which engine serves a text-generation model (``gallery add``), read from the registry (``engines``): the
plan from ``--engine``, the source resolved as that engine reads it, and its weights with their checks, the next
engine taking over under ``--engine auto`` when one cannot serve the model."""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import sources
from tritonhf.gallery.families.generation import engines, openvino
from tritonhf.gallery.families.generation.engines import EnginePlan
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.tasks import PARAM_ENGINE, VENDORED_WEIGHTS_DIR


def resolve(request: AddRequest, progress: Progress) -> tuple[EnginePlan, sources.ResolvedSource]:
    """The engine to try and the source as it reads it; under --engine auto, an engine that cannot serve that source
    gives way to the next."""
    planned = plan(request)
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
                request, plan.weight_format or request.weight_format, resolved, version_dir, progress
            )
            break
        except ModelSourceError as failure:
            shutil.rmtree(version_dir / VENDORED_WEIGHTS_DIR, ignore_errors=True)
            if request.engine == plan.engine.name:
                raise
            plan = _after(plan.engine, f"{plan.engine.label} was not usable ({failure})", request)
            progress.step(f"{plan.engine.label} serves it instead: {plan.reason}")
            if resolved.kind == "gguf":  # a GGUF file read as it is: converted now, as the next engine loads it
                resolved = sources.resolve(request.source, request.revision, progress)
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
    check = params.pop(openvino.PARAM_ENGINE_CHECK, None)
    if check is not None:  # its weights' own account of how they were made and checked
        return Choice(engine.backend, check, params, label=engine.label)
    if plan.reason:
        params[openvino.PARAM_ENGINE_REASON] = plan.reason
    why = "--backend pytorch" if request.backend == "pytorch" else f"the {engine.label} engine: {plan.reason}"
    return Choice(engine.backend, why, params, label=engine.label)


def plan(request: AddRequest) -> EnginePlan:
    """The engine to try first: the one --engine names, or under auto the first that can serve a model here."""
    openvino.check_weight_format(request.weight_format)
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
