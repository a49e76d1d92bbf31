"""The OpenAI gateway against the SDK straight to Triton, on one server, in one run.

- ``/v1/embeddings`` at concurrency 16, one text per request, through the gateway with two
  clients: the ``openai`` package's ``AsyncOpenAI`` (what applications use; it asks for base64)
  and a lean one (one aiohttp session posting the same JSON), against ``AsyncClient`` straight
  to Triton over gRPC. Each client is long-lived; 16 tasks on one event loop.
- Streaming chat, one stream at a time: time to the first text chunk through the gateway
  (``AsyncOpenAI`` streaming) against ``AsyncClient.chat(stream=True)``: p50 ms, streams
  alternating between the two, and the p50 of the paired differences.

Every client, the gateway and Triton share this machine's cores, so what a client spends per
request is taken from the server: the table shows it (client CPU ms per request, from
getrusage) beside each rate. Rounds rotate the order of the paths; ratios are within a round.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tritonhf import AsyncClient

CONCURRENCY = 16
PATHS = ("direct", "openai", "lean")
LABELS = {
    "direct": "AsyncClient -> Triton (gRPC)",
    "openai": "AsyncOpenAI -> gateway -> Triton",
    "lean": "aiohttp -> gateway -> Triton",
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _rate(call: Callable[[str], Awaitable[object]], texts: list[str], requests: int) -> tuple[float, float]:
    """(texts/s, client CPU ms per request)."""
    for text in texts[:4]:
        await call(text)  # warm: connections open
    queue = iter(range(requests))

    async def worker() -> None:
        for index in queue:
            await call(texts[index % len(texts)])

    started, cpu = time.perf_counter(), _cpu()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return requests / (time.perf_counter() - started), 1000 * (_cpu() - cpu) / requests


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

        embedders: dict[str, Callable[[str], Awaitable[object]]] = {
            "direct": lambda text: direct.embed(text, model=embed),
            "openai": lambda text: openai.embeddings.create(model=embed, input=text),
            "lean": lean,
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

        figures: dict[str, float] = {}
        for path in order:
            figures[path], figures[f"{path} cpu"] = await _rate(embedders[path], texts, requests)
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
) -> list[str]:
    measured = []
    for index in range(rounds):
        order = PATHS[index % 3 :] + PATHS[: index % 3]
        measured.append(asyncio.run(_round(order, (grpc_url, base_url), (embed, chat), texts, requests, streams)))

    def med(values: list[float], digits: int = 0) -> str:
        middle, low, high = statistics.median(values), min(values), max(values)
        if low < 0:  # signed figures: "+1.2 (-2.7 to +8.7)"
            return f"{middle:+.{digits}f} ({low:+.{digits}f} to {high:+.{digits}f})"
        return f"{middle:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"

    lines = [
        "\n### The OpenAI gateway against the SDK straight to Triton\n",
        f"Median of {rounds} rounds (lowest-highest); {requests} one-text requests per path at concurrency "
        f"{CONCURRENCY}; TTFT over {streams} lone streams per path. Client, gateway and Triton share the cores.\n",
        "| path | embeddings texts/s, c16 | x direct | client CPU ms per request | chat TTFT p50 ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for path in PATHS:
        ttft = med([r[f"{path} ttft"] for r in measured], 1) if f"{path} ttft" in measured[0] else "-"
        ratio = med([r[path] / r["direct"] for r in measured], 2)
        cpu = med([r[f"{path} cpu"] for r in measured], 2)
        lines.append(f"| {LABELS[path]} | {med([r[path] for r in measured])} | {ratio} | {cpu} | {ttft} |")
    extra = [r["ttft extra"] for r in measured]
    lines.append(
        f"\nRatios per round: gateway / direct embeddings {med([r['lean'] / r['direct'] for r in measured], 2)} with "
        f"the lean client, {med([r['openai'] / r['direct'] for r in measured], 2)} with AsyncOpenAI (target >= 0.9); "
        f"gateway TTFT {med(extra, 1)} ms over direct, p50 of paired streams (target <= +5 ms)."
    )
    return lines
