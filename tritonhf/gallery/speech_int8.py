"""int8 for speech models: every Linear layer in int8 with per-token activation scales, behind a gate.

Whisper's time on a CPU goes to its Linear layers (the encoder over 1,500 positions per 30 s
window, the decoder per token). ``runtime.int8`` stores their weights as int8 per output channel
and quantizes each token's activations with its own scale, so a row's answer does not depend on
its batch and the template keeps batching (runtime parameter ``tritonhf.quantize``).

The gate, at ``gallery add``: on calibration audio made here (tones and noise, no files), the
int8 encoder's states must stay within a cosine of ``MIN_COSINE`` of fp32's, and the greedy
tokens are compared too (reported, not gated: a random or small model flips near-ties).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf.errors import GalleryError
from tritonhf.runtime.int8 import PARAM_QUANTIZE, int8_linear_layers

__all__ = ["MIN_COSINE", "PARAM_QUANTIZE", "Int8Check", "agreement", "check_int8", "cosine"]

MIN_COSINE = 0.99
CALIBRATION_SECONDS = (3.0, 11.0, 27.0)
GATE_TOKENS = 16


@dataclass(frozen=True)
class Int8Check:
    cosine: float  # the lowest, over the calibration clips, of fp32 vs int8 encoder states
    agreement: float  # share of the first GATE_TOKENS greedy tokens that agree

    @property
    def passed(self) -> bool:
        return self.cosine >= MIN_COSINE

    @property
    def summary(self) -> str:
        return (
            f"int8 encoder states (CTC: logits) within cosine {self.cosine:.4f} of fp32 (gate {MIN_COSINE}, lowest of "
            f"{len(CALIBRATION_SECONDS)} clips); first {GATE_TOKENS} greedy tokens agree {self.agreement:.0%}"
        )


def calibration_audio(seconds: float, rate: int, seed: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A gliding, pulsed tone with a little noise: something an encoder's states depend on."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    freq = 150 + 600 * t / seconds
    wave = 0.3 * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t)) * np.sin(2 * np.pi * np.cumsum(freq) / rate)
    return (wave + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


def cosine(first: Any, second: Any) -> float:
    """The cosine of two arrays of the same size, flattened (encoder states, logits)."""
    a, b = np.ravel(first), np.ravel(second)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def agreement(expected: Sequence[Any], found: Sequence[Any]) -> float:
    """The share of ``expected``'s tokens that ``found`` has at the same place (1 when nothing is expected)."""
    return float(np.mean([a == b for a, b in zip(expected, found)])) if expected else 1.0


def check_int8(folder: Path) -> Int8Check:
    """fp32 against int8 on the calibration clips (GalleryError when the model cannot be loaded).

    Whisper: the encoder's states, and the first greedy tokens; a CTC model (wav2vec2): its logits, and
    the argmax frames."""
    import torch
    from transformers import AutoConfig, AutoModelForCTC, AutoModelForSpeechSeq2Seq, AutoProcessor

    auto: Any = AutoProcessor  # untyped in transformers
    try:
        processor: Any = auto.from_pretrained(folder)
        seq2seq = bool(getattr(AutoConfig.from_pretrained(folder), "is_encoder_decoder", False))
        kind: Any = AutoModelForSpeechSeq2Seq if seq2seq else AutoModelForCTC
        model: Any = kind.from_pretrained(folder).eval()
        quantized: Any = int8_linear_layers(kind.from_pretrained(folder).eval())
    except (OSError, ValueError) as exc:
        raise GalleryError(f"--quantize int8: the speech model in {folder} could not be loaded ({exc}).") from exc
    extractor = processor.feature_extractor
    cosines, agree = [], []
    with torch.inference_mode():
        for seed, seconds in enumerate(CALIBRATION_SECONDS):
            audio = calibration_audio(seconds, extractor.sampling_rate, seed)
            inputs = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="pt")
            if seq2seq:
                features = inputs.input_features
                states = [m.get_encoder()(features).last_hidden_state for m in (model, quantized)]
                options = {"max_new_tokens": GATE_TOKENS, "do_sample": False}
                tokens = [m.generate(features, **options)[0].tolist() for m in (model, quantized)]
            else:
                states = [m(input_values=inputs.input_values).logits for m in (model, quantized)]
                tokens = [state.argmax(-1)[0].tolist() for state in states]
            flat = [state.flatten() for state in states]
            cosines.append(float(torch.nn.functional.cosine_similarity(flat[0], flat[1], dim=0)))
            agree.append(agreement(*tokens))
    return Int8Check(min(cosines), float(np.mean(agree)))
