"""Add a model to a repository: template, config, weights (and their ONNX / OpenVINO forms).

    REPOSITORY/NAME/config.pbtxt       built from the task's signature (gallery.config)
    REPOSITORY/NAME/1/model.py         the task's template, copied unchanged
    REPOSITORY/NAME/1/tritonhf_runtime/    the helpers templates share (tritonhf/runtime/),
                                       so the repository serves without tritonhf installed
    REPOSITORY/NAME/1/weights/         the vendored weights, config and tokenizer
    REPOSITORY/NAME__onnx/1/model.onnx with --backend onnx on a server that has Triton's
                                       onnxruntime backend: the forward pass, called by NAME

A model is built in a hidden folder beside the repository and renamed into place when
complete, so an interrupted ``add`` (Ctrl-C, full disk, failed download) leaves the
repository as it was.
``add_model`` is one pass, the same for every task: check the request, reserve the names, resolve the source, stage
the template and weights, ask the model's own library for its answers, ask the task's family which engine serves it
(``request.Choice``), write the config, check it against the library's answers, rename into place. What differs from
one family to another is the family's (``gallery.family`` is the contract, ``gallery.families`` the registry).
Listing and removing live in ``listing.py``, checking in ``validate.py``, names in ``naming.py``.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from tritonhf._progress import Progress, SilentProgress
from tritonhf._version import __version__
from tritonhf.errors import GalleryError, InvalidNameError, ModelExistsError
from tritonhf.gallery import reference
from tritonhf.gallery.config import build_config, config_to_text, parse_config
from tritonhf.gallery.families import start
from tritonhf.gallery.family import VERSION, Family, Staging
from tritonhf.gallery.listing import parameters_of_folder, remove_model
from tritonhf.gallery.naming import check_name, default_name
from tritonhf.gallery.request import PARAM_INT8_QUALITY, AddRequest
from tritonhf.runtime.audio import PARAM_MAX_AUDIO_SECONDS
from tritonhf.runtime.images import IMAGE_BACKEND, PARAM_IMAGE_BACKEND, PARAM_MAX_IMAGE_PIXELS
from tritonhf.tasks import (
    PARAM_BACKEND,
    PARAM_BACKEND_REASON,
    PARAM_CALIBRATION,
    PARAM_DEVICE,
    PARAM_SOURCE,
    PARAM_TASK,
    PARAM_TRUST_REMOTE_CODE,
    PARAM_VERSION,
    PARAM_WEIGHTS,
    RUNTIME_DIR,
    VENDORED_WEIGHTS_DIR,
    Task,
    get_task,
)

PARAM_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def parse_params(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; keys are checked, values stay data in the config."""
    params: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not PARAM_KEY.match(key) or key.startswith("tritonhf."):
            raise InvalidNameError(
                f"--param {pair!r} must be KEY=VALUE with a KEY of letters, digits, '_', '-', '.' "
                "(keys starting with 'tritonhf.' are reserved)."
            )
        params[key] = value
    return params


def template_source(task: Task) -> str:
    """The template's model.py, read from the package data."""
    return (
        resources.files("tritonhf.gallery")
        .joinpath("templates")
        .joinpath(task.template)
        .joinpath("model.py")
        .read_text()
    )


def write_runtime(version_dir: Path) -> None:
    """The runtime package every model.py imports (tritonhf/runtime), copied beside it as ``tritonhf_runtime/``."""
    target = version_dir / RUNTIME_DIR
    target.mkdir(exist_ok=True)
    for entry in resources.files("tritonhf").joinpath("runtime").iterdir():
        if entry.name.endswith(".py"):
            (target / entry.name).write_text(entry.read_text())


def write_template(task: Task, version_dir: Path) -> None:
    """model.py (and any module beside it, such as text-generation's engines) and the runtime it imports:
    everything of tritonhf a served model needs."""
    folder = resources.files("tritonhf.gallery").joinpath("templates").joinpath(task.template)
    for entry in folder.iterdir():
        if entry.name.endswith(".py"):
            (version_dir / entry.name).write_text(entry.read_text())
    write_runtime(version_dir)


def _task_parameters(task: Task, family: Family, folder: Path, request: AddRequest) -> dict[str, str]:
    """The family's parameters read from the model, the input limits asked at add, then the user's --param."""
    params = family.parameters(folder)
    if task.takes_images:
        params[PARAM_IMAGE_BACKEND] = IMAGE_BACKEND  # the processor's resize, the same served and in-process
    for key, value in (
        (PARAM_MAX_IMAGE_PIXELS, request.options.max_image_pixels),
        (PARAM_MAX_AUDIO_SECONDS, request.options.max_audio_seconds),
    ):
        if value:
            given = request.params.get(key)
            if given is not None and given != str(value):
                raise GalleryError(f"--param {key}={given} and --{key.replace('_', '-')} {value} disagree: give one.")
            params[key] = str(value)
    params.update(request.params)
    return params


