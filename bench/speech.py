"""Whisper transcription against faster-whisper, the engine people run on a CPU, in one run (`make bench`).

Whisper base's shapes with random weights (no real weights can be downloaded here; the work per
token is the same) and end-of-text suppressed, so every call decodes a fixed number of tokens on
both sides. tritonhf serves the folder with the gallery's automatic-speech-recognition template,
called through the SDK, in int8 as faster-whisper runs: added with ``--quantize int8`` on each
engine (``--backend pytorch``: transformers' ``generate`` with per-token int8 Linear layers;
``--backend ctranslate2``: the same model converted at ``gallery add``, CTranslate2's int8 kernels),
and ``--backend auto``'s choice printed. faster-whisper 1.2.1 (CTranslate2, int8, ``cpu_threads`` =
the cores) runs the same folder converted with CTranslate2's converter, in its own venv made here
on first use. One 30 s clip per call; one stream (calls in sequence) and 8 callers (threads;
faster-whisper with ``num_workers`` 1 and 4, the better kept). Rounds interleave the engines.
Printed: seconds per clip, decoded tokens/s, the real-time factor (seconds of compute per second of
audio) and the ratio to faster-whisper.

faster-whisper decodes a different number of tokens for the same ``max_new_tokens`` than
transformers (its CTranslate2 call halves the length here), so it runs first, and tritonhf is
asked for exactly the tokens it decoded: the same work per clip.

OpenVINO GenAI's ``WhisperPipeline`` (what its authors ship for Whisper on a CPU) is a third row:
tritonhf serves the folder with ``--backend openvino --quantize int8`` (exported by optimum-intel in
its own venv, made on first use: int8 weights, activations in OpenVINO's default precision, bf16 on
a CPU that has it), and the peer row runs that same export in a process of its own with OpenVINO's
defaults as its documentation shows, one pipeline per caller.

Every call gives ``language="en"``; with ``BENCH_LANGUAGE=detect`` none does, and both sides detect
the language from the clip's first window before transcribing, as each does by default
(faster-whisper 1.2.1 encodes that window for detection and again to decode it; tritonhf's
CTranslate2 engine decodes from the states it detected with).

    python bench/speech.py   # BENCH_ROUNDS (default 2), BENCH_CALLS (per caller, default 2), BENCH_LANGUAGE
"""

from __future__ import annotations

import json
import os
import random
import shutil
import site
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import soundfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the shared harness package
from harness.audio import sound
from harness.tiny_models import build_whisper
from tritonhf import Client
from tritonhf.bootstrap import Server, Workspace, bootstrap
from tritonhf.bootstrap.installation.sources import cache_dir
from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, ModelOptions, add_model
from tritonhf.gallery.add import VERSION
from tritonhf.gallery.config import parameters_of, parse_config
from tritonhf.gallery.installed import openvino_genai_missing as openvino_missing
from tritonhf.runtime import OPENVINO_WHISPER, VENDORED_WEIGHTS_DIR

FASTER_WHISPER = "faster-whisper==1.2.1"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
CALLS = int(os.environ.get("BENCH_CALLS", "2"))
LANGUAGE = None if os.environ.get("BENCH_LANGUAGE", "en") == "detect" else os.environ.get("BENCH_LANGUAGE", "en")
CALLERS = 8
TOKENS = 100  # asked of faster-whisper per clip (max_new_tokens)
CLIP_SECONDS = 30.0

# Run inside faster-whisper's venv: argv = model dir, audio file, workers, callers, calls, tokens; prints JSON.
WORKER = r"""
import json, sys, threading, time
from faster_whisper import WhisperModel
from faster_whisper.audio import decode_audio
folder, path, workers, callers, calls, tokens = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
audio = decode_audio(path, sampling_rate=16000)
model = WhisperModel(folder, device="cpu", compute_type="int8", cpu_threads=%(cores)d, num_workers=workers)
eot = model.hf_tokenizer.token_to_id("<|endoftext|>")
def once():
    segments, _ = model.transcribe(audio, language=%(language)r, beam_size=1, temperature=0.0, without_timestamps=True,
        condition_on_previous_text=False, max_new_tokens=tokens, suppress_tokens=[eot], suppress_blank=False,
        vad_filter=False, compression_ratio_threshold=None, log_prob_threshold=None, no_speech_threshold=None)
    return sum(len(segment.tokens) for segment in segments)
once()
counts = []
def caller():
    for _ in range(calls):
        counts.append(once())
started = time.perf_counter()
threads = [threading.Thread(target=caller) for _ in range(callers)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
print(json.dumps({"seconds": time.perf_counter() - started, "calls": len(counts), "tokens": sum(counts)}))
"""


