"""``tritonhf bench``: a load generator on the sdk, with Triton's own view of the same load.

For each concurrency level, ``concurrency`` threads send requests (``batch`` texts each)
until ``duration`` seconds or ``requests`` requests have passed, whichever the user chose.
Reported per level: throughput, p50/p95/p99 latency, errors, and from Triton's statistics
(the difference before/after the level): queue and compute time per request and the
histogram of batch sizes the server actually executed, and the CPU the load generator itself
used (it shares the machine with the server). Loopback only.
"""

from __future__ import annotations

import ipaddress
import json
import resource
import statistics
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tritonhf.errors import ClientError, InvalidInputError
from tritonhf.sdk.client import Client

DEFAULT_TEXTS = [
    "This movie is absolutely wonderful",
    "The plot was boring and the acting was terrible",
    "I loved every minute of it",
    "What a waste of two hours",
    "The soundtrack is beautiful and the photography stunning",
    "Alice met Bob in Paris to talk about the new Acme office",
    "A short one",
    "Stock markets fell sharply today after the central bank raised rates again",
]


@dataclass(frozen=True)
class ServerView:
    """Triton's statistics for one level: what the server saw of the load."""

    requests: int
    executions: int
    latency_ms: float  # per request, from arrival to response: the server's share of the client's latency
    queue_ms: float  # per request
    compute_ms: float  # per execution (input + infer + output)
    batch_sizes: dict[int, int]


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    throughput: float  # requests per second
    items_per_second: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    server: ServerView | None = None
    error_kinds: dict[str, int] = field(default_factory=dict)
    # CPU the load generator itself used, in cores (CPU seconds per second): on a small machine
    # the client competes with the server for the same cores, and this says how much.
    client_cores: float = 0.0


