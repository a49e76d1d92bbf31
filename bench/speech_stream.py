"""What streaming a transcription buys: the first part of a long file against its whole answer, in one run.

Whisper base's shapes with random weights and end-of-text suppressed (``speech.endless_whisper_base``),
on CTranslate2 int8, added twice: with ``--stream`` (decoupled: a part per 30 s window as it is
read) and without. One 90 s file (three windows), ``BENCH_TOKENS`` tokens per window, one caller
over gRPC; rounds interleave the three ways of asking. Printed per way, median round: seconds to
the first part (streamed) and to the whole answer, and the whole answer's time against the model
added without ``--stream`` (what streaming costs the whole).

    python bench/speech_stream.py   # BENCH_ROUNDS (default 3), BENCH_TOKENS (default 40)
"""

from __future__ import annotations

import io
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import soundfile
from speech import endless_whisper_base

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the shared harness package
from harness.audio import sound
from tritonhf import Client
from tritonhf.bootstrap import Server, Workspace, bootstrap
from tritonhf.gallery import AddRequest, ModelOptions, add_model

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TOKENS = int(os.environ.get("BENCH_TOKENS", "40"))
SECONDS = 90.0


def streamed(client: Client, data: bytes) -> tuple[float, float, int]:
    """(seconds to the first part, seconds to the whole answer, parts) of one streamed call."""
    started = time.perf_counter()
    first, count = 0.0, 0
    with client.transcribe(data, model="asr-stream", language="en", max_tokens=TOKENS, stream=True) as parts:
        for _ in parts:
            count += 1
            first = first or time.perf_counter() - started
    return first, time.perf_counter() - started, count


def whole(client: Client, data: bytes, model: str) -> tuple[float, float, int]:
    started = time.perf_counter()
    client.transcribe(data, model=model, language="en", max_tokens=TOKENS)
    took = time.perf_counter() - started
    return took, took, 1


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tritonhf-speech-stream-"))
    lines = [f"# Whisper base (random weights), CTranslate2 int8, one {SECONDS:.0f} s file, {TOKENS} tokens per "
             f"window, {os.cpu_count()} cores, {ROUNDS} rounds, one caller over gRPC"]  # fmt: skip
    try:
        folder = endless_whisper_base(root / "whisper")
        buffer = io.BytesIO()
        soundfile.write(buffer, sound(random.Random(2), SECONDS), 16000, format="FLAC")
        data = buffer.getvalue()
        workspace = Workspace(root / "workspace")
        bootstrap(workspace)
        for name, stream in (("asr-stream", True), ("asr-whole", False)):
            add_model(AddRequest("whisper", str(folder), workspace.model_repository, name=name, quantize="int8",
                                 backend="ctranslate2", options=ModelOptions(stream=stream)))  # fmt: skip
        ways = {
            "--stream, read part by part": lambda client: streamed(client, data),
            "--stream, whole answer": lambda client: whole(client, data, "asr-stream"),
            "without --stream": lambda client: whole(client, data, "asr-whole"),
        }
        figures: dict[str, list[tuple[float, float, int]]] = {name: [] for name in ways}
        server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600)
        with server, Client(server.grpc_url, timeout=600) as client:
            for run in ways.values():
                run(client)  # warm
            for index in range(ROUNDS):
                order = list(ways.items())
                for name, run in order if index % 2 == 0 else reversed(order):
                    figures[name].append(run(client))
        baseline = statistics.median(took for _, took, _ in figures["without --stream"])
        lines += ["| way | parts | s to the first part | s to the whole answer (rounds) | whole x without --stream |",
                  "| --- | --- | --- | --- | --- |"]  # fmt: skip
        for name, runs in figures.items():
            first = statistics.median(run[0] for run in runs)
            took = statistics.median(run[1] for run in runs)
            spread = "-".join(f"{run[1]:.2f}" for run in sorted(runs, key=lambda run: run[1]))
            lines.append(f"| {name} | {runs[0][2]} | {first:.2f} | {took:.2f} ({spread}) | {took / baseline:.2f} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
