"""Overload through the gateway: open-loop arrivals at twice the model's capacity for 20 s.

The model (tests/data/slow_embedder) takes 25 ms per batch of at most two and lets Triton queue
two more, with little CPU, so its capacity is known and the machine's noise matters little.
The gateway admits two requests in flight (``--max-concurrent-requests 2``, one batch), so
nothing waits in Triton's queue: measured here with tritonclient alone, over both protocols,
Triton 2.51's Python backend then leaves exactly 0.5 s between two executions now and then
once requests wait behind a running batch while others are refused (by its queue bound, or by
a gateway admitting three), and its throughput falls to a fraction. The gateway is where
overload is best refused. What must hold: the
admitted requests are answered about as fast as alone (p99 <= 5x the unloaded p99), the rest
are refused at once (429 with Retry-After, within 50 ms), every request gets one of the two,
every admitted answer is its own text's vector, and neither the gateway nor the stub grows.
A second test checks Triton's own refusal (its queue bound) end to end: a ServerBusyError at once.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tritonhf import AsyncClient, ServerBusyError
from tritonhf.bootstrap import Gateway, Server, Stack, Workspace
from tritonhf.serve.limits import Limits

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.alone]  # asserts on latency
DATA = Path(__file__).parent.parent / "data"
SECONDS = 20.0
WARM_UP = 5.0  # the same load, long enough to reach its steady state before memory is compared


@pytest.fixture(scope="module")
def gateway(make_workspace: Callable[[str], Workspace]) -> Iterator[Stack]:
    workspace = make_workspace("overload")
    shutil.copytree(DATA / "slow_embedder", workspace.model_repository / "slow_embedder")
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=120)
    with Stack(server, gateway=Gateway(arguments=Limits(max_concurrent_requests=2).argv())) as stack:
        yield stack


def _expected(text: str) -> np.ndarray:
    angle = (zlib.crc32(text.encode()) % 3600) / 3600 * 2 * np.pi
    return np.array([np.cos(angle), np.sin(angle)], dtype=np.float32)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _stub_pid() -> int:
    for folder in Path("/proc").iterdir():
        if folder.name.isdigit():
            try:
                command = (folder / "cmdline").read_bytes()
            except OSError:
                continue
            if b"triton_python_backend_stub" in command and b"slow_embedder" in command:
                return int(folder.name)
    raise AssertionError("no stub process for slow_embedder")


async def _one(session: object, url: str, text: str) -> tuple[int, float, str | None, bool]:
    """(status, seconds, Retry-After, the answer is this text's vector)."""
    started = time.perf_counter()
    async with session.post(url, json={"model": "slow_embedder", "input": text}) as response:  # type: ignore[attr-defined]
        body = await response.read()
        elapsed = time.perf_counter() - started
        right = False
        if response.status == 200:
            vector = np.array(json.loads(body)["data"][0]["embedding"], dtype=np.float32)
            right = bool(np.allclose(vector, _expected(text), atol=1e-5))
        return response.status, elapsed, response.headers.get("Retry-After"), right


async def _run(url: str, seconds: float) -> dict[str, object]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for index in range(10):
            await _one(session, url, f"warm {index}")
        alone = [(await _one(session, url, f"alone {index}"))[1] for index in range(40)]

        async def closed(worker: int, until: float, done: list[int]) -> None:
            count = 0
            while time.perf_counter() < until:
                status, _, _, _ = await _one(session, url, f"capacity {worker} {count}")
                count += status == 200
            done.append(count)

        # Capacity: as many callers as one batch holds, so that none is refused (a refused caller would spin).
        done: list[int] = []
        started = time.perf_counter()
        await asyncio.gather(*(closed(worker, started + 3.0, done) for worker in range(2)))
        capacity = sum(done) / (time.perf_counter() - started)

        rate = 2 * capacity
        total = int(rate * seconds)
        begin = time.perf_counter()

        async def arrive(index: int) -> tuple[int, float, str | None, bool]:
            await asyncio.sleep(max(0.0, begin + index / rate - time.perf_counter()))  # open loop: on schedule
            return await _one(session, url, f"load {index}")

        results = await asyncio.gather(*(arrive(index) for index in range(total)))
    return {"alone": alone, "capacity": capacity, "rate": rate, "results": results}


def test_twice_the_capacity_is_refused_fast_and_the_admitted_stay_fast(gateway: Stack) -> None:
    assert gateway.state is not None
    url = f"{gateway.state.gateway_url}/embeddings"
    gateway_pid, stub_pid = gateway.state.gateway_pid, _stub_pid()
    asyncio.run(_run(url, WARM_UP))  # memory is compared from here
    before = (_rss_mb(gateway_pid), _rss_mb(stub_pid))
    figures = asyncio.run(_run(url, SECONDS))
    after = (_rss_mb(gateway_pid), _rss_mb(stub_pid))

    results: list[tuple[int, float, str | None, bool]] = figures["results"]  # type: ignore[assignment]
    alone: list[float] = figures["alone"]  # type: ignore[assignment]
    statuses = {status for status, _, _, _ in results}
    admitted = [elapsed for status, elapsed, _, _ in results if status == 200]
    refused = [(elapsed, retry) for status, elapsed, retry, _ in results if status == 429]
    unloaded_p99 = float(np.percentile(alone, 99))
    summary = (
        f"capacity {figures['capacity']:.0f}/s, sent {figures['rate']:.0f}/s x {SECONDS:.0f} s = {len(results)}: "
        f"{len(admitted)} admitted (p99 {1000 * np.percentile(admitted, 99):.0f} ms vs {1000 * unloaded_p99:.0f} ms "
        f"alone), {len(refused)} refused (p99 {1000 * np.percentile([e for e, _ in refused] or [0], 99):.0f} ms); "
        f"RSS gateway {before[0]:.0f}->{after[0]:.0f} MB, stub {before[1]:.0f}->{after[1]:.0f} MB"
    )
    print(summary)
    assert statuses <= {200, 429}, f"every request is answered or refused, nothing else: {statuses} ({summary})"
    assert all(right for status, _, _, right in results if status == 200), "every answer is its own text's"
    assert len(admitted) >= 0.35 * len(results) and refused, summary
    assert np.percentile(admitted, 99) <= 5 * unloaded_p99, summary
    assert all(retry == "1" for _, retry in refused), "a refusal says when to come back"
    assert statistics.quantiles([e for e, _ in refused], n=100)[98] <= 0.05, f"refused within 50 ms: {summary}"
    assert after[0] - before[0] < 25 and after[1] - before[1] < 25, f"memory flat: {summary}"


def test_a_full_triton_queue_is_a_busy_error_at_once(gateway: Stack) -> None:
    assert gateway.state is not None

    async def burst() -> tuple[list[object], list[object]]:
        import aiohttp

        async with AsyncClient(gateway.server.grpc_url, unavailable_timeout=1.5, concurrency=64) as client:
            direct = await asyncio.gather(
                *(client.embed(f"burst {i}", model="slow_embedder") for i in range(16)), return_exceptions=True
            )
        async with aiohttp.ClientSession() as session:  # one gateway request at a time: Triton alone refuses
            admitted = [await _one(session, f"{gateway.state.gateway_url}/embeddings", f"after {i}") for i in range(3)]
        return list(direct), list(admitted)

    direct, after = asyncio.run(burst())
    busy = [error for error in direct if isinstance(error, ServerBusyError)]
    assert busy and "exceeds maximum queue size" in busy[0].message.lower(), direct[:3]
    assert all(isinstance(item, (np.ndarray, ServerBusyError)) for item in direct), "answered or busy, nothing else"
    assert all(status == 200 and right for status, _, _, right in after), "the model serves on after refusing"
