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
``add_model`` reads as its steps: check the request, resolve the source, stage the template and weights,
ask the model family's function which engine serves it (``request.Choice``: ``encoder_choice``,
``speech_choice``, ``generation_choice``), write the config, rename into place.
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
from tritonhf.gallery import (
    encoder_choice,
    engines,
    generation_choice,
    models,
    reference,
    sentence,
    speech_choice,
)
from tritonhf.gallery.config import build_config, config_to_text, parse_config
from tritonhf.gallery.listing import parameters_of_folder, remove_model
from tritonhf.gallery.naming import check_name, default_name
from tritonhf.gallery.request import (
    ENGINE_NAMES,
    PARAM_INT8_QUALITY,
    AddRequest,
    Choice,
    check,
)
from tritonhf.runtime.audio import PARAM_MAX_AUDIO_SECONDS
from tritonhf.runtime.common import PARAM_ENTAILMENT_ID, PARAM_ZERO_SHOT_METHOD
from tritonhf.runtime.images import IMAGE_BACKEND, PARAM_IMAGE_BACKEND, PARAM_MAX_IMAGE_PIXELS
from tritonhf.runtime.reasoning import thinks
from tritonhf.tasks import (
    PARAM_BACKEND,
    PARAM_BACKEND_REASON,
    PARAM_CALIBRATION,
    PARAM_DEVICE,
    PARAM_ENGINE,
    PARAM_REASONING,
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
VERSION = "1"


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


def _task_parameters(task: Task, folder: Path, request: AddRequest) -> dict[str, str]:
    """Task-specific defaults read from the model, then the user's --labels and --param."""
    params: dict[str, str] = {}
    if request.default_prompt_name is not None and task.name != "feature-extraction":
        raise GalleryError(f"--default-prompt-name is for feature-extraction models, not {task.name}.")
    if task.name == "feature-extraction":
        params.update(sentence.options(folder, request.default_prompt_name))
    if task.name == "zero-shot-classification":
        entailment = entailment_id(folder)
        if entailment is None:
            params.update(sentence.options(folder))
            params[PARAM_ZERO_SHOT_METHOD] = "embeddings"
        else:
            params.update({PARAM_ZERO_SHOT_METHOD: "entailment", PARAM_ENTAILMENT_ID: str(entailment)})
    if task.name in ("zero-shot-classification", "zero-shot-image-classification"):
        if request.labels and any("," in label or not label.strip() for label in request.labels):
            raise GalleryError("--labels must be non-empty labels separated by commas.")
        if request.labels:
            params["labels"] = ",".join(label.strip() for label in request.labels)
    if task.name == "text-generation" and thinks(models.chat_template(folder)):
        params[PARAM_REASONING] = "think"  # its chat answers' thinking is split from them (runtime/reasoning.py)
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


def entailment_id(folder: Path) -> int | None:
    """The entailment label's id of a natural-language-inference classifier, found as transformers' zero-shot
    pipeline finds it (the first label starting with "entail"); None for any other model (an embedding model)."""
    config = models.model_config(folder)
    architectures = config.get("architectures") or []
    if not any(str(name).endswith("ForSequenceClassification") for name in architectures):
        return None
    label2id = config.get("label2id") or {}
    found = [int(index) for label, index in label2id.items() if str(label).lower().startswith("entail")]
    return found[0] if found else None


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


def _output_dims(task: Task, folder: Path) -> dict[str, tuple[int, ...]]:
    """Output dims known only from the model: the embedding size, the number of labels."""
    config = models.model_config(folder)
    if task.name == "feature-extraction" and isinstance(config.get("hidden_size"), int):
        return {"EMBEDDING": (sentence.embedding_dimension(folder, int(config["hidden_size"])),)}
    if task.name == "zero-shot-image-classification" and isinstance(config.get("projection_dim"), int):
        return {"EMBEDDING": (int(config["projection_dim"]),)}  # CLIP's shared space
    if task.name == "zero-shot-image-classification":  # SigLIP: the towers' hidden size is the space
        vision = config.get("vision_config")
        if isinstance(vision, dict) and isinstance(vision.get("hidden_size"), int):
            return {"EMBEDDING": (int(vision["hidden_size"]),)}
    return {}


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
    speech_choice.check(request, task)
    check(request, task)
    repository = request.repository.absolute()
    target = _free(repository, name)
    part_name = encoder_choice.native_part(request, task, name, repository)
    part_target = _free(repository, part_name) if part_name else None
    engine, resolved = generation_choice.resolve(request, task, progress)
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=repository.parent))
    try:
        version_dir = staging / name / VERSION
        version_dir.mkdir(parents=True)
        write_template(task, version_dir)
        chosen: Choice | None = None
        if request.vendor:
            progress.step(f"Copying weights, config and tokenizer into {name}/{VERSION}/{VENDORED_WEIGHTS_DIR}")
            chosen, resolved = generation_choice.vendor(request, engine, resolved, version_dir, progress)
            weights = VENDORED_WEIGHTS_DIR
        else:
            chosen = generation_choice.choice(request, engine, {})
            weights = str(resolved.folder) if resolved.kind != "hub" else request.source
        params = _task_parameters(task, resolved.folder, request)
        library = _library_answers(task, request, version_dir / VENDORED_WEIGHTS_DIR, resolved.folder, params, progress)
        if chosen is None and task.takes_audio:
            chosen = speech_choice.choose(request, version_dir / VENDORED_WEIGHTS_DIR, resolved.folder, progress)
        elif chosen is None:
            chosen = encoder_choice.choose(task, request, staging, name, part_name, params, progress)
        if not chosen.part:
            part_target = None
        progress.step(f"Serving {name} with {chosen.label or ENGINE_NAMES[chosen.backend]}: {chosen.reason}")
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
            request.options, parameters=params, output_dims=_output_dims(task, resolved.folder)
        )
        text = config_to_text(build_config(task, name, options), task, _notes(params))
        parse_config(text)  # what we write must read back as Triton's ModelConfig
        (staging / name / "config.pbtxt").write_text(text)
        if library is not None:  # the template run here, as written, against the library's answers
            progress.step(f"Comparing {name}'s answers with the model's own library")
            params[reference.PARAM_REFERENCE_CHECK] = reference.check(library, staging / name)
            progress.step(params[reference.PARAM_REFERENCE_CHECK])
            options = dataclasses.replace(options, parameters=params)
            text = config_to_text(build_config(task, name, options), task, _notes(params))
            (staging / name / "config.pbtxt").write_text(text)
        if part_target:
            (staging / part_target.name).replace(part_target)  # the part first: NAME calls it
        try:
            (staging / name).replace(target)
        except OSError:
            if part_target:
                shutil.rmtree(part_target, ignore_errors=True)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _notes(params: Mapping[str, str]) -> list[str]:
    """Comment lines for the config: which path serves the model and why, and measured quality."""
    notes = [f"Backend: {params.get(PARAM_BACKEND, 'pytorch')} ({params.get(PARAM_BACKEND_REASON, '')})."]
    if params.get(PARAM_TASK) == "text-generation":  # the engine's own lines (gallery.engines)
        notes += engines.engine(params.get(PARAM_ENGINE, "transformers")).notes(params)
    if params.get(PARAM_REASONING) == "think":
        notes.append(
            "Reasoning: the chat template writes a <think> block. A chat answer's thinking is sent apart "
            "(reasoning_output; the gateway's reasoning_content and reasoning items); json_schema and tools hold the "
            'answer after it; chat_template_kwargs {"enable_thinking": false} turns it off where the template takes it.'
        )
    if params.get(PARAM_BACKEND) == "onnx":
        notes.append(
            "ONNX Runtime: intra-op threads = this instance's share of the cores, inter-op 1, all graph "
            "optimisations (measured against the alternatives in tritonhf's docs/performance.md)."
        )
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
