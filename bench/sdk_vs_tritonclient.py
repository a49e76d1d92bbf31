"""Client.classify against hand-written tritonclient code, same model, same texts.

Prints requests/s and p50 latency at concurrency 1 and 8 for both, and the ratio
(SDK / hand-written; the target is >= 0.95). A tiny classifier keeps the model's own
time small, so client overhead shows as much as it can. The two alternate over ROUNDS
rounds (who goes first alternates too) and the medians are printed, with the range of the
per-round ratios: one pair of runs on this machine can differ by 30% either way. Run:
`make bench`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import tiny_models

from tritonhf import Client, Server
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.gallery import AddRequest, ModelOptions, add_model

REQUESTS = 400
ROUNDS = 5
TEXTS = [f"the movie number {i} was great" for i in range(REQUESTS)]


def measure(call: Callable[[str], object], concurrency: int) -> tuple[float, float]:
    latencies: list[float] = []

    def one(text: str) -> None:
        started = time.perf_counter()
        call(text)
        latencies.append(time.perf_counter() - started)

    for text in TEXTS[:20]:  # warm up connections and the model
        call(text)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, TEXTS))
    return REQUESTS / (time.perf_counter() - started), statistics.median(latencies) * 1000


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tritonhf-bench-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    (root / "clf").mkdir()
    tiny_models.build_classifier(root / "clf")
    add_model(
        AddRequest(
            "text-classification",
            str(root / "clf"),
            workspace.model_repository,
            name="clf",
            options=ModelOptions(max_batch_size=8),
        )
    )
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto") as server:
        address = server.grpc_url.removeprefix("grpc://")
        raw_clients: dict[int, grpcclient.InferenceServerClient] = {}
        sdk = Client(server.grpc_url)

        def hand_written(text: str) -> object:
            client = raw_clients.setdefault(0, grpcclient.InferenceServerClient(address))
            tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=object))
            outputs = [grpcclient.InferRequestedOutput("LABEL"), grpcclient.InferRequestedOutput("SCORE")]
            result = client.infer("clf", [tensor], outputs=outputs)
            return result.as_numpy("LABEL")[0, 0].decode(), float(result.as_numpy("SCORE")[0, 0])

        def with_sdk(text: str) -> object:
            return sdk.classify(text, model="clf")

        print(f"| concurrency | hand-written req/s | sdk req/s | sdk / hand, {ROUNDS} rounds | hand p50 | sdk p50 |")
        print("| --- | --- | --- | --- | --- | --- |")
        for concurrency in (1, 8):
            raw, ours, ratios = [], [], []
            for round_number in range(ROUNDS):
                order = (hand_written, with_sdk) if round_number % 2 == 0 else (with_sdk, hand_written)
                results = {call: measure(call, concurrency) for call in order}
                raw.append(results[hand_written])
                ours.append(results[with_sdk])
                ratios.append(results[with_sdk][0] / results[hand_written][0])
            print(
                f"| {concurrency} | {statistics.median(r for r, _ in raw):.0f} | "
                f"{statistics.median(r for r, _ in ours):.0f} | {statistics.median(ratios):.2f} "
                f"({min(ratios):.2f}-{max(ratios):.2f}) | {statistics.median(p for _, p in raw):.2f} | "
                f"{statistics.median(p for _, p in ours):.2f} |"
            )
        sdk.close()


if __name__ == "__main__":
    main()
