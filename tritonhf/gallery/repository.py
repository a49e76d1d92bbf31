"""A model repository on disk: add, remove, list and validate models.

    REPOSITORY/NAME/config.pbtxt       built from the task's signature (gallery.config)
    REPOSITORY/NAME/1/model.py         the task's template, copied unchanged
    REPOSITORY/NAME/1/weights/         the vendored weights, config and tokenizer

A model is built in a hidden folder beside the repository and renamed into place when
complete, so an interrupted ``add`` (Ctrl-C, full disk, failed download) leaves the
repository as it was.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from tritonhf._progress import Progress, SilentProgress
from tritonhf._version import __version__
from tritonhf.errors import GalleryError, InvalidNameError, ModelExistsError
from tritonhf.gallery import models, onnx_export
from tritonhf.gallery.config import ModelOptions, build_config, config_to_text, parameters_of, parse_config
from tritonhf.tasks import (
    PARAM_BACKEND,
    PARAM_DEVICE,
    PARAM_SOURCE,
    PARAM_TASK,
    PARAM_TRUST_REMOTE_CODE,
    PARAM_VERSION,
    PARAM_WEIGHTS,
    TASKS,
    VENDORED_WEIGHTS_DIR,
    Task,
    get_task,
)

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
PARAM_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
VERSION = "1"
BACKENDS = ("pytorch", "onnx")


def check_name(name: str) -> str:
    """A model name that is safe as a folder and a URL part; letters, digits, ``_ - .``."""
    if not NAME.match(name) or name in (".", ".."):
        raise InvalidNameError(
            f"Model name {name!r} is not allowed: use letters, digits, '_', '-' and '.', not starting "
            "with '.' or '-', at most 128 characters (for example 'sentiment' or 'minilm-embed')."
        )
    return name


def default_name(source: str) -> str:
    """A model name from a source: the last part of a hub id or path, made safe."""
    stem = Path(source.rstrip("/")).name.removesuffix(".gguf") or "model"
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.").lower()
    return cleaned[:128] or "model"


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
    backend: str = "pytorch"  # or "onnx": exported once, served with onnxruntime
    labels: tuple[str, ...] = ()
    options: ModelOptions = field(default_factory=ModelOptions)
    params: Mapping[str, str] = field(default_factory=dict)


def _task_parameters(task: Task, folder: Path, request: AddRequest) -> dict[str, str]:
    """Task-specific defaults read from the model, then the user's --labels and --param."""
    params: dict[str, str] = {}
    if task.name in ("feature-extraction", "zero-shot-classification"):
        params.update(models.sentence_transformers_options(folder))
    if task.name == "zero-shot-classification":
        if request.labels and any("," in label or not label.strip() for label in request.labels):
            raise GalleryError("--labels must be non-empty labels separated by commas.")
        if request.labels:
            params["labels"] = ",".join(label.strip() for label in request.labels)
    params.update(request.params)
    return params


def _output_dims(task: Task, folder: Path) -> dict[str, tuple[int, ...]]:
    """Output dims known only from the model: the embedding size, the number of labels."""
    config = models.model_config(folder)
    if task.name == "feature-extraction" and isinstance(config.get("hidden_size"), int):
        return {"EMBEDDING": (int(config["hidden_size"]),)}
    return {}


def add_model(request: AddRequest, progress: Progress | None = None) -> Path:
    """Write ``NAME/config.pbtxt``, ``NAME/1/model.py`` and the weights; return the model folder."""
    progress = progress or SilentProgress()
    task = get_task(request.task)
    name = check_name(request.name or default_name(request.source))
    request.options.check()
    if request.backend not in BACKENDS:
        raise GalleryError(f"--backend must be one of {', '.join(BACKENDS)}, not {request.backend!r}.")
    if request.backend == "onnx":
        onnx_export.check_exportable(task.name)
        if not request.vendor:
            raise GalleryError(
                "--backend onnx writes model.onnx into the repository; it cannot be used with --no-vendor."
            )
    repository = request.repository.absolute()
    target = repository / name
    if target.exists():
        raise ModelExistsError(
            f"A model named {name!r} already exists in {repository}. Choose another --name, or remove it "
            f"first with `tritonhf gallery remove {name}`."
        )
    resolved = models.resolve(request.source, request.revision, progress)
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=repository.parent))
    try:
        version_dir = staging / VERSION
        version_dir.mkdir()
        (version_dir / "model.py").write_text(template_source(task))
        if request.vendor:
            progress.step(f"Copying weights, config and tokenizer into {name}/{VERSION}/{VENDORED_WEIGHTS_DIR}")
            models.vendor(resolved.folder, version_dir / VENDORED_WEIGHTS_DIR, request.allow_pickle)
            weights = VENDORED_WEIGHTS_DIR
        else:
            weights = str(resolved.folder) if resolved.kind != "hub" else request.source
        extra: dict[str, str] = {}
        if request.backend == "onnx":
            weights_dir = version_dir / VENDORED_WEIGHTS_DIR
            difference = onnx_export.export(task.name, weights_dir, weights_dir, progress)
            for tensor_file in weights_dir.glob("*.safetensors"):
                tensor_file.unlink()  # served from model.onnx; config and tokenizer stay
            extra["tritonhf.onnx_max_abs_diff"] = f"{difference:.2e}"
        params = _task_parameters(task, resolved.folder, request)
        params.update(extra)
        params.update(
            {
                PARAM_BACKEND: request.backend,
                PARAM_TASK: task.name,
                PARAM_SOURCE: request.source,
                PARAM_VERSION: __version__,
                PARAM_WEIGHTS: weights,
                PARAM_DEVICE: request.options.device,
                PARAM_TRUST_REMOTE_CODE: "true" if request.trust_remote_code else "false",
            }
        )
        options = ModelOptions(
            max_batch_size=request.options.max_batch_size,
            instances=request.options.instances,
            device=request.options.device,
            parameters=params,
            output_dims=_output_dims(task, resolved.folder),
        )
        config = build_config(task, name, options)
        text = config_to_text(config, task)
        parse_config(text)  # what we write must read back as Triton's ModelConfig
        (staging / "config.pbtxt").write_text(text)
        staging.replace(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def remove_model(repository: Path, name: str) -> Path:
    check_name(name)
    target = repository.absolute() / name
    if not (target / "config.pbtxt").is_file():
        raise GalleryError(f"No model named {name!r} in {repository}. See `tritonhf gallery validate {repository}`.")
    # Rename first: the model leaves the repository at once, even if deleting its files is slow.
    trash = Path(tempfile.mkdtemp(prefix=f".{name}.removed-", dir=repository.absolute().parent))
    target.replace(trash / name)
    shutil.rmtree(trash, ignore_errors=True)
    return target


@dataclass(frozen=True)
class ModelEntry:
    name: str
    task: str
    source: str
    max_batch_size: int


def list_models(repository: Path) -> list[ModelEntry]:
    entries = []
    for folder in sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            config = parse_config((folder / "config.pbtxt").read_text())
        except (OSError, GalleryError):
            continue
        params = parameters_of(config)
        entries.append(
            ModelEntry(folder.name, params.get(PARAM_TASK, "?"), params.get(PARAM_SOURCE, "?"), config.max_batch_size)
        )
    return entries


@dataclass(frozen=True)
class Problem:
    model: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.model}: {self.message}\n  fix: {self.fix}"


