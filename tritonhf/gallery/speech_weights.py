"""What each speech engine writes and checks at ``gallery add``, and the choice it makes (``request.Choice``).

PyTorch serves the vendored weights (with ``--quantize int8``, behind its gate); CTranslate2 the model converted into
``weights/ct2``; OpenVINO GenAI's WhisperPipeline the model exported into ``weights/openvino``, each int8 behind its
own gate. The registry (``gallery.engines.SPEECH``) names these functions; ``gallery.speech_choice`` calls one when
``--backend`` names it, or finishes with the one ``--backend auto`` measured fastest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery import (
    calibrate,
    models,
    openvino_exporter,
    speech_encoder,
    speech_engines,
    speech_int8,
    whisper_export,
)
from tritonhf.gallery.request import (
    PARAM_ENCODER_CHECK,
    PARAM_INT8_QUALITY,
    AddRequest,
    Choice,
    int8_gate,
    int8_verdict,
)
from tritonhf.runtime.audio import CT2_FOLDER, OPENVINO_WHISPER, PARAM_COMPUTE_TYPE, PARAM_ENCODER


def pytorch(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """``--backend pytorch``: the vendored weights as they are."""
    return served_by_pytorch(request, folder, vendored, "--backend pytorch", {}, progress)


def ctranslate2(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """``--backend ctranslate2``: the Whisper converted into ``weights/ct2``, or a GalleryError saying why not."""
    why_not = convert_for_ct2(request, folder, vendored / CT2_FOLDER, progress)
    if why_not is not None:
        raise GalleryError(f"--backend ctranslate2 cannot serve {request.source}: {why_not.rstrip('.')}.")
    return served_by_ct2(request, folder, vendored, "--backend ctranslate2", {}, None, progress)


def openvino(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """``--backend openvino``: the Whisper exported for OpenVINO GenAI into ``weights/openvino``, or a GalleryError
    saying why not."""
    whisper = speech_engines.is_whisper(folder)
    why_not = whisper_export.why_not(folder) if whisper else "it runs Whisper models only"
    if why_not is not None:
        raise GalleryError(f"--backend openvino cannot serve {request.source}: {why_not.rstrip('.')}.")
    target = vendored / OPENVINO_WHISPER
    export_for_openvino(request, folder, target, progress)
    gate = {}
    if request.quantize:
        progress.step("Checking OpenVINO GenAI's int8 export against float32 PyTorch on calibration audio")
        gate = int8_gate(request, whisper_export.check_int8(folder, target), progress)
    return served_by_openvino(request, vendored, {}, "--backend openvino", gate)


def served_by_pytorch(
    request: AddRequest, folder: Path, vendored: Path, reason: str, params: dict[str, str], progress: Progress
) -> Choice:
    """The choice of PyTorch on the vendored weights (what was converted to be measured is dropped); with
    --quantize int8, its Linear layers in int8 behind the gate (``gallery.speech_int8``)."""
    _keep_only(vendored, None)
    if request.quantize:
        progress.step("Checking dynamic int8 (Linear layers) against fp32 on calibration audio")
        params = {**params, **int8_gate(request, speech_int8.check_int8(folder), progress)}
        params[speech_int8.PARAM_QUANTIZE] = "int8"
        reason += "; Linear layers in int8, a scale per token (" + params[PARAM_INT8_QUALITY] + ")"
    return Choice("pytorch", reason, params, label="PyTorch")


def served_by_ct2(
    request: AddRequest,
    folder: Path,
    vendored: Path,
    reason: str,
    params: dict[str, str],
    encoder_kept: bool | None,
    progress: Progress,
) -> Choice:
    """The choice of CTranslate2 on ``weights/ct2`` (the PyTorch weights dropped): float32, or with --quantize int8
    its int8 kernels behind the gate and its encoder on OpenVINO where kept (``encoder_kept``; None: not yet
    measured)."""
    params = {**params, PARAM_COMPUTE_TYPE: "float32"}
    if request.quantize:
        progress.step("Checking CTranslate2's int8 against its float32 on calibration audio")
        params.update(int8_gate(request, speech_engines.check_ct2_int8(folder, vendored / CT2_FOLDER), progress))
        params[PARAM_COMPUTE_TYPE] = "int8"
        reason += "; int8 kernels (" + params[PARAM_INT8_QUALITY] + ")"
        if encoder_kept is None:
            encoder_kept = ct2_encoder(request, folder, vendored / CT2_FOLDER, params, progress)
        if encoder_kept:
            params[PARAM_ENCODER] = "openvino"
            reason += "; " + params[PARAM_ENCODER_CHECK]
    _keep_only(vendored, CT2_FOLDER)
    return Choice("ctranslate2", reason, params, label="CTranslate2")


def served_by_openvino(
    request: AddRequest, vendored: Path, params: dict[str, str], reason: str, gate: dict[str, str]
) -> Choice:
    """The choice of a Whisper served from its OpenVINO GenAI export: no CTranslate2 conversion or PyTorch
    weights kept; its arithmetic, and its int8 gate's verdict (``gate``), in the config."""
    _keep_only(vendored, OPENVINO_WHISPER)
    params = {**params, **gate, PARAM_COMPUTE_TYPE: "int8" if request.quantize else "float32"}
    reason += f"; int8 weights ({gate[PARAM_INT8_QUALITY]})" if gate else ""
    return Choice("openvino", reason, params, label="OpenVINO GenAI")