def ensure_loopback(url: str) -> None:
    host = urllib.parse.urlsplit(url if "://" in url else "http://" + url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidInputError(f"tritonhf bench only loads servers on this machine (loopback), not {host!r}.")


def task_call(client: Client, model: str, task: str | None, texts: Sequence[str]) -> Callable[[list[str]], object]:
    """The sdk call that exercises a model of ``task`` with a list of texts."""
    calls: dict[str | None, Callable[[list[str]], object]] = {
        "text-classification": lambda batch: client.classify(batch, model=model),
        "zero-shot-classification": lambda batch: client.zero_shot(batch, model=model),
        "token-classification": lambda batch: client.ner(batch, model=model),
        "feature-extraction": lambda batch: client.embed(batch, model=model),
    }
    if task not in calls:
        return lambda batch: client.infer(model, TEXT=[[text] for text in batch])
    return calls[task]


def _process_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def server_view(before: dict[str, Any], after: dict[str, Any]) -> ServerView:
    """What Triton's statistics say happened to one model between two snapshots."""

    def stats(snapshot: dict[str, Any]) -> dict[str, Any]:
        models = snapshot.get("model_stats", [])
        return dict(models[0]) if models else {}

    old, new = stats(before), stats(after)

    def delta(path: Sequence[str], key: str) -> int:
        def dig(source: dict[str, Any]) -> int:
            for part in path:
                source = source.get(part, {})
            return int(source.get(key, 0))

        return dig(new) - dig(old)

    requests = delta(("inference_stats", "success"), "count")
    executions = int(new.get("execution_count", 0)) - int(old.get("execution_count", 0))
    # inference_stats add each request's share (a batch of 8 counts its compute 8 times);
    # batch_stats count each execution once, so compute per execution comes from them.
    old_batches = {int(b["batch_size"]): b for b in old.get("batch_stats", [])}
    batches: dict[int, int] = {}
    compute_ns = 0
    for entry in new.get("batch_stats", []):
        size = int(entry["batch_size"])
        previous = old_batches.get(size, {})
        count = int(entry.get("compute_infer", {}).get("count", 0)) - int(
            previous.get("compute_infer", {}).get("count", 0)
        )
        if count:
            batches[size] = count
        for part in ("compute_input", "compute_infer", "compute_output"):
            compute_ns += int(entry.get(part, {}).get("ns", 0)) - int(previous.get(part, {}).get("ns", 0))
    return ServerView(
        requests=requests,
        executions=executions,
        latency_ms=delta(("inference_stats", "success"), "ns") / max(requests, 1) / 1e6,
        queue_ms=delta(("inference_stats", "queue"), "ns") / max(requests, 1) / 1e6,
        compute_ms=compute_ns / max(executions, 1) / 1e6,
        batch_sizes=dict(sorted(batches.items())),
    )


def settled_statistics(
    client: Client, model: str, before: dict[str, Any], sent: int, wait: float = 2.0
) -> dict[str, Any]:
    """Triton's statistics once they count every request sent, in the request counts and in the batch
    sizes: it updates them just after answering (the batch sizes last), so a snapshot taken at the last
    response may miss it."""
    deadline = time.monotonic() + wait
    while True:
        after = client.statistics(model)
        view = server_view(before, after)
        batched = sum(size * count for size, count in view.batch_sizes.items())  # updated after the counts
        if (view.requests + _failures(before, after) >= sent and batched >= view.requests) or (
            time.monotonic() > deadline
        ):
            return after
        time.sleep(0.02)


def _failures(before: dict[str, Any], after: dict[str, Any]) -> int:
    def count(snapshot: dict[str, Any]) -> int:
        models = snapshot.get("model_stats", [])
        return int(models[0].get("inference_stats", {}).get("fail", {}).get("count", 0)) if models else 0

    return count(after) - count(before)


def run_level(
    client: Client,
    model: str,
    call: Callable[[list[str]], object],
    texts: Sequence[str],
    concurrency: int,
    batch: int,
    duration: float | None,
    requests: int | None,
) -> LevelResult:
    limit_requests = requests if requests is not None else 10**9
    stop_at = time.monotonic() + (duration if duration is not None else 3600.0)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()
    issued = 0

    def next_index() -> int | None:
        nonlocal issued
        with lock:
            if issued >= limit_requests or time.monotonic() >= stop_at:
                return None
            issued += 1
            return issued

    def worker() -> None:
        while (index := next_index()) is not None:
            chunk = [texts[(index * batch + i) % len(texts)] for i in range(batch)]
            started = time.perf_counter()
            try:
                call(chunk)
            except ClientError as exc:
                with lock:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)

    before = client.statistics(model)
    cpu_before = _process_cpu_seconds()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()  # an unexpected error in a worker is raised, not lost
    seconds = time.perf_counter() - started
    client_cores = (_process_cpu_seconds() - cpu_before) / seconds if seconds else 0.0
    done = len(latencies)
    after = settled_statistics(client, model, before, done + sum(errors.values()))
    return LevelResult(
        concurrency=concurrency,
        requests=done,
        errors=sum(errors.values()),
        seconds=seconds,
        throughput=done / seconds if seconds else 0.0,
        items_per_second=done * batch / seconds if seconds else 0.0,
        p50_ms=1000 * (statistics.median(latencies) if latencies else 0.0),
        p95_ms=1000 * _percentile(latencies, 0.95),
        p99_ms=1000 * _percentile(latencies, 0.99),
        server=server_view(before, after),
        error_kinds=errors,
        client_cores=client_cores,
    )


def run_bench(
    client: Client,
    model: str,
    concurrencies: Sequence[int] = (1, 4, 16),
    duration: float | None = 10.0,
    requests: int | None = None,
    texts: Sequence[str] = DEFAULT_TEXTS,
    batch: int = 1,
) -> list[LevelResult]:
    """Every concurrency level in turn, after a short warm-up."""
    ensure_loopback(client.url)
    if any(level < 1 for level in concurrencies) or batch < 1:
        raise InvalidInputError("concurrency levels and --batch must be positive numbers.")
    if not texts:
        raise InvalidInputError("the texts to send must not be empty.")
    call = task_call(client, model, model_task(client, model), texts)
    for _ in range(3):
        call(list(texts[:batch]))
    return [run_level(client, model, call, texts, level, batch, duration, requests) for level in concurrencies]


# ---------------------------------------------------------------------------- generation

DEFAULT_PROMPTS = [
    "Tell me about the sea in three sentences.",
    "What is a neural network?",
    "Write a short poem about autumn.",
    "Explain why the sky is blue.",
    "Give me three tips for learning a language.",
    "What does a compiler do?",
    "Describe a cat to someone who has never seen one.",
    "Why do we sleep?",
]


