"""Whisper's engine at ``gallery add``: PyTorch, CTranslate2 or OpenVINO GenAI, chosen by measuring here.

CTranslate2 is what faster-whisper runs: the same model converted once (``weights/ct2``), fused
kernels, int8 where asked. OpenVINO GenAI's WhisperPipeline runs the model exported for it
(``gallery.whisper_export``), measured once its exporter's venv is made. Which engine is faster
depends on the CPU, the model and the load, so ``--backend auto`` converts the model and times the
engines on this machine exactly as they will serve (the instance's share of the cores): 30 s
windows of calibration audio, a fixed number of greedy tokens (end-of-text suppressed, so all do
the same work), one window alone and ``CALLERS`` windows at once (PyTorch and CTranslate2 decode
them as one batch, WhisperPipeline one after another), alternating rounds so that a noisy machine
slows all alike. The fastest at ``CALLERS`` windows is kept: a server's callers come together, and
an engine fastest alone (WhisperPipeline, on a CPU with bf16) can be the slowest under load. Every
figure goes into config.pbtxt; ``--backend ctranslate2`` or ``openvino`` chooses without measuring,
``pytorch`` converts nothing.

With ``--quantize int8`` the comparison is int8 against int8 (CTranslate2's int8 kernels, PyTorch's
per-token int8 Linear layers from ``runtime.int8``, WhisperPipeline's int8 weights), and each passes
the same gate as PyTorch's (``gallery.speech_int8``): its encoder states within a cosine of
``MIN_COSINE`` of float32 on the calibration clips.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf.errors import GalleryError
from tritonhf.gallery.calibrate import fastest_runs, threads
from tritonhf.gallery.speech_int8 import (
    CALIBRATION_SECONDS,
    GATE_TOKENS,
    Int8Check,
    agreement,
    calibration_audio,
    cosine,
)
from tritonhf.runtime.audio import long_form_settings
from tritonhf.runtime.int8 import int8_linear_layers

__all__ = [
    "Measured",
    "check_ct2_int8",
    "convert",
    "ct2_available",
    "ct2_leaves_out",
    "is_whisper",
    "measure",
]

TIMED_TOKENS = 24  # greedy tokens per timed call: the encoder's window and some decoding, as a short answer
ROUNDS = 2  # alternating timed rounds per engine (after one warm-up call each)
# Windows decoded at once in the second measurement: concurrent callers, which PyTorch and CTranslate2 decode as
# one batch and WhisperPipeline one after another. An engine fastest alone can be slowest under load.
CALLERS = 8
CT2_WORKERS = 2  # batches CTranslate2 runs at once when served (WORKERS in the template's ctranslate2_engine.py)


NAMES = {"pytorch": "PyTorch", "ctranslate2": "CTranslate2", "openvino": "OpenVINO GenAI"}


@dataclass(frozen=True)
class Measured:
    """The speech engines' figures on this machine and the fastest for concurrent callers (what ``gallery add``
    then chooses, with this summary as its reason)."""

    backend: str  # "ctranslate2", "pytorch" or "openvino"
    lone: dict[str, float]  # engine -> seconds for one 30 s window and TIMED_TOKENS tokens, the best round
    batch: dict[str, float]  # engine -> seconds for CALLERS such windows at once (as the template runs them)
    threads: int
    compute: str  # "float32" or "int8"
    openvino_note: str = ""  # why OpenVINO GenAI was not measured

    @property
    def summary(self) -> str:
        def figures(seconds: dict[str, float]) -> str:
            return ", ".join(f"{NAMES[name]} {value:.2f} s" for name, value in seconds.items())

        note = f"; OpenVINO GenAI not measured: {self.openvino_note}" if self.openvino_note else ""
        return (
            f"{NAMES[self.backend]}, measured here in {self.compute} with {self.threads} threads on 30 s windows of "
            f"{TIMED_TOKENS} tokens: one window {figures(self.lone)}; {CALLERS} windows at once "
            f"{figures(self.batch)} (the fastest at {CALLERS} is kept: what concurrent callers get){note}"
        )


def is_whisper(folder: Path) -> bool:
    """Is the model in ``folder`` a Whisper (the one speech model CTranslate2 runs here)?"""
    try:
        return str(json.loads((folder / "config.json").read_text()).get("model_type")) == "whisper"
    except (OSError, ValueError):
        return False


def ct2_available() -> str | None:
    """None when CTranslate2 imports, else why not."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as exc:
        return f"ctranslate2 is not installed ({exc}; pip install 'tritonhf[audio]')"
    return None