def _keep_only(vendored: Path, served: str | None) -> None:
    """What ``--backend auto`` converted to measure and does not serve goes; served from a converted folder
    (``served``), the model's own weights go too (None: PyTorch serves them, and every converted folder goes)."""
    for converted in (CT2_FOLDER, OPENVINO_WHISPER):
        if converted != served:
            shutil.rmtree(vendored / converted, ignore_errors=True)
    if served is not None:
        models.drop_source_weights(vendored)


def ct2_encoder(request: AddRequest, folder: Path, converted: Path, params: dict[str, str], progress: Progress) -> bool:
    """--quantize int8 on CTranslate2: its encoder on OpenVINO where openvino is installed, gated and measured faster
    (gallery.speech_encoder; the verdict into ``params``); whether it was kept (its file beside the model)."""
    if not calibrate.openvino_available():
        return False
    progress.step("Measuring the encoder on OpenVINO against CTranslate2's (--quantize int8)")
    encoder = speech_encoder.choose(folder, converted, request.options.instances)
    progress.step(encoder.summary)
    params[PARAM_ENCODER_CHECK] = encoder.summary
    return encoder.kept


def export_for_openvino(request: AddRequest, folder: Path, out: Path, progress: Progress) -> None:
    """The Whisper exported for OpenVINO GenAI's WhisperPipeline (gallery.whisper_export), int8 weights with
    --quantize int8."""
    if not openvino_exporter.exporter_ready():
        progress.step(f"Making the OpenVINO exporter's venv, once ({openvino_exporter.venv_dir()})")
    progress.step("Exporting the model for OpenVINO GenAI (optimum-intel)")
    whisper_export.export(folder, out, "int8" if request.quantize else "fp32")


def openvino_for_auto(
    request: AddRequest, folder: Path, out: Path, progress: Progress
) -> tuple[Path | str, dict[str, str]]:
    """--backend auto: the folder exported for OpenVINO GenAI, to be measured with the others (with --quantize
    int8, once its int8 passed the gate: the verdict for the config); or why it is not."""
    if not openvino_exporter.exporter_ready():
        return "its exporter's venv is not made here (--backend openvino makes it once)", {}
    why_not = whisper_export.why_not(folder)
    if why_not is not None:
        return why_not.rstrip("."), {}
    try:
        export_for_openvino(request, folder, out, progress)
    except GalleryError as exc:
        return str(exc).rstrip("."), {}
    if not request.quantize:
        return out, {}
    progress.step("Checking OpenVINO GenAI's int8 export against float32 PyTorch on calibration audio")
    found = whisper_export.check_int8(folder, out)
    progress.step(found.summary)
    verdict = int8_verdict(request, found)
    if verdict is None:
        shutil.rmtree(out, ignore_errors=True)
        return f"its int8 is below the gate ({found.summary})", {}
    return out, {PARAM_INT8_QUALITY: verdict}


def convert_for_ct2(request: AddRequest, folder: Path, converted: Path, progress: Progress) -> str | None:
    """The model converted for CTranslate2 into ``converted``: None when it was, else why not."""
    why_not = _why_not_ct2(request, folder)
    if why_not is None:
        progress.step("Converting the model for CTranslate2")
        try:
            speech_engines.convert(folder, converted)
        except GalleryError as exc:
            why_not = str(exc)
    return why_not


def _why_not_ct2(request: AddRequest, folder: Path) -> str | None:
    """Why CTranslate2 cannot serve the model; None when it can."""
    if not speech_engines.is_whisper(folder):
        return "CTranslate2 runs Whisper models only"
    if not request.vendor:
        return "--no-vendor keeps a reference, and the converted model must be written into the repository"
    return speech_engines.ct2_available() or speech_engines.ct2_leaves_out(folder)