# Run inside the OpenVINO venv: argv = exported folder, audio file, callers, calls, tokens; prints JSON.
OPENVINO_WORKER = r"""
import json, sys, threading, time
import numpy as np, openvino_genai, soundfile
folder, path, callers, calls, tokens = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
audio = soundfile.read(path, dtype="float32")[0].tolist()
pipelines = [openvino_genai.WhisperPipeline(folder, "CPU") for _ in range(callers)]
config = pipelines[0].get_generation_config()
config.max_new_tokens = tokens
config.task = "transcribe"
if %(language)r:
    config.language = "<|%(language)s|>"
def once(pipeline):
    return pipeline.generate(audio, config).perf_metrics.get_num_generated_tokens()
once(pipelines[0])
counts = []
def caller(pipeline):
    for _ in range(calls):
        counts.append(once(pipeline))
started = time.perf_counter()
threads = [threading.Thread(target=caller, args=(pipeline,)) for pipeline in pipelines]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
print(json.dumps({"seconds": time.perf_counter() - started, "calls": len(counts), "tokens": sum(counts)}))
"""


def openvino_genai(model: Path, clip: Path, callers: int, tokens: int) -> dict[str, float]:
    script = OPENVINO_WORKER % {"language": LANGUAGE or ""}
    command = [sys.executable, "-c", script, str(model), str(clip), str(callers), str(CALLS), str(tokens)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def faster_whisper_python() -> tuple[Path | None, str]:
    """The Python of faster-whisper's own venv (made on first use), or None and why not."""
    venv = cache_dir() / "faster-whisper-venv"
    python = venv / "bin" / "python"
    if (venv / ".installed").is_file():
        return python, ""
    install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", FASTER_WHISPER]
    for step in ([sys.executable, "-m", "venv", "--clear", str(venv)], install):
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"{' '.join(step[:4])} failed: {done.stderr.strip()[-300:]}"
    (venv / ".installed").touch()
    return python, ""


def convert(python: Path, folder: Path, out: Path) -> str:
    """The folder as CTranslate2 int8 (the converter imports transformers and torch: this venv's, on its path)."""
    code = (
        "from ctranslate2.converters import TransformersConverter; import sys; "
        "TransformersConverter(sys.argv[1], copy_files=['tokenizer.json'])"
        ".convert(sys.argv[2], quantization='int8')"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(site.getsitepackages())}
    done = subprocess.run([str(python), "-c", code, str(folder), str(out)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return f"conversion failed: {done.stderr.strip()[-300:]}"
    # transformers 5 writes processor_config.json; faster-whisper reads preprocessor_config.json (mel bins)
    processor = json.loads((folder / "processor_config.json").read_text())
    (out / "preprocessor_config.json").write_text(json.dumps(processor.get("feature_extractor", processor)))
    return ""


def faster_whisper(python: Path, model: Path, clip: Path, workers: int, callers: int) -> dict[str, float]:
    script = WORKER % {"cores": os.cpu_count() or 1, "language": LANGUAGE}
    command = [str(python), "-c", script, str(model), str(clip), str(workers), str(callers), str(CALLS), str(TOKENS)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def tritonhf(url: str, model: str, data: bytes, callers: int, tokens: int) -> dict[str, float]:
    with Client(url, timeout=600) as client:
        client.transcribe(data, model=model, language=LANGUAGE, max_tokens=tokens)  # warm
        counts: list[int] = []

        def caller(_: int) -> None:
            for _ in range(CALLS):
                client.transcribe(data, model=model, language=LANGUAGE, max_tokens=tokens)
                counts.append(tokens)  # end-of-text is suppressed: exactly ``tokens`` each

        started = time.perf_counter()
        with ThreadPoolExecutor(callers) as pool:
            list(pool.map(caller, range(callers)))
        return {"seconds": time.perf_counter() - started, "calls": len(counts), "tokens": sum(counts)}


def endless_whisper_base(folder: Path) -> Path:
    """Whisper base's shapes, random weights, end-of-text suppressed: a fixed number of tokens per call."""
    from transformers import GenerationConfig

    build_whisper(folder, size="base")
    generation = GenerationConfig.from_pretrained(folder)
    generation.suppress_tokens = sorted({*generation.suppress_tokens, generation.eos_token_id})
    generation.save_pretrained(folder)
    return folder


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tritonhf-speech-"))
    lines = [f"# Whisper base (random weights), 30 s clips, {os.cpu_count()} cores, {ROUNDS} rounds, "
             f"language {LANGUAGE or 'detected'}"]  # fmt: skip
    try:
        folder = endless_whisper_base(root / "whisper")
        clip = root / "clip.wav"
        soundfile.write(clip, sound(random.Random(1), CLIP_SECONDS), 16000, subtype="PCM_16")
        data = clip.read_bytes()
        python, why = faster_whisper_python()
        if python is not None:
            why = convert(python, folder, root / "ct2")
        if why:
            lines.append(f"# faster-whisper not measured: {why}")
            python = None
        tokens = TOKENS
        if python is not None:
            first = faster_whisper(python, root / "ct2", clip, 1, 1)
            tokens = round(first["tokens"] / first["calls"])
            lines.append(f"# faster-whisper decodes {tokens} tokens per clip for max_new_tokens={TOKENS}; "
                         f"tritonhf is asked for {tokens}")  # fmt: skip
        ov_why = openvino_missing()
        workspace = Workspace(root / "workspace")
        bootstrap(workspace)
        # OpenVINO GenAI first: adding it makes the exporter's venv, which auto needs to measure it too; the
        # peer row runs the same export (int8 weights) in-process.
        served = [("asr-ov", "openvino")] if not ov_why else []
        served += [("asr8", "pytorch"), ("asr-ct2", "ctranslate2"), ("asr-auto", "auto")]
        exported = Path()
        for name, backend in served:
            try:
                added = add_model(AddRequest("whisper", str(folder), workspace.model_repository, name=name,
                                             quantize="int8", backend=backend,
                                             options=ModelOptions(max_batch_size=CALLERS)))  # fmt: skip
            except GalleryError as exc:
                if backend != "openvino":
                    raise
                ov_why = str(exc)
                continue
            if backend == "openvino":
                exported = added / VERSION / VENDORED_WEIGHTS_DIR / OPENVINO_WHISPER
            params = parameters_of(parse_config((added / "config.pbtxt").read_text()))
            if backend == "auto":  # what gallery add chose on this machine, and its figures
                lines.append(f"# --backend auto chose {params.get('tritonhf.backend')}: "
                             f"{params.get('tritonhf.engine_calibration')}")  # fmt: skip
            if backend == "ctranslate2":  # whether its encoder runs on OpenVINO, and why
                lines.append(f"# {name}: {params.get('tritonhf.encoder_check', 'encoder not measured on OpenVINO')}")
        if ov_why:
            lines.append(f"# OpenVINO GenAI not measured: {ov_why}")
        figures: dict[tuple[str, int], list[dict[str, float]]] = {}
        with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600) as server:
            for index in range(ROUNDS):
                for callers in (1, CALLERS):
                    runs = [(label, lambda c=callers, m=model: tritonhf(server.grpc_url, m, data, c, tokens))
                            for label, model in (("tritonhf PyTorch int8", "asr8"),
                                                 ("tritonhf CTranslate2 int8", "asr-ct2"),
                                                 *((("tritonhf OpenVINO GenAI int8", "asr-ov"),) if not ov_why
                                                   else ()))]  # fmt: skip
                    if python is not None:
                        workers = (1,) if callers == 1 else (1, 4)
                        runs += [(f"faster-whisper x{w}", lambda c=callers, w=w: faster_whisper(
                            python, root / "ct2", clip, w, c)) for w in workers]  # fmt: skip
                    if not ov_why:
                        runs.append(("OpenVINO GenAI WhisperPipeline int8", lambda c=callers: openvino_genai(
                            exported, clip, c, tokens)))  # fmt: skip
                    for name, run in runs if index % 2 == 0 else list(reversed(runs)):
                        figures.setdefault((name, callers), []).append(run())
        lines += report(figures)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))


def report(figures: dict[tuple[str, int], list[dict[str, float]]]) -> list[str]:
    """One row per engine and callers: the median round's seconds per clip, tokens/s, RTF and the ratio."""

    def rate(run: dict[str, float]) -> float:
        return run["tokens"] / run["seconds"]

    best: dict[tuple[str, int], dict[str, float]] = {}
    for key, runs in figures.items():
        best[key] = sorted(runs, key=rate)[len(runs) // 2]
    lines = ["| engine | callers | s per clip | decoded tokens/s (rounds) | real-time factor | x faster-whisper |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for callers in sorted({callers for _, callers in best}):
        peers = [rate(run) for (name, c), run in best.items() if c == callers and name.startswith("faster")]
        baseline = max(peers) if peers else None
        for (name, c), run in best.items():
            if c != callers:
                continue
            spread = "-".join(f"{rate(r):.0f}" for r in sorted(figures[(name, c)], key=rate))
            per_clip = run["seconds"] / run["calls"] * callers  # one caller's wait per clip
            rtf = run["seconds"] / (run["calls"] * CLIP_SECONDS)
            ratio = f"{rate(run) / baseline:.2f}" if baseline else "-"
            lines.append(f"| {name} | {c} | {per_clip:.2f} | {rate(run):.0f} ({spread}) | {rtf:.3f} | {ratio} |")
    return lines


if __name__ == "__main__":
    main()
