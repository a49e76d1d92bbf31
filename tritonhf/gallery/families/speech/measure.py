"""``--backend auto`` for a speech model: every registered engine that can serve it, timed here, the fastest kept.

CTranslate2 is what faster-whisper runs: the same model converted once (``weights/ct2``), fused kernels, int8 where
asked. OpenVINO GenAI's WhisperPipeline runs the model exported for it, measured once its exporter's venv is made.
Which engine is faster depends on the CPU, the model and the load, so ``--backend auto`` makes each engine of the
registry ready (``SpeechEngine.prepare``: converted, exported, gated) and times the ready ones on this machine
exactly as they will serve (the instance's share of the cores): 30 s windows of calibration audio, a fixed number
of greedy tokens (end-of-text suppressed, so all do the same work), one window alone and ``CALLERS`` windows at once
(PyTorch and CTranslate2 decode them as one batch, WhisperPipeline one after another), alternating rounds so that a
noisy machine slows all alike. The fastest at ``CALLERS`` windows is kept: a server's callers come together, and an
engine fastest alone (WhisperPipeline, on a CPU with bf16) can be the slowest under load. Every figure goes into
config.pbtxt, and so does why an engine was not timed; ``--backend NAME`` chooses without measuring.

With ``--quantize int8`` the comparison is int8 against int8 (CTranslate2's int8 kernels, PyTorch's per-token int8
Linear layers from ``runtime.int8``, WhisperPipeline's int8 weights), each engine's int8 behind its gate (``int8``).
An engine's ``prepare`` returns its ``Timer``: how one of its calls on a ``Window`` is made for a number of rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf.gallery.families.speech.int8 import CALIBRATION_SECONDS, calibration_audio
from tritonhf.gallery.request import Choice
from tritonhf.gallery.timing import fastest_runs, threads

__all__ = ["CALLERS", "Measured", "Ready", "Timer", "Window", "measure", "window"]

TIMED_TOKENS = 24  # greedy tokens per timed call: the encoder's window and some decoding, as a short answer
ROUNDS = 2  # alternating timed rounds per engine (after one warm-up call each)
# Windows decoded at once in the second measurement: concurrent callers, which PyTorch and CTranslate2 decode as
# one batch and WhisperPipeline one after another. An engine fastest alone can be slowest under load.
CALLERS = 8


@dataclass(frozen=True)
class Window:
    """One 30 s window of calibration audio as every engine is timed on it: the same tokens asked of each."""

    audio: Any  # the samples, float32
    features: Any  # the processor's features [1, mels, 3000], float32
    suppress: list[int]  # the model's suppressed tokens and end-of-text: a fixed number of tokens on every engine
    options: dict[str, Any]  # a multilingual model's language and task (no detection pass)
    prompt: list[int]  # the decoder's start tokens for those options, without timestamps
    threads: int  # an instance's share of the cores, as served
    int8: bool


# window -> rows -> one call of the engine on ``rows`` copies of the window, as the template makes it
Timer = Callable[[Window], Callable[[int], Callable[[], object]]]


@dataclass(frozen=True)
class Ready:
    """An engine made ready by ``--backend auto``: how it is timed, what making it ready found (written into the
    config whichever engine is kept), and the choice once it measured fastest: (reason, parameters) -> Choice."""

    timer: Timer
    serve: Callable[[str, dict[str, str]], Choice]
    params: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Measured:
    """The engines' figures on this machine and the fastest for concurrent callers (what ``gallery add`` then
    chooses, with this summary as its reason)."""

    backend: str  # the fastest engine's name
    lone: dict[str, float]  # label -> seconds for one 30 s window and TIMED_TOKENS tokens, the best round
    batch: dict[str, float]  # label -> seconds for CALLERS such windows at once (as the template runs them)
    threads: int
    compute: str  # "float32" or "int8"
    not_measured: dict[str, str]  # label -> why that engine was not timed

    @property
    def summary(self) -> str:
        def figures(seconds: dict[str, float]) -> str:
            return ", ".join(f"{label} {value:.2f} s" for label, value in seconds.items())

        kept = min(self.batch, key=lambda label: self.batch[label])
        notes = "".join(f"; {label} not measured: {why}" for label, why in self.not_measured.items())
        return (
            f"{kept}, measured here in {self.compute} with {self.threads} threads on 30 s windows of "
            f"{TIMED_TOKENS} tokens: one window {figures(self.lone)}; {CALLERS} windows at once "
            f"{figures(self.batch)} (the fastest at {CALLERS} is kept: what concurrent callers get){notes}"
        )


def _window(folder: Path) -> tuple[Any, Any]:
    """One 30 s window of calibration audio, and its features [1, mels, 3000]."""
    from transformers import AutoProcessor

    auto: Any = AutoProcessor  # untyped in transformers
    processor = auto.from_pretrained(folder)
    extractor = processor.feature_extractor
    audio = calibration_audio(CALIBRATION_SECONDS[-1], extractor.sampling_rate, 0)
    features = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]
    return audio, features.astype(np.float32)


def window(folder: Path, int8: bool, instances: int = 1) -> Window:
    """The window every engine is timed on, with the tokens asked of each: one known language (a multilingual model
    would detect it first: another pass), transcribe, no timestamps."""
    from transformers import GenerationConfig

    audio, features = _window(folder)
    generation: Any = GenerationConfig.from_pretrained(folder)
    eos = generation.eos_token_id
    stops = eos if isinstance(eos, list) else [eos]
    suppress = sorted({*(generation.suppress_tokens or []), *stops})  # a fixed number of tokens on all engines
    languages = sorted(getattr(generation, "lang_to_id", None) or {})
    options: dict[str, Any] = {}
    prompt = [generation.decoder_start_token_id]
    if getattr(generation, "is_multilingual", False) and languages:
        options = {"language": languages[0].strip("<|>"), "task": "transcribe"}
        prompt += [generation.lang_to_id[languages[0]], generation.task_to_id["transcribe"]]
    prompt.append(generation.no_timestamps_token_id)
    return Window(audio, features, suppress, options, prompt, threads(instances), int8)


def measure(timers: dict[str, Timer], labels: dict[str, str], window: Window, not_measured: dict[str, str]) -> Measured:
    """The engines (name -> its timer) on this machine, alternating rounds; the fastest at ``CALLERS`` windows kept.
    ``labels``: how each is named; ``not_measured``: the engines that were not timed (label -> why)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(window.threads)
    try:
        makers = {name: timer(window) for name, timer in timers.items()}
        best = fastest_runs({f"{name}/{rows}": make(rows) for name, make in makers.items() for rows in (1, CALLERS)},
                            ROUNDS)  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    lone = {labels[name]: best[f"{name}/1"] for name in makers}
    batch = {labels[name]: best[f"{name}/{CALLERS}"] for name in makers}
    backend = min(makers, key=lambda name: best[f"{name}/{CALLERS}"])
    return Measured(backend, lone, batch, window.threads, "int8" if window.int8 else "float32", not_measured)
