"""Check a repository without starting a server: every problem, with the fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from tritonhf.errors import GalleryError
from tritonhf.gallery.config import parameters_of, parse_config
from tritonhf.gallery.naming import NAME
from tritonhf.tasks import (
    ONNX_MODEL_FILE,
    PARAM_ONNX_MODEL,
    PARAM_PART_OF,
    PARAM_TASK,
    PARAM_WEIGHTS,
    TASKS,
    VENDORED_WEIGHTS_DIR,
    Task,
)


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
    problems.extend(_check_onnx_part(folder, params, versions))
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


def _check_onnx_part(folder: Path, params: dict[str, str], versions: list[Path]) -> list[Problem]:
    """A native ONNX model and its part must both be there, the part with its model.onnx."""
    name, repository = folder.name, folder.parent
    if PARAM_PART_OF in params:
        owner = params[PARAM_PART_OF]
        problems = [
            Problem(name, f"{version.name}/{ONNX_MODEL_FILE} is missing", f"Re-add model {owner!r}.")
            for version in versions
            if not (version / ONNX_MODEL_FILE).is_file()
        ]
        if not (repository / owner / "config.pbtxt").is_file():
            problems.append(
                Problem(name, f"it is the ONNX part of model {owner!r}, which is missing", "Remove this folder.")
            )
        return problems
    part = params.get(PARAM_ONNX_MODEL)
    if part and not (repository / part / "config.pbtxt").is_file():
        return [
            Problem(
                name,
                f"its ONNX part {part!r} is missing",
                f"Re-add the model: `tritonhf gallery remove {name}`, then add it.",
            )
        ]
    return []


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
