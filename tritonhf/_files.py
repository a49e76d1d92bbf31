"""Small files tritonhf reads and writes (JSON state, counters, manifests; a model config's parameters)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def read_json(path: Path) -> Any:
    """The parsed file, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object file as a dict; empty when missing, unreadable or not an object."""
    data = read_json(path)
    return data if isinstance(data, dict) else {}


def config_parameters(path: Path) -> dict[str, str]:
    """The ``parameters`` of a Triton ``config.pbtxt`` (every gallery model's task, weights, engine ...) as plain
    strings; empty when the file is missing or does not parse (``gallery validate`` says why)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(path.read_text(), config)
    except (OSError, text_format.ParseError):
        return {}
    return {key: value.string_value for key, value in config.parameters.items()}


def write_json_atomic(path: Path, data: Any, mode: int = 0o644) -> None:
    """Write through a temporary file (created with ``mode``) and a rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(json.dumps(data, indent=2) + "\n")
    temporary.replace(path)


def save_dataclass(instance: Any, path: Path, mode: int = 0o644) -> None:
    write_json_atomic(path, asdict(instance), mode)


def load_dataclass(cls: type[T], path: Path) -> T | None:
    """``cls(**file)``, or None when the file is missing, broken or written by another version."""
    data = read_json(path)
    if not isinstance(data, dict):
        return None
    try:
        return cls(**data)
    except TypeError:
        return None
