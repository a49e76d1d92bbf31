"""The speech engines' int8 gate, the same for each (``--quantize int8``), and the calibration audio it and the
measurement run on.

PyTorch's int8 stores every Linear layer's weights as int8 per output channel and quantizes each token's activations
with its own scale (``runtime.int8``), so a row's answer does not depend on its batch and the template keeps
batching (runtime parameter ``tritonhf.quantize``); CTranslate2 has its int8 kernels, OpenVINO GenAI int8 weights.

The gate, at ``gallery add``: on calibration audio made here (tones and noise, no files), the int8 encoder's states
must stay within a cosine of ``MIN_COSINE`` of fp32's, and the greedy tokens are compared too (reported, not gated:
a random or small model flips near-ties).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonhf.runtime.int8 import PARAM_QUANTIZE

__all__ = ["MIN_COSINE", "PARAM_QUANTIZE", "Int8Check", "agreement", "calibration_audio", "cosine"]

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
