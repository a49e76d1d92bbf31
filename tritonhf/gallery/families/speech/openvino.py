"""Whisper on OpenVINO GenAI's ``WhisperPipeline`` (``--backend openvino``): the export at ``gallery add``, its gate,
its choice, and how ``--backend auto`` times it.

``WhisperPipeline`` reads a folder in optimum-intel's layout: the encoder, a stateful decoder (its
KV cache inside the model), and the tokenizer and detokenizer as OpenVINO models. optimum-intel is
the exporter its documentation uses, but it pins transformers below the version tritonhf serves
with, so the export runs in a venv of its own, made once in the cache
(``$XDG_CACHE_HOME/tritonhf/openvino-export-venv``: optimum-intel, and the torch and OpenVINO
versions installed here). Only the exported folder enters the repository (``weights/openvino``);
serving needs openvino-genai and openvino-tokenizers, which the stub environment has for GGUF models.

Weights are exported in float32 and the template asks for float32 inference, so a greedy answer is
transformers' (a CPU with bf16 would otherwise run in bf16: a changed answer nobody asked for).
With ``--quantize int8`` the weights are exported in int8 (optimum-intel's weight compression) and
the activations run in OpenVINO's default precision (bf16 on a CPU with AMX), as OpenVINO's own
Whisper examples ship it, behind the speech gate (``check_int8``: the exported encoder's states
against float32 PyTorch's on the calibration clips). ``--backend auto`` measures this engine beside
PyTorch and CTranslate2 once the exporter's venv is made (``--backend openvino`` makes it); a first
``auto`` does not download an exporter by itself.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery import installed, openvino_exporter, sources
from tritonhf.gallery.families.speech import int8
from tritonhf.gallery.families.speech.measure import TIMED_TOKENS, Ready, Window
from tritonhf.gallery.families.speech.whisper import is_whisper, leaves_out
from tritonhf.gallery.request import PARAM_INT8_QUALITY, AddRequest, Choice, int8_gate, int8_verdict
from tritonhf.runtime.audio import OPENVINO_WHISPER, PARAM_COMPUTE_TYPE

__all__ = ["check_int8", "export", "prepare", "served", "weights", "why_not"]

# What WhisperPipeline opens in the exported folder.
EXPORTED_FILES = ("openvino_encoder_model.xml", "openvino_decoder_model.xml", "openvino_tokenizer.xml",
                  "openvino_detokenizer.xml", "generation_config.json", "preprocessor_config.json")  # fmt: skip


def why_not(folder: Path) -> str | None:
    """None when this engine can serve the Whisper in ``folder``, else why not. Like CTranslate2's reader,
    the pipeline reads a long file window after window alone: a generation config that asks for more is
    served by PyTorch."""
    return installed.openvino_genai_missing() or leaves_out(folder, "OpenVINO GenAI")


def weights(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """``--backend openvino``: the Whisper exported for OpenVINO GenAI into ``weights/openvino``, or a GalleryError
    saying why not."""
    why = why_not(folder) if is_whisper(folder) else "it runs Whisper models only"
    if why is not None:
        raise GalleryError(f"--backend openvino cannot serve {request.source}: {why.rstrip('.')}.")
    target = vendored / OPENVINO_WHISPER
    export_for(request, folder, target, progress)
    gate = {}
    if request.quantize:
        progress.step("Checking OpenVINO GenAI's int8 export against float32 PyTorch on calibration audio")
        gate = int8_gate(request, check_int8(folder, target), progress)
    return served(request, vendored, {}, "--backend openvino", gate)


def prepare(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Ready | str:
    """--backend auto: the folder exported for OpenVINO GenAI, to be timed with the others (with --quantize int8, once
    its int8 passed the gate); or why it is not. A first ``auto`` does not make the exporter's venv by itself."""
    if not openvino_exporter.exporter_ready():
        return "its exporter's venv is not made here (--backend openvino makes it once)"
    why = why_not(folder) if is_whisper(folder) else "it runs Whisper models only"
    if why is not None:
        return why.rstrip(".")
    out = vendored / OPENVINO_WHISPER
    try:
        export_for(request, folder, out, progress)
    except GalleryError as exc:
        return str(exc).rstrip(".")
    gate: dict[str, str] = {}
    if request.quantize:
        progress.step("Checking OpenVINO GenAI's int8 export against float32 PyTorch on calibration audio")
        found = check_int8(folder, out)
        progress.step(found.summary)
        verdict = int8_verdict(request, found)
        if verdict is None:
            shutil.rmtree(out, ignore_errors=True)
            return f"its int8 is below the gate ({found.summary})"
        gate = {PARAM_INT8_QUALITY: verdict}
    return Ready(lambda window: timer(out, window),
                 lambda reason, params: served(request, vendored, params, reason, gate))  # fmt: skip


