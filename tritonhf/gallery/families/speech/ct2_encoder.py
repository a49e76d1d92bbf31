"""Whisper's encoder on OpenVINO for the CTranslate2 engine, where it measures faster (``--quantize int8``).

Most of a 30 s window's cost is the encoder (1,500 positions). On a CPU with bf16 (AMX), OpenVINO
runs it several times faster than CTranslate2's int8 kernels, in its default precision there
(bf16), and CTranslate2 decodes from those states (its ``generate`` takes encoder states). Lower
precision moves answers as int8 does, so this is only offered with ``--quantize int8``, and behind
the same gate: the states within a cosine of ``MIN_COSINE`` of the float32 PyTorch encoder's on
the calibration clips. It is kept only when it measures faster than CTranslate2's own encoder here
(alternating rounds, one 30 s window, the instance's share of the cores). The served template
encodes each row alone, so a row's states never depend on its batch-mates.

The encoder is converted with ``openvino.convert_model`` from the PyTorch module and saved beside
the CTranslate2 model (``weights/ct2/openvino_encoder.xml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf.gallery.families.speech.int8 import CALIBRATION_SECONDS, MIN_COSINE, calibration_audio, cosine
from tritonhf.gallery.timing import fastest_runs, threads
from tritonhf.runtime.audio import OPENVINO_ENCODER

__all__ = ["Measured", "choose"]

ROUNDS = 3  # alternating timed rounds per encoder (after one warm-up call each)


@dataclass(frozen=True)
class Measured:
    """CTranslate2's encoder against OpenVINO's on this machine, and whether OpenVINO's is kept (its gate and its
    speed)."""

    kept: bool
    cosine: float  # the lowest, over the calibration clips, of OpenVINO's states against float32 PyTorch's
    ct2_s: float  # one 30 s window through the encoder, the best round
    openvino_s: float
    threads: int

    @property
    def summary(self) -> str:
        verdict = "kept" if self.kept else "not kept"
        why = "" if self.cosine >= MIN_COSINE else f", below the gate's {MIN_COSINE}"
        return (
            f"encoder on OpenVINO {verdict}: one 30 s window with {self.threads} threads, CTranslate2 int8 "
            f"{self.ct2_s:.3f} s, OpenVINO {self.openvino_s:.3f} s; states within cosine {self.cosine:.5f} of "
            f"float32{why}"
        )


def _features(extractor: Any, seconds: float, seed: int) -> Any:
    audio = calibration_audio(seconds, extractor.sampling_rate, seed)
    found = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]
    return np.ascontiguousarray(found, dtype=np.float32)


def choose(folder: Path, ct2_folder: Path, instances: int = 1) -> Measured:
    """Export the encoder of the Whisper in ``folder`` next to its CTranslate2 model, gate it and time it against
    CTranslate2's int8 encoder; the file is removed unless it is kept."""
    import ctranslate2
    import openvino
    import torch
    from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor

    auto: Any = AutoProcessor  # untyped in transformers
    extractor = auto.from_pretrained(folder).feature_extractor
    model: Any = AutoModelForSpeechSeq2Seq.from_pretrained(folder).eval()
    encoder = model.get_encoder()
    window = _features(extractor, CALIBRATION_SECONDS[-1], 0)
    target = ct2_folder / OPENVINO_ENCODER
    with torch.inference_mode():
        converted = openvino.convert_model(encoder, example_input=torch.from_numpy(window))
    openvino.save_model(converted, str(target), compress_to_fp16=False)
    count = threads(instances)
    compiled = openvino.Core().compile_model(str(target), "CPU", {"INFERENCE_NUM_THREADS": count})
    cosines = []
    for seed, seconds in enumerate(CALIBRATION_SECONDS):
        features = _features(extractor, seconds, seed)
        with torch.inference_mode():
            reference = encoder(torch.from_numpy(features)).last_hidden_state.numpy().ravel()
        found = np.asarray(compiled(features)[0]).ravel()
        cosines.append(cosine(found, reference))
    ct2 = ctranslate2.models.Whisper(str(ct2_folder), device="cpu", compute_type="int8", intra_threads=count)
    view = ctranslate2.StorageView.from_array(window)
    best = fastest_runs({"ct2": lambda: ct2.encode(view, to_cpu=True), "openvino": lambda: compiled(window)}, ROUNDS)
    kept = min(cosines) >= MIN_COSINE and best["openvino"] < best["ct2"]
    if not kept:
        target.unlink()
        target.with_suffix(".bin").unlink(missing_ok=True)
    return Measured(kept, min(cosines), best["ct2"], best["openvino"], count)