def ct2_leaves_out(folder: Path) -> str | None:
    """What CTranslate2 would leave out of the model's generation config when it reads a long file
    (``runtime.audio.long_form_settings``); None when nothing. Such a model is served by PyTorch, whose
    ``generate`` does what the settings ask."""
    from transformers import GenerationConfig

    try:
        generation: Any = GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError):
        return None  # no generation config: transformers' defaults, which the reader follows
    asked = long_form_settings(generation)
    if not asked:
        return None
    return (
        f"its generation config sets {' and '.join(asked)}, which CTranslate2's long-form reader here does not do "
        "(transformers' generate does: --backend pytorch)"
    )


def convert(folder: Path, out: Path) -> None:
    """The Whisper in ``folder`` as a CTranslate2 model in ``out`` (float32 weights: int8 is chosen at load)."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter
    from transformers import GenerationConfig

    try:
        TransformersConverter(str(folder)).convert(str(out), quantization=None, force=True)
        converted = ctranslate2.models.Whisper(str(out), device="cpu", intra_threads=1)
        generation: Any = GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError, NotImplementedError, RuntimeError) as exc:
        raise GalleryError(f"CTranslate2 could not convert the Whisper in {folder} ({exc}).") from exc
    multilingual = bool(getattr(generation, "is_multilingual", False) and getattr(generation, "lang_to_id", None))
    if converted.is_multilingual != multilingual:  # it could not detect languages, or would expect them
        raise GalleryError(
            f"CTranslate2 reads the Whisper in {folder} as {'' if converted.is_multilingual else 'not '}multilingual, "
            f"its generation config says {'' if multilingual else 'not '}multilingual."
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


def measure(
    folder: Path,
    ct2_folder: Path,
    int8: bool,
    instances: int = 1,
    exported: Path | str = "not exported",
    encoder: Path | None = None,
) -> Measured:
    """The engines on this machine, alternating rounds; the fastest kept. ``exported``: the folder exported for
    OpenVINO GenAI's WhisperPipeline, or why there is none; ``encoder``: CTranslate2's encoder on OpenVINO, where
    ``gallery.speech_encoder`` kept it. CTranslate2 runs as the template runs it: ``CT2_WORKERS`` parts at once,
    each row encoded alone on OpenVINO when ``encoder`` is given."""
    import ctranslate2
    import torch
    from transformers import AutoModelForSpeechSeq2Seq, GenerationConfig

    count = threads(instances)
    audio, features = _window(folder)
    generation: Any = GenerationConfig.from_pretrained(folder)
    eos = generation.eos_token_id
    stops = eos if isinstance(eos, list) else [eos]
    suppress = sorted({*(generation.suppress_tokens or []), *stops})  # a fixed number of tokens on both sides
    auto: Any = AutoModelForSpeechSeq2Seq  # untyped in transformers
    model = auto.from_pretrained(folder).eval()
    if int8:
        model = int8_linear_layers(model)
    compute = "int8" if int8 else "float32"
    ct2 = ctranslate2.models.Whisper(str(ct2_folder), device="cpu", compute_type=compute, intra_threads=count,
                                     inter_threads=CT2_WORKERS)  # fmt: skip
    encode = None
    if encoder is not None:
        import openvino

        compiled = openvino.Core().compile_model(str(encoder), "CPU", {"INFERENCE_NUM_THREADS": count})
        encode = compiled.create_infer_request()
    # One known language (a multilingual model would detect it first: another pass), transcribe, no timestamps.
    languages = sorted(getattr(generation, "lang_to_id", None) or {})
    options: dict[str, Any] = {}
    prompt = [generation.decoder_start_token_id]
    if getattr(generation, "is_multilingual", False) and languages:
        options = {"language": languages[0].strip("<|>"), "task": "transcribe"}
        prompt += [generation.lang_to_id[languages[0]], generation.task_to_id["transcribe"]]
    prompt.append(generation.no_timestamps_token_id)
    previous = torch.get_num_threads()
    torch.set_num_threads(count)

    def run_pytorch(rows: int) -> Callable[[], object]:
        inputs = torch.from_numpy(np.repeat(features, rows, axis=0))

        def run() -> None:
            with torch.inference_mode():
                model.generate(inputs, max_new_tokens=TIMED_TOKENS, suppress_tokens=suppress, do_sample=False,
                               **options)  # fmt: skip

        return run

    def run_ct2(rows: int) -> Callable[[], object]:
        batch = np.ascontiguousarray(np.repeat(features, rows, axis=0), dtype=np.float32)
        parts = np.array_split(np.arange(rows), min(CT2_WORKERS, rows))

        def run() -> None:
            inputs = batch
            if encode is not None:
                inputs = np.stack([encode.infer([batch[row : row + 1]])[0][0] for row in range(rows)])
            pending = [ct2.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(inputs[part])),
                                    [prompt] * len(part), beam_size=1, max_length=2 * TIMED_TOKENS,
                                    suppress_tokens=suppress, asynchronous=True) for part in parts]  # fmt: skip
            for results in pending:
                for result in results:
                    result.result()

        return run

    makers: dict[str, Callable[[int], Callable[[], object]]] = {"pytorch": run_pytorch, "ctranslate2": run_ct2}
    if isinstance(exported, Path):
        makers["openvino"] = _openvino_run(exported, audio, count, suppress, options, int8)
    try:
        best = fastest_runs({f"{name}/{rows}": make(rows) for name, make in makers.items() for rows in (1, CALLERS)},
                            ROUNDS)  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    lone = {name: best[f"{name}/1"] for name in makers}
    batch = {name: best[f"{name}/{CALLERS}"] for name in makers}
    backend = min(batch, key=lambda name: batch[name])
    note = exported if isinstance(exported, str) else ""
    return Measured(backend, lone, batch, count, compute, note)


def _openvino_run(
    exported: Path, window: Any, count: int, suppress: list[int], options: dict[str, Any], int8: bool
) -> Callable[[int], Callable[[], object]]:
    """Calls of WhisperPipeline as the template makes them (the instance's threads; float32, or int8 weights in
    OpenVINO's default precision; rows one after another) on the same window and the same number of tokens."""
    import openvino_genai

    precision = {} if int8 else {"INFERENCE_PRECISION_HINT": "f32"}
    pipeline = openvino_genai.WhisperPipeline(str(exported), "CPU", INFERENCE_NUM_THREADS=count, **precision)
    config = pipeline.get_generation_config()
    config.max_new_tokens = TIMED_TOKENS
    config.suppress_tokens = suppress
    if options:
        config.language, config.task = f"<|{options['language']}|>", options["task"]
    audio = np.asarray(window, dtype=np.float32).ravel().tolist()

    def make(rows: int) -> Callable[[], object]:
        return lambda: [pipeline.generate(audio, config) for _ in range(rows)]

    return make


def check_ct2_int8(folder: Path, ct2_folder: Path) -> Int8Check:
    """CTranslate2's int8 against its float32 on the calibration clips: encoder states, and the first greedy tokens."""
    import ctranslate2
    from transformers import AutoProcessor, GenerationConfig

    auto: Any = AutoProcessor  # untyped in transformers
    extractor = auto.from_pretrained(folder).feature_extractor
    start = [GenerationConfig.from_pretrained(folder).decoder_start_token_id]
    kinds = ("float32", "int8")
    engines = [ctranslate2.models.Whisper(str(ct2_folder), device="cpu", compute_type=kind) for kind in kinds]
    cosines, agree = [], []
    for seed, seconds in enumerate(CALIBRATION_SECONDS):
        audio = calibration_audio(seconds, extractor.sampling_rate, seed)
        features = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]
        view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features, dtype=np.float32))
        states = [np.asarray(engine.encode(view)).ravel() for engine in engines]
        cosines.append(cosine(*states))
        tokens = [engine.generate(view, [start], beam_size=1, max_length=2 * GATE_TOKENS)[0].sequences_ids[0]
                  for engine in engines]  # fmt: skip
        agree.append(agreement(*tokens))
    return Int8Check(min(cosines), float(np.mean(agree)))
