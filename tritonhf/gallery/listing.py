"""What a repository holds: list its models, remove one (with its native ONNX part)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tritonhf.errors import GalleryError
from tritonhf.gallery.config import parameters_of, parse_config
from tritonhf.gallery.naming import NAME, check_name
from tritonhf.tasks import PARAM_ONNX_MODEL, PARAM_PART_OF, PARAM_SOURCE, PARAM_TASK


def remove_model(repository: Path, name: str) -> Path:
    """Remove model ``name`` and, for a native ONNX model, its ``NAME__onnx`` part."""
    check_name(name)
    target = repository.absolute() / name
    if not (target / "config.pbtxt").is_file():
        raise GalleryError(
            f"No model named {name!r} in {repository}. See `tritonhf gallery validate --repository {repository}`."
        )
    params = parameters_of_folder(target)
    if PARAM_PART_OF in params:
        owner = params[PARAM_PART_OF]
        raise GalleryError(f"{name!r} is the ONNX part of model {owner!r}: remove {owner!r}, and it goes with it.")
    folders = [target]
    part = params.get(PARAM_ONNX_MODEL)
    if part and NAME.match(part) and (repository.absolute() / part).is_dir():
        folders.append(repository.absolute() / part)
    # Rename first: the model leaves the repository at once, even if deleting its files is slow.
    trash = Path(tempfile.mkdtemp(prefix=f".{name}.removed-", dir=repository.absolute().parent))
    for folder in folders:
        folder.replace(trash / folder.name)
    shutil.rmtree(trash, ignore_errors=True)
    return target


def parameters_of_folder(folder: Path) -> dict[str, str]:
    """The tritonhf parameters of a model folder's config; empty when it has none or cannot be read."""
    try:
        return parameters_of(parse_config((folder / "config.pbtxt").read_text()))
    except (OSError, GalleryError):
        return {}


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
        if PARAM_PART_OF in params:
            continue  # listed through the model it belongs to
        entries.append(
            ModelEntry(folder.name, params.get(PARAM_TASK, "?"), params.get(PARAM_SOURCE, "?"), config.max_batch_size)
        )
    return entries