def validate_repository(repository: Path) -> list[Problem]:
    """Every problem of every model in ``repository``, found without starting a server."""
    if not repository.is_dir():
        return [Problem(str(repository), "the repository folder does not exist", "Run `tritonhf bootstrap`.")]
    problems: list[Problem] = []
    for folder in sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
        problems.extend(validate_model(folder))
    return problems


def validate_model(folder: Path) -> list[Problem]:
    name = folder.name
    if not NAME.match(name):
        return [Problem(name, "the folder name has characters Triton model names should not", "Rename the folder.")]
    config_path = folder / "config.pbtxt"
    if not config_path.is_file():
        return [Problem(name, "no config.pbtxt", "Add one, or re-add the model with `tritonhf gallery add`.")]
    try:
        config = parse_config(config_path.read_text(), where=f"{name}/config.pbtxt")
    except GalleryError as exc:
        return [Problem(name, str(exc), "Correct that line (field names are Triton's ModelConfig).")]
    problems = []
    if config.name and config.name != name:
        problems.append(Problem(name, f"config name {config.name!r} differs from the folder name", "Make them equal."))
    versions = [p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()]
    if not versions:
        problems.append(Problem(name, "no version folder (e.g. 1/)", f"Create {name}/1/ holding model.py."))
    for version in versions:
        if config.backend == "python" and not (version / "model.py").is_file():
            problems.append(Problem(name, f"{version.name}/model.py is missing", "Put the model's model.py there."))
    params = parameters_of(config)
    task_name = params.get(PARAM_TASK)
    if task_name is None:
        return problems  # not a gallery model: only Triton's own rules apply
    if task_name not in TASKS:
        problems.append(Problem(name, f"unknown task {task_name!r}", f"Use one of: {', '.join(TASKS)}."))
        return problems
    problems.extend(_check_tensors(name, config, TASKS[task_name]))
    weights = params.get(PARAM_WEIGHTS, "")
    for version in versions:
        vendored = version / weights
        if weights == VENDORED_WEIGHTS_DIR and not (vendored / "config.json").is_file():
            problems.append(Problem(name, f"vendored weights missing in {version.name}/{weights}", "Re-add the model."))
    return problems


def _check_tensors(name: str, config: mc.ModelConfig, task: Task) -> list[Problem]:
    problems = []
    for kind, specs, tensors in (("input", task.inputs, config.input), ("output", task.outputs, config.output)):
        have = {tensor.name: tensor for tensor in tensors}
        for spec in specs:
            tensor = have.get(spec.name)
            if tensor is None:
                if not spec.optional:
                    problems.append(
                        Problem(
                            name,
                            f"{kind} {spec.name!r} of the {task.name} template is missing "
                            f"(the config has {', '.join(have) or 'none'})",
                            f"Rename it back to {spec.name!r}; model.py and clients use that name.",
                        )
                    )
                continue
            if mc.DataType.Name(tensor.data_type) != spec.data_type:
                problems.append(
                    Problem(
                        name,
                        f"{kind} {spec.name!r} is {mc.DataType.Name(tensor.data_type)}, the template expects "
                        f"{spec.data_type}",
                        f"Set data_type: {spec.data_type}.",
                    )
                )
        unknown = sorted(set(have) - {spec.name for spec in specs})
        if unknown:
            problems.append(
                Problem(
                    name,
                    f"{kind}(s) {', '.join(unknown)} are not part of the {task.name} template",
                    "Remove them or rename them back to the template's names.",
                )
            )
    return problems
