"""A gallery template's model.py run in this process: the stand-in pb_utils (``stub``), Triton-like ``args``,
and each request's one answer, however the template sends it."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from google.protobuf import json_format

from tritonhf.gallery import stub
from tritonhf.gallery.config import parse_config


def load_template_module(model_dir: Path) -> ModuleType:
    """model.py as the stub imports it: pb_utils provided, its own folder (with tritonhf_runtime/) on sys.path."""
    sys.modules["triton_python_backend_utils"] = stub
    path = model_dir / "1" / "model.py"
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"template_{model_dir.name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def triton_args(model_dir: Path, parameters: dict[str, str] | None = None) -> dict[str, str]:
    """The ``args`` Triton passes to ``initialize``: the config as JSON (with ``parameters`` set over its own),
    paths, instance kind."""
    config = parse_config((model_dir / "config.pbtxt").read_text())
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    for key, value in (parameters or {}).items():
        as_json.setdefault("parameters", {})[key] = {"string_value": value}
    return {
        "model_config": json.dumps(as_json),
        "model_repository": str(model_dir),
        "model_version": "1",
        "model_instance_kind": "CPU",
        "model_instance_device_id": "0",
        "model_name": model_dir.name,
    }


def instantiate(model_dir: Path) -> Any:
    """An initialised TritonPythonModel of a repository folder."""
    model = load_template_module(model_dir).TritonPythonModel()
    model.initialize(triton_args(model_dir))
    return model


def answers(model: Any, requests: list[Any], timeout: float = 60.0) -> list[Any]:
    """One response per request, in order, however the template answers: returned from ``execute``
    or, for a template that computes on its pipeline's worker, sent later through each request's
    response sender with the final flag (what Triton accepts from a non-decoupled model)."""
    assert not any(request.sender.closed for request in requests), "a request is answered once: make a new one"
    returned = model.execute(requests)
    if returned is not None:
        return list(returned)
    deadline = time.monotonic() + timeout
    while not all(request.sender.closed for request in requests):
        assert time.monotonic() < deadline, "the template never answered every request"
        time.sleep(0.001)
    for request in requests:
        assert len(request.sender.responses) == 1, "a non-decoupled model answers each request exactly once"
    return [request.sender.responses[0] for request in requests]


def streamed(model: Any, request: Any, timeout: float = 120.0) -> None:
    """A decoupled template's request, answered to its final flag (its responses in ``request.sender``)."""
    model.execute([request])
    deadline = time.monotonic() + timeout
    while not request.sender.closed:
        assert time.monotonic() < deadline, "the template never finished the request"
        time.sleep(0.005)