def _library_answers(
    task: Task, request: AddRequest, staged: Path, source: Path, params: dict[str, str], progress: Progress
) -> reference.Expected | str | None:
    """What the model's own library answers (``reference``), asked before the engine is chosen and the source
    weights dropped; None for a task it does not cover."""
    if task.name not in reference.TASKS:
        return None
    if request.quantize:
        return "int8: its quality gate against fp32 is the check"
    progress.step("Asking the model's own library for its answers, to compare the served ones with")
    return reference.expected(task.name, staged if request.vendor else source, params)


def _free(repository: Path, name: str) -> Path:
    target = repository / name
    if target.exists():
        raise ModelExistsError(
            f"A model named {name!r} already exists in {repository}. Choose another --name, or remove it "
            f"first with `tritonhf gallery remove {name}`."
        )
    return target


def add_model(request: AddRequest, progress: Progress | None = None) -> Path:
    """Write ``NAME/config.pbtxt``, ``NAME/1/model.py`` and the weights; return the model folder."""
    progress = progress or SilentProgress()
    task = get_task(request.task)
    name = check_name(request.name or default_name(request.source))
    request.options.check(task)
    family = start(request, task)
    repository = request.repository.absolute()
    target = _free(repository, name)
    part_name = family.reserve(name, repository)
    part_target = _free(repository, part_name) if part_name else None
    resolved = family.resolve(progress)
    repository.mkdir(parents=True, exist_ok=True)
    staging = Staging(Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=repository.parent)), name, part_name)
    try:
        staging.version_dir.mkdir(parents=True)
        write_template(task, staging.version_dir)
        weights = str(resolved.folder) if resolved.kind != "hub" else request.source
        if request.vendor:
            progress.step(f"Copying weights, config and tokenizer into {name}/{VERSION}/{VENDORED_WEIGHTS_DIR}")
            resolved = family.vendor(resolved, staging, progress)
            weights = VENDORED_WEIGHTS_DIR
        params = _task_parameters(task, family, resolved.folder, request)
        library = _library_answers(task, request, staging.weights, resolved.folder, params, progress)
        chosen = family.choose(resolved, staging, params, progress)
        if not chosen.part:
            part_target = None
        progress.step(f"Serving {name} with {chosen.label or chosen.backend}: {chosen.reason}")
        params.update(chosen.params)
        params.update(
            {
                PARAM_BACKEND: chosen.backend,
                PARAM_BACKEND_REASON: chosen.reason,
                PARAM_TASK: task.name,
                PARAM_SOURCE: request.source,
                PARAM_VERSION: __version__,
                PARAM_WEIGHTS: weights,
                PARAM_DEVICE: request.options.device,
                PARAM_TRUST_REMOTE_CODE: "true" if request.trust_remote_code else "false",
            }
        )
        options = dataclasses.replace(
            request.options, parameters=params, output_dims=family.output_dims(resolved.folder)
        )
        text = config_to_text(build_config(task, name, options), task, _notes(family, params))
        parse_config(text)  # what we write must read back as Triton's ModelConfig
        (staging.root / name / "config.pbtxt").write_text(text)
        if library is not None:  # the template run here, as written, against the library's answers
            progress.step(f"Comparing {name}'s answers with the model's own library")
            params[reference.PARAM_REFERENCE_CHECK] = reference.check(library, staging.root / name)
            progress.step(params[reference.PARAM_REFERENCE_CHECK])
            options = dataclasses.replace(options, parameters=params)
            text = config_to_text(build_config(task, name, options), task, _notes(family, params))
            (staging.root / name / "config.pbtxt").write_text(text)
        if part_target:
            (staging.root / part_target.name).replace(part_target)  # the part first: NAME calls it
        try:
            (staging.root / name).replace(target)
        except OSError:
            if part_target:
                shutil.rmtree(part_target, ignore_errors=True)
            raise
    finally:
        shutil.rmtree(staging.root, ignore_errors=True)
    return target


def _notes(family: Family, params: Mapping[str, str]) -> list[str]:
    """Comment lines for the config: which path serves the model and why, the family's own, measured quality."""
    notes = [f"Backend: {params.get(PARAM_BACKEND, 'pytorch')} ({params.get(PARAM_BACKEND_REASON, '')})."]
    notes += family.notes(params)
    if PARAM_CALIBRATION in params:
        notes.append(f"Engine measured at gallery add: {params[PARAM_CALIBRATION]}.")
    if PARAM_INT8_QUALITY in params:
        notes.append(params[PARAM_INT8_QUALITY] + ".")
    if reference.PARAM_REFERENCE_CHECK in params:
        notes.append(f"Checked at gallery add: {params[reference.PARAM_REFERENCE_CHECK]}.")
    return notes


def ensure_model(request: AddRequest, progress: Progress | None = None) -> Path | None:
    """Add the model unless the repository already holds it from the same task and source.

    Returns the new model's folder, or None when the one already there was kept. A model of the
    same name from another task or source is replaced: for workspaces a script owns (the demo,
    the examples), not for a user's repository.
    """
    name = check_name(request.name or default_name(request.source))
    existing = request.repository.absolute() / name
    if (existing / "config.pbtxt").is_file():
        params = parameters_of_folder(existing)
        if (params.get(PARAM_TASK), params.get(PARAM_SOURCE)) == (get_task(request.task).name, request.source):
            return None
        remove_model(request.repository, name)
    return add_model(request, progress)
