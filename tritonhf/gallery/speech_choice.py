"""Which engine serves a speech model (``gallery add`` of automatic-speech-recognition).

A Whisper runs on CTranslate2 or OpenVINO GenAI where asked or where it measures fastest
(``speech_engines.measure``), else PyTorch; a CTC model on PyTorch. With ``--quantize int8`` the
chosen engine's int8 is kept only behind its gate. The converted model (``weights/ct2``,
``weights/openvino``) is written beside the vendored weights, whose PyTorch files go once unused.
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
from tritonhf.runtime.audio import CT2_FOLDER, OPENVINO_ENCODER, OPENVINO_WHISPER, PARAM_COMPUTE_TYPE, PARAM_ENCODER
from tritonhf.tasks import PARAM_CALIBRATION


def choose(request: AddRequest, vendored: Path, source: Path, progress: Progress) -> Choice:
    """A speech model's engine: for a Whisper, CTranslate2 or OpenVINO GenAI where asked or where it measures
    fastest (``gallery.speech_engines``), else PyTorch; with --quantize int8, the chosen engine's int8 behind its
    gate."""
    folder = vendored if vendored.is_dir() else source
    params: dict[str, str] = {}
    if request.backend == "openvino":
        whisper = speech_engines.is_whisper(folder)
        why_not = whisper_export.why_not(folder) if whisper else "it runs Whisper models only"
        if why_not is not None:
            raise GalleryError(f"--backend openvino cannot serve {request.source}: {why_not.rstrip('.')}.")
        target = vendored / OPENVINO_WHISPER
        _export_for_openvino(request, folder, target, progress)
        gate = {}
        if request.quantize:
            progress.step("Checking OpenVINO GenAI's int8 export against float32 PyTorch on calibration audio")
            gate = int8_gate(request, whisper_export.check_int8(folder, target), progress)
        return _served_by_openvino(request, vendored, params, "--backend openvino", gate)
    converted = vendored / CT2_FOLDER
    encoder_kept: bool | None = None  # CTranslate2's encoder on OpenVINO (--quantize int8): not yet measured
    why_not = _convert_for_ct2(request, folder, converted, progress)
    backend, reason = ("pytorch", why_not) if why_not is not None else ("ctranslate2", "--backend ctranslate2")
    if backend == "ctranslate2" and request.backend == "auto":
        exported, gate = _openvino_for_auto(request, folder, vendored / OPENVINO_WHISPER, progress)
        if request.quantize:  # CTranslate2 is timed as it would serve: with its encoder on OpenVINO where kept
            encoder_kept = _ct2_encoder(request, folder, converted, params, progress)
        engines = "PyTorch, CTranslate2 and OpenVINO GenAI" if isinstance(exported, Path) else "PyTorch and CTranslate2"
        progress.step(f"Measuring {engines} on 30 s windows (--backend auto)")
        encoder = converted / OPENVINO_ENCODER if encoder_kept else None
        measured = speech_engines.measure(folder, converted, bool(request.quantize), request.options.instances,
                                          exported, encoder)  # fmt: skip
        progress.step(measured.summary)
        backend, reason = measured.backend, measured.summary
        params[PARAM_CALIBRATION] = measured.summary
        if backend == "openvino":
            return _served_by_openvino(request, vendored, params, reason, gate)
        shutil.rmtree(vendored / OPENVINO_WHISPER, ignore_errors=True)
    if backend == "pytorch":
        shutil.rmtree(converted, ignore_errors=True)
        if request.quantize:
            params.update(_pytorch_int8(request, folder, progress))
            params[speech_int8.PARAM_QUANTIZE] = "int8"
            reason += "; Linear layers in int8, a scale per token (" + params[PARAM_INT8_QUALITY] + ")"
        return Choice(backend, reason, params)
    params[PARAM_COMPUTE_TYPE] = "float32"
    if request.quantize:
        progress.step("Checking CTranslate2's int8 against its float32 on calibration audio")
        params.update(int8_gate(request, speech_engines.check_ct2_int8(folder, converted), progress))
        params[PARAM_COMPUTE_TYPE] = "int8"
        reason += "; int8 kernels (" + params[PARAM_INT8_QUALITY] + ")"
        if encoder_kept is None:
            encoder_kept = _ct2_encoder(request, folder, converted, params, progress)
        if encoder_kept:
            params[PARAM_ENCODER] = "openvino"
            reason += "; " + params[PARAM_ENCODER_CHECK]
    models.drop_source_weights(vendored)  # served from ct2/
    return Choice(backend, reason, params)


def _ct2_encoder(
    request: AddRequest, folder: Path, converted: Path, params: dict[str, str], progress: Progress
) -> bool:
    """--quantize int8 on CTranslate2: its encoder on OpenVINO where openvino is installed, gated and measured faster
    (gallery.speech_encoder; the verdict into ``params``); whether it was kept (its file beside the model)."""
    if not calibrate.openvino_available():
        return False
    progress.step("Measuring the encoder on OpenVINO against CTranslate2's (--quantize int8)")
    encoder = speech_encoder.choose(folder, converted, request.options.instances)
    progress.step(encoder.summary)
    params[PARAM_ENCODER_CHECK] = encoder.summary
    return encoder.kept


def _served_by_openvino(
    request: AddRequest, vendored: Path, params: dict[str, str], reason: str, gate: dict[str, str]
) -> Choice:
    """The choice of a Whisper served from its OpenVINO GenAI export: no CTranslate2 conversion or PyTorch
    weights kept; its arithmetic, and its int8 gate's verdict (``gate``), in the config."""
    shutil.rmtree(vendored / CT2_FOLDER, ignore_errors=True)
    models.drop_source_weights(vendored)
    params.update(gate)
    params[PARAM_COMPUTE_TYPE] = "int8" if request.quantize else "float32"
    return Choice("openvino", reason + (f"; int8 weights ({gate[PARAM_INT8_QUALITY]})" if gate else ""), params)