@dataclass(frozen=True)
class StreamsResult:
    """``streams`` concurrent generations arriving evenly over ``spread_s`` seconds, greedy."""

    streams: int
    spread_s: float
    tokens: int  # completion tokens, as the model counted them
    seconds: float  # first arrival to last completion
    tokens_per_second: float  # aggregate
    ttft_p50_ms: float
    ttft_p95_ms: float
    inter_chunk_p50_ms: float  # one chunk per token, except where a token ends mid-character
    inter_chunk_p95_ms: float
    errors: int
    texts: tuple[str, ...] = ()  # each stream's text, in arrival order
    error_kinds: dict[str, int] = field(default_factory=dict)


def run_streams(
    client: Client,
    model: str,
    streams: int,
    spread_s: float = 2.0,
    max_tokens: int = 64,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    chat: bool = True,
) -> StreamsResult:
    """Start ``streams`` greedy generations, the i-th after ``i * spread_s / (streams - 1)`` seconds."""
    ensure_loopback(client.url)
    if streams < 1 or spread_s < 0 or max_tokens < 1:
        raise InvalidInputError("streams and max_tokens must be positive, spread_s not negative.")
    ttfts: list[float] = []
    gaps: list[float] = []
    texts: list[str] = [""] * streams
    tokens: list[int] = [0] * streams
    errors: dict[str, int] = {}
    lock = threading.Lock()
    origin = time.perf_counter()

    def one(index: int) -> float:
        arrival = origin + (index * spread_s / (streams - 1) if streams > 1 else 0.0)
        time.sleep(max(arrival - time.perf_counter(), 0.0))
        prompt = prompts[index % len(prompts)]
        started = last = time.perf_counter()
        try:
            if chat:
                stream = client.chat(
                    [{"role": "user", "content": prompt}],
                    model=model,
                    max_tokens=max_tokens,
                    temperature=0,
                    stream=True,
                )
            else:
                stream = client.generate(prompt, model=model, max_tokens=max_tokens, temperature=0, stream=True)
            parts: list[str] = []
            for chunk in stream:
                now = time.perf_counter()
                with lock:
                    (gaps if parts else ttfts).append(now - (last if parts else started))
                parts.append(chunk)
                last = now
            texts[index] = "".join(parts)
            tokens[index] = stream.usage.completion_tokens if stream.usage else len(parts)
        except ClientError as exc:
            with lock:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
        return time.perf_counter()

    with ThreadPoolExecutor(streams) as pool:
        ends = list(pool.map(one, range(streams)))
    seconds = max(ends) - origin
    return StreamsResult(
        streams=streams,
        spread_s=spread_s,
        tokens=sum(tokens),
        seconds=seconds,
        tokens_per_second=sum(tokens) / seconds if seconds else 0.0,
        ttft_p50_ms=1000 * (statistics.median(ttfts) if ttfts else 0.0),
        ttft_p95_ms=1000 * _percentile(ttfts, 0.95),
        inter_chunk_p50_ms=1000 * (statistics.median(gaps) if gaps else 0.0),
        inter_chunk_p95_ms=1000 * _percentile(gaps, 0.95),
        errors=sum(errors.values()),
        texts=tuple(texts),
        error_kinds=errors,
    )


def model_task(client: Client, model: str) -> str | None:
    return next((info.task for info in client.models() if info.name == model), None)


def write_json(results: list[LevelResult], path: Path, model: str) -> None:
    path.write_text(json.dumps({"model": model, "levels": [asdict(r) for r in results]}, indent=2) + "\n")


def write_plot(results: list[LevelResult], path: Path, model: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InvalidInputError("--plot needs matplotlib: pip install 'tritonhf[plot]'.") from exc
    levels = [r.concurrency for r in results]
    figure, throughput_axis = plt.subplots(figsize=(7, 4))
    throughput_axis.plot(levels, [r.throughput for r in results], "o-", color="tab:blue", label="throughput")
    throughput_axis.set_xlabel("concurrency")
    throughput_axis.set_ylabel("requests / s", color="tab:blue")
    latency_axis = throughput_axis.twinx()
    latency_axis.plot(levels, [r.p50_ms for r in results], "s--", color="tab:red", label="p50")
    latency_axis.plot(levels, [r.p99_ms for r in results], "^:", color="tab:red", label="p99")
    latency_axis.set_ylabel("latency (ms)", color="tab:red")
    throughput_axis.set_title(f"tritonhf bench: {model}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
