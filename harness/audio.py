"""Test audio made here (no files checked in): every format, rate and channel count the speech task
takes, broken and silent files, and transformers' in-process transcription of one file.

Real speech is not needed to compare a served model with itself in-process; ``sound`` makes tones
that glide and pulse with noise, so a tiny model's text depends on the audio. ``espeak-ng`` (a Debian
package) gives a real voice where one matters; the tests do not depend on it.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

# (container, subtype): what libsndfile writes and the template reads.
FORMATS = (
    ("WAV", "PCM_16"),
    ("WAV", "FLOAT"),
    ("FLAC", "PCM_16"),
    ("OGG", "VORBIS"),
    ("OGG", "OPUS"),
    ("MP3", "MPEG_LAYER_III"),
)
RATES = (8000, 16000, 22050, 44100, 48000)


def sound(rng: random.Random, seconds: float, rate: int = 16000, channels: int = 1) -> np.ndarray:
    """float32 [frames, channels]: a gliding tone, pulsed, plus a little noise (never silent)."""
    t = np.arange(int(seconds * rate)) / rate
    start, end = rng.uniform(120, 900), rng.uniform(120, 900)
    freq = start + (end - start) * t / max(seconds, 1e-3)
    pulse = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(0.5, 4) * t)
    noise = np.random.default_rng(rng.randint(0, 2**31)).standard_normal((t.size, channels))
    wave = 0.3 * pulse * np.sin(2 * np.pi * np.cumsum(freq) / rate)
    return (wave[:, None] + 0.02 * noise).astype(np.float32)


def encode(samples: np.ndarray, rate: int = 16000, container: str = "WAV", subtype: str = "PCM_16") -> bytes:
    """``samples`` [frames(, channels)] as the bytes of a file (Opus only takes 8/12/16/24/48 kHz)."""
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=container, subtype=subtype)
    return buffer.getvalue()


def random_audio(rng: random.Random, longest: float = 8.0) -> tuple[bytes, str]:
    """One encoded file of random length, format, rate and channel count, and a description of it."""
    container, subtype = rng.choice(FORMATS)
    rates = (8000, 16000, 48000) if subtype == "OPUS" else RATES
    rate, channels, seconds = rng.choice(rates), rng.choice((1, 2)), rng.uniform(0.3, longest)
    data = encode(sound(rng, seconds, rate, channels), rate, container, subtype)
    return data, f"{container}/{subtype} {rate} Hz x{channels} {seconds:.1f} s"


def read(data: bytes, rate: int = 16000) -> np.ndarray:
    """The reference reading of a file: float32, channels averaged, soxr to ``rate`` (what a user writes)."""
    import soxr

    samples, found = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    mono = samples.mean(axis=1).astype(np.float32)
    return mono if found == rate else soxr.resample(mono, found, rate).astype(np.float32)


class AudioOracle:
    """transformers in-process on one file, alone: processor + ``generate`` with the model's own config."""

    def __init__(self, folder: Path, int8: bool = False) -> None:
        """``int8``: the Linear layers in per-token int8 (runtime.int8), as a model added with --quantize int8."""
        from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor

        self.processor: Any = AutoProcessor.from_pretrained(folder)
        self.model: Any = AutoModelForSpeechSeq2Seq.from_pretrained(folder).eval()
        if int8:
            from tritonhf.runtime.int8 import int8_linear_layers

            self.model = int8_linear_layers(self.model)
        self.rate = int(self.processor.feature_extractor.sampling_rate)
        self.window = int(self.processor.feature_extractor.n_samples)

    def transcribe(
        self,
        data: bytes,
        language: str | None = None,
        task: str = "transcribe",
        timestamps: bool = False,
        prompt: str | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> dict[str, Any]:
        import torch

        samples = read(data, self.rate)
        extractor = self.processor.feature_extractor
        first = extractor(samples[: self.window], sampling_rate=self.rate, return_tensors="pt").input_features
        with torch.inference_mode():
            if language is None:
                token = int(self.model.detect_language(first).view(-1)[0])
                language = self.processor.tokenizer.convert_ids_to_tokens(token).strip("<|>")
            options: dict[str, Any] = {
                "language": language,
                "task": task,
                "max_new_tokens": max_tokens or self.model.config.max_target_positions // 2,
            }
            if prompt:
                options["prompt_ids"] = torch.tensor(self.processor.get_prompt_ids(prompt))
            if temperature > 0:
                torch.manual_seed(seed)
                options.update(do_sample=True, temperature=temperature)
            if len(samples) > self.window:
                whole = extractor(samples, sampling_rate=self.rate, return_tensors="pt", truncation=False,
                                  padding="longest", return_attention_mask=True)  # fmt: skip
                out = self.model.generate(whole.input_features, attention_mask=whole.attention_mask,
                                          return_timestamps=True, **options)  # fmt: skip
            else:
                out = self.model.generate(first, return_timestamps=timestamps, **options)
        sequences = out["sequences"] if isinstance(out, dict) else out
        text = self.processor.tokenizer.decode(sequences[0], skip_special_tokens=True).strip()
        return {"text": text, "language": language, "duration": len(samples) / self.rate}


class CtcOracle:
    """transformers' own ASR pipeline on one file (a CTC model: wav2vec2), with 30 s windows and 5 s strides."""

    def __init__(self, folder: Path) -> None:
        from transformers import pipeline

        self.pipe: Any = pipeline("automatic-speech-recognition", model=str(folder), chunk_length_s=30,
                                  stride_length_s=5)  # fmt: skip
        self.rate = int(self.pipe.feature_extractor.sampling_rate)

    def transcribe(self, data: bytes, timestamps: bool = False) -> dict[str, Any]:
        samples = read(data, self.rate)
        found = self.pipe(
            {"raw": samples, "sampling_rate": self.rate}, return_timestamps="word" if timestamps else None
        )
        words = [(c["timestamp"][0], c["timestamp"][1], c["text"]) for c in found.get("chunks", [])]
        return {"text": found["text"], "duration": len(samples) / self.rate, "words": words}
