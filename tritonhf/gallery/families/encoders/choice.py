"""Which engine serves a text encoder or an image classifier (``gallery add``).

``--backend auto`` exports the model to ONNX and keeps it where it gives PyTorch's answers within
``onnx_engines.TOLERANCE``; run inside the Python backend, OpenVINO and ONNX Runtime are then measured
on this machine and the faster kept. ``--quantize int8`` keeps the int8 model only behind its gate.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.bootstrap.layout import Workspace
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import installed, onnx_engines, sources
from tritonhf.gallery.config import build_onnx_part_config, parse_config, part_config_to_text
from tritonhf.gallery.families.encoders import onnx_export
from tritonhf.gallery.family import VERSION, Staging
from tritonhf.gallery.naming import check_name
from tritonhf.gallery.onnx_engines import TOLERANCE, else_pytorch
from tritonhf.gallery.request import AddRequest, Choice, int8_gate
from tritonhf.runtime.common import PARAM_ONNX_DIFF, PARAM_OPENVINO_DIFF, PARAM_POOLING
from tritonhf.tasks import (
    ONNX_PART_SUFFIX,
    PARAM_CALIBRATION,
    PARAM_ONNX_FILE,
    PARAM_ONNX_INPUTS,
    PARAM_ONNX_MODEL,
    PARAM_ONNX_OUTPUT,
    VENDORED_WEIGHTS_DIR,
    Task,
)


def native_part(request: AddRequest, task: Task, name: str, repository: Path) -> str | None:
    """The name of the second model (``NAME__onnx``, on Triton's onnxruntime backend) an ONNX model would run as,
    when asked or when this workspace's server has that backend; None where it would run inside the Python
    backend (pixels go to ONNX Runtime in the stub, not through BLS)."""
    native = (
        request.backend not in ("pytorch", "openvino")
        and task.name in onnx_export.EXPORTABLE
        and task.name not in onnx_export.IMAGE_TASKS
        and (request.onnx_runtime == "native" or (request.onnx_runtime == "auto" and native_onnx_available(repository)))
    )
    return check_name(name + ONNX_PART_SUFFIX) if native else None


def native_onnx_available(repository: Path) -> bool:
    """Does the server installed beside ``repository`` (a tritonhf workspace) have the onnxruntime backend?"""
    return (Workspace.at(repository.parent).backends_dir / "onnxruntime").is_dir()


def choose(task: Task, request: AddRequest, staged: Staging, task_params: dict[str, str], progress: Progress) -> Choice:
    """An encoder's engine: ONNX (run by ONNX Runtime, natively as the staged part when there is one, or by OpenVINO)
    when the export gives PyTorch's answers, else PyTorch."""
    staging, name, part_name, version_dir = staged.root, staged.name, staged.part, staged.version_dir
    reason = why_not_onnx(request, task)
    if reason is not None:
        return Choice("pytorch", reason, part=False)  # no ONNX model, so no part for it

    def attempt() -> Choice:
        found, calibrated = _export_onnx(task, name, part_name, version_dir, staging, request, task_params, progress)
        if request.backend == "openvino":
            reason = f"the ONNX export run by OpenVINO, within {TOLERANCE} of PyTorch"
            return Choice("openvino", reason, found)
        if calibrated is not None:
            return Choice(*calibrated, found)
        return Choice("onnx", f"exported and within {TOLERANCE} of PyTorch", found)

    def undo() -> None:
        if part_name:
            shutil.rmtree(staging / part_name, ignore_errors=True)

    return else_pytorch(request, attempt, undo)


def why_not_onnx(request: AddRequest, task: Task) -> str | None:
    """None when the ONNX path should be tried; else why the model is served with PyTorch."""
    if request.backend == "pytorch":
        return "--backend pytorch"
    if task.name not in onnx_export.EXPORTABLE:
        return f"{task.name} runs on PyTorch"
    if not request.vendor:
        return "--no-vendor keeps a reference, and model.onnx must be written into the repository"
    missing = installed.onnx_missing()
    if missing is not None and request.backend == "onnx":
        raise GalleryError(f"--backend onnx needs onnx and onnxruntime: {missing}.")
    return missing


def _export_onnx(
    task: Task,
    name: str,
    part_name: str | None,
    version_dir: Path,
    staging: Path,
    request: AddRequest,
    params: dict[str, str],
    progress: Progress,
) -> tuple[dict[str, str], tuple[str, str] | None]:
    """Export model.onnx (beside the tokenizer, or into the NAME__onnx part), quantize it when asked;
    the parameters that say so, and (``--backend auto``, measured) the engine to run it with and why.
    PyTorch weights are removed only once the export is kept."""
    weights_dir = version_dir / VENDORED_WEIGHTS_DIR
    destination = staging / part_name / VERSION if part_name else weights_dir
    destination.mkdir(parents=True, exist_ok=True)
    graph = onnx_export.graph_task(task.name, params)
    exported = onnx_export.export(graph, weights_dir, destination, progress)
    found: dict[str, str] = {PARAM_ONNX_DIFF: f"{exported.max_abs_diff:.2e}"}
    if request.backend == "openvino":  # the same file, run by OpenVINO: it must give PyTorch's answer too
        progress.step(f"Checking OpenVINO's run of model.onnx against PyTorch within {TOLERANCE}")
        found[PARAM_OPENVINO_DIFF] = f"{onnx_export.check_openvino(graph, weights_dir, exported):.2e}"
    calibrated = None
    if _measures_openvino(request, task, part_name):
        calibrated = _openvino_or_onnx(graph, weights_dir, exported, request, found, progress)
    if request.quantize == "int8":
        progress.step("Quantizing to int8 (weights per channel, activations per token), measuring it against fp32")
        texts = request.calibration or tuple(onnx_export.CALIBRATION)
        quantized = onnx_export.quantize(graph, exported, weights_dir, texts, params.get(PARAM_POOLING, "mean"))
        found.update(int8_gate(request, quantized, progress))
        if part_name:  # Triton's onnxruntime backend loads model.onnx: the int8 model takes its place
            quantized.path.replace(exported.path)
        else:
            exported.path.unlink()
            found[PARAM_ONNX_FILE] = onnx_export.INT8_FILE
    sources.drop_source_weights(weights_dir)  # served from the ONNX file
    if part_name is None:
        openvino = request.backend == "openvino" or (calibrated is not None and calibrated[0] == "openvino")
        progress.step(
            f"the ONNX model will run with {'OpenVINO' if openvino else 'onnxruntime'} inside the Python backend"
        )
        return found, calibrated
    progress.step(f"the ONNX model will run on Triton's onnxruntime backend, as model {part_name}")
    part = build_onnx_part_config(
        part_name, name, exported.inputs, exported.output, exported.output_dims, request.options, exported.rank
    )
    text = part_config_to_text(part, name)
    parse_config(text)
    (staging / part_name / "config.pbtxt").write_text(text)
    found.update(
        {
            PARAM_ONNX_MODEL: part_name,
            PARAM_ONNX_INPUTS: ",".join(exported.inputs),
            PARAM_ONNX_OUTPUT: exported.output,
        }
    )
    return found, calibrated


def _measures_openvino(request: AddRequest, task: Task, part_name: str | None) -> bool:
    """``--backend auto`` on a text encoder run inside the Python backend: measure OpenVINO against ONNX Runtime."""
    return (
        request.backend == "auto"
        and part_name is None
        and not request.quantize
        and task.name not in onnx_export.IMAGE_TASKS
        and installed.openvino_available()
    )


def _openvino_or_onnx(
    graph: str,
    weights: Path,
    exported: onnx_export.Exported,
    request: AddRequest,
    found: dict[str, str],
    progress: Progress,
) -> tuple[str, str]:
    """(backend, reason): OpenVINO when it gives PyTorch's answers and measures faster here, else ONNX Runtime.
    Runs before the PyTorch weights are removed (OpenVINO's answers are checked against them)."""
    exported_reason = f"exported and within {TOLERANCE} of PyTorch"
    progress.step("Measuring ONNX Runtime and OpenVINO on this machine (--backend auto; a few seconds)")
    try:
        difference = onnx_export.check_openvino(graph, weights, exported)
        choice = onnx_engines.compare(
            weights, exported.path.name, list(onnx_export.CALIBRATION), request.options.instances
        )
    except ModelSourceError as exc:
        return "onnx", f"{exported_reason}; OpenVINO not used ({exc})"
    found[PARAM_CALIBRATION] = choice.summary
    progress.step(choice.summary)
    if choice.backend == "onnx":
        return "onnx", f"{exported_reason}; kept over OpenVINO by measuring both here"
    found[PARAM_OPENVINO_DIFF] = f"{difference:.2e}"
    measured = "kept over ONNX Runtime by measuring both here"
    reason = f"the ONNX export run by OpenVINO ({measured}), within {TOLERANCE} of PyTorch"
    return "openvino", reason