def _export_for_openvino(request: AddRequest, folder: Path, out: Path, progress: Progress) -> None:
    """The Whisper exported for OpenVINO GenAI's WhisperPipeline (gallery.whisper_export), int8 weights with
    --quantize int8."""
    if not openvino_exporter.exporter_ready():
        progress.step(f"Making the OpenVINO exporter's venv, once ({openvino_exporter.venv_dir()})")
    progress.step("Exporting the model for OpenVINO GenAI (optimum-intel)")
    whisper_export.export(folder, out, "int8" if request.quantize else "fp32")


def _openvino_for_auto(
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
        _export_for_openvino(request, folder, out, progress)
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


def _why_not_ct2(request: AddRequest, folder: Path) -> str | None:
    """Why CTranslate2 cannot serve the model (it is then served with PyTorch); None when it can."""
    if request.backend == "pytorch":
        return "--backend pytorch"
    if not speech_engines.is_whisper(folder):
        return "CTranslate2 runs Whisper models only"
    if not request.vendor:
        return "--no-vendor keeps a reference, and the converted model must be written into the repository"
    return speech_engines.ct2_available() or speech_engines.ct2_leaves_out(folder)


def _convert_for_ct2(request: AddRequest, folder: Path, converted: Path, progress: Progress) -> str | None:
    """The model converted for CTranslate2 into ``converted``: None when it was, else why not (a GalleryError
    instead when --backend ctranslate2 asked for it)."""
    why_not = _why_not_ct2(request, folder)
    if why_not is None:
        progress.step("Converting the model for CTranslate2")
        try:
            speech_engines.convert(folder, converted)
        except GalleryError as exc:
            why_not = str(exc)
    if why_not is not None and request.backend == "ctranslate2":
        raise GalleryError(f"--backend ctranslate2 cannot serve {request.source}: {why_not.rstrip('.')}.")
    return why_not


def _pytorch_int8(request: AddRequest, folder: Path, progress: Progress) -> dict[str, str]:
    """A PyTorch speech model's int8 gate (gallery.speech_int8): its verdict, or a refusal."""
    progress.step("Checking dynamic int8 (Linear layers) against fp32 on calibration audio")
    return int8_gate(request, speech_int8.check_int8(folder), progress)