def served(request: AddRequest, vendored: Path, params: dict[str, str], reason: str, gate: dict[str, str]) -> Choice:
    """The choice of a Whisper served from its OpenVINO GenAI export: no CTranslate2 conversion or PyTorch
    weights kept; its arithmetic, and its int8 gate's verdict (``gate``), in the config."""
    sources.drop_source_weights(vendored)  # served from weights/openvino
    params = {**params, **gate, PARAM_COMPUTE_TYPE: "int8" if request.quantize else "float32"}
    reason += f"; int8 weights ({gate[PARAM_INT8_QUALITY]})" if gate else ""
    return Choice("openvino", reason, params, label="OpenVINO GenAI")


def export_for(request: AddRequest, folder: Path, out: Path, progress: Progress) -> None:
    """The Whisper exported for OpenVINO GenAI's WhisperPipeline, int8 weights with --quantize int8."""
    if not openvino_exporter.exporter_ready():
        progress.step(f"Making the OpenVINO exporter's venv, once ({openvino_exporter.venv_dir()})")
    progress.step("Exporting the model for OpenVINO GenAI (optimum-intel)")
    export(folder, out, "int8" if request.quantize else "fp32")


def export(folder: Path, out: Path, weight_format: str = "fp32") -> None:
    """The Whisper in ``folder`` exported for ``WhisperPipeline`` into ``out``: float32 weights, or ``int8`` (with
    --quantize int8, as OpenVINO's own Whisper examples ship it)."""
    options = ["--weight-format", weight_format]
    why = openvino_exporter.export(folder, out, "automatic-speech-recognition-with-past", options, EXPORTED_FILES)
    if why is not None:
        raise GalleryError(f"optimum-intel could not export the Whisper in {folder} for OpenVINO GenAI ({why}).")


def check_int8(folder: Path, exported: Path) -> int8.Int8Check:
    """The int8 export (OpenVINO's default precision, as served) against float32 PyTorch on the calibration clips:
    the encoder's states (gated), and the first greedy tokens of the text each transcribes (reported)."""
    import numpy as np
    import openvino
    import openvino_genai
    import torch
    from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor

    auto: Any = AutoProcessor  # untyped in transformers
    processor = auto.from_pretrained(folder)
    extractor, tokenizer = processor.feature_extractor, processor.tokenizer
    model: Any = AutoModelForSpeechSeq2Seq
    reference = model.from_pretrained(folder).eval()
    encoder = openvino.Core().compile_model(str(exported / "openvino_encoder_model.xml"), "CPU")
    pipeline = openvino_genai.WhisperPipeline(str(exported), "CPU")
    config = pipeline.get_generation_config()
    config.max_new_tokens = int8.GATE_TOKENS
    cosines, agree = [], []
    for seed, seconds in enumerate(int8.CALIBRATION_SECONDS):
        audio = int8.calibration_audio(seconds, extractor.sampling_rate, seed)
        features = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="pt").input_features
        with torch.inference_mode():
            expected = reference.get_encoder()(features).last_hidden_state.numpy().ravel()
            tokens = reference.generate(features, max_new_tokens=int8.GATE_TOKENS, do_sample=False)[0].tolist()
        found = np.asarray(encoder(features.numpy())[0]).ravel()
        cosines.append(int8.cosine(expected, found))
        found_text = pipeline.generate(audio.tolist(), config).texts[0].strip()
        texts = [tokenizer.decode(tokens, skip_special_tokens=True).strip(), found_text]
        ids = [tokenizer(text, add_special_tokens=False).input_ids[: int8.GATE_TOKENS] for text in texts]
        agree.append(int8.agreement(*ids))
    return int8.Int8Check(min(cosines), float(np.mean(agree)))


def timer(exported: Path, window: Window) -> Callable[[int], Callable[[], object]]:
    """Calls of WhisperPipeline as the template makes them (the instance's threads; float32, or int8 weights in
    OpenVINO's default precision; rows one after another) on the same window and the same number of tokens."""
    import openvino_genai

    precision = {} if window.int8 else {"INFERENCE_PRECISION_HINT": "f32"}
    pipeline = openvino_genai.WhisperPipeline(str(exported), "CPU", INFERENCE_NUM_THREADS=window.threads, **precision)
    config = pipeline.get_generation_config()
    config.max_new_tokens = TIMED_TOKENS
    config.suppress_tokens = window.suppress
    if window.options:
        config.language, config.task = f"<|{window.options['language']}|>", window.options["task"]
    audio = np.asarray(window.audio, dtype=np.float32).ravel().tolist()

    def rows(count: int) -> Callable[[], object]:
        return lambda: [pipeline.generate(audio, config) for _ in range(count)]

    return rows
