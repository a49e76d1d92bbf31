"""Whisper on OpenVINO GenAI's ``WhisperPipeline`` (``--backend openvino``): the export at ``gallery add``.

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

from pathlib import Path
from typing import Any

from tritonhf.errors import GalleryError
from tritonhf.gallery import openvino_exporter
from tritonhf.gallery.generation import openvino_missing
from tritonhf.gallery.speech_engines import ct2_leaves_out
from tritonhf.gallery.speech_int8 import (
    CALIBRATION_SECONDS,
    GATE_TOKENS,
    Int8Check,
    agreement,
    calibration_audio,
    cosine,
)

__all__ = ["check_int8", "export", "why_not"]

# What WhisperPipeline opens in the exported folder.
EXPORTED_FILES = ("openvino_encoder_model.xml", "openvino_decoder_model.xml", "openvino_tokenizer.xml",
                  "openvino_detokenizer.xml", "generation_config.json", "preprocessor_config.json")  # fmt: skip


def why_not(folder: Path) -> str | None:
    """None when this engine can serve the Whisper in ``folder``, else why not. Like CTranslate2's reader,
    the pipeline reads a long file window after window alone: a generation config that asks for more is
    served by PyTorch."""
    found = openvino_missing()
    if found is not None:
        return found
    leaves_out = ct2_leaves_out(folder)
    return None if leaves_out is None else leaves_out.replace("CTranslate2", "OpenVINO GenAI")


def export(folder: Path, out: Path, weight_format: str = "fp32") -> None:
    """The Whisper in ``folder`` exported for ``WhisperPipeline`` into ``out``: float32 weights, or ``int8`` (with
    --quantize int8, as OpenVINO's own Whisper examples ship it)."""
    options = ["--weight-format", weight_format]
    why = openvino_exporter.export(folder, out, "automatic-speech-recognition-with-past", options, EXPORTED_FILES)
    if why is not None:
        raise GalleryError(f"optimum-intel could not export the Whisper in {folder} for OpenVINO GenAI ({why}).")


def check_int8(folder: Path, exported: Path) -> Int8Check:
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
    config.max_new_tokens = GATE_TOKENS
    cosines, agree = [], []
    for seed, seconds in enumerate(CALIBRATION_SECONDS):
        audio = calibration_audio(seconds, extractor.sampling_rate, seed)
        features = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="pt").input_features
        with torch.inference_mode():
            expected = reference.get_encoder()(features).last_hidden_state.numpy().ravel()
            tokens = reference.generate(features, max_new_tokens=GATE_TOKENS, do_sample=False)[0].tolist()
        found = np.asarray(encoder(features.numpy())[0]).ravel()
        cosines.append(cosine(expected, found))
        found_text = pipeline.generate(audio.tolist(), config).texts[0].strip()
        texts = [tokenizer.decode(tokens, skip_special_tokens=True).strip(), found_text]
        ids = [tokenizer(text, add_special_tokens=False).input_ids[:GATE_TOKENS] for text in texts]
        agree.append(agreement(*ids))
    return Int8Check(min(cosines), float(np.mean(agree)))
