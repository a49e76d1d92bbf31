"""Fuzzing the gateway from its own schema (schemathesis): every request a client can build gets an answer, never a
server error, and every answer matches the shape the schema documents for its status.

The schema is the gateway's ``/openapi.json`` as a client reads it, with the served models' names as each body's
``model`` enum, so the generated requests reach the models (a third of them at least answer 2xx; the test counts).
One change before fuzzing: the real SmolLM2 is taken out of the enum, since a drawn ``max_tokens`` of thousands
would generate for minutes on it; the tiny generator ``writer`` takes the same routes. The run is seeded; the test
prints the command that replays it (the schema file stays in pytest's temporary folder).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tritonhf.bootstrap import Stack

pytestmark = pytest.mark.integration
SEED = 4848
# Examples per operation in the fuzzing phase, per mode: 5,000 requests in all, most of them schema-valid (a run: 4,832
# of those, 45% answered 2xx, and 1,766 invalid ones with 60 examples).
EXAMPLES = {"positive": int(os.environ.get("FUZZ_EXAMPLES", "320")), "negative": 40}
SLOW_MODELS = {"smollm2"}  # the real model


def _schema(base: str) -> dict[str, object]:
    with urllib.request.urlopen(f"{base}/openapi.json", timeout=30) as response:
        schema = json.loads(response.read())
    for body in schema["components"]["schemas"].values():
        field = body.get("properties", {}).get("model", {})
        for branch in field.get("anyOf", [field]):
            if "enum" in branch:
                branch["enum"] = [name for name in branch["enum"] if name not in SLOW_MODELS]
    return schema


def test_no_request_the_schema_allows_is_a_server_error(served_stack: Stack, tmp_path: Path) -> None:
    """Two runs: requests the schema allows (``positive``: a third at least must be answered 2xx, else the schema
    says less than the routes check) and requests it forbids (``negative``: each must be a 4xx); in both, no 5xx
    and every answer as its status documents."""
    assert served_stack.state is not None
    base = served_stack.state.gateway_url.removesuffix("/v1")
    schema = _schema(base)
    chat_models = schema["components"]["schemas"]["ChatBody"]["properties"]["model"]["enum"]  # type: ignore[index]
    assert chat_models == ["thinker", "writer", "writer-llamacpp"]
    schema_file = tmp_path / "openapi.json"
    schema_file.write_text(json.dumps(schema))
    total: Counter[int] = Counter()
    for mode in ("positive", "negative"):
        har = tmp_path / f"fuzz-{mode}.har"
        command = [
            str(Path(sys.executable).with_name("st")), "run", str(schema_file), "--url", base, "--mode", mode,
            "--checks", "not_a_server_error,response_schema_conformance", "--max-examples", str(EXAMPLES[mode]),
            "--seed", str(SEED), "--phases", "examples,coverage,fuzzing", "--request-timeout", "60",
            "--report", "har", "--report-har-path", str(har), "--no-color",
            # no example database: in a temporary folder it is written and never read again, and with one Hypothesis
            # also keeps a Pareto front, whose shrinking costs CPU and serves only the database
            "--generation-database", "none",
        ]  # fmt: skip
        print(f"replay: {shlex.join(command)}")
        # in the temporary folder: schemathesis keeps a cache of its findings in the working directory
        done = subprocess.run(command, capture_output=True, text=True, timeout=1500, check=False, cwd=tmp_path)
        entries = json.loads(har.read_text())["log"]["entries"]
        statuses = Counter(entry["response"]["status"] for entry in entries)
        summary = f"{mode}: {sum(statuses.values())} requests, statuses {dict(sorted(statuses.items()))}"
        print(summary)
        assert done.returncode == 0, f"{summary}\nreplay: {shlex.join(command)}\n{done.stdout[-6000:]}"
        assert not [status for status in statuses if status >= 500], summary
        # A model's URL (/models/NAME, a Hugging Face Inference Endpoint) takes its model's task's body, which one
        # schema cannot state: a random body there is a 400 by design; a stored response's URL
        # (/v1/responses/ID) names an id only the server made: a random one is a 404 by design. Those requests are
        # fuzzed above (no 5xx, answers as documented) and left out of the share that tells whether the fuzzer
        # reached the models.
        model_urls = [urlparse(e["request"]["url"]).path.startswith(("/models/", "/v1/responses/")) for e in entries]
        typed = Counter(e["response"]["status"] for e, url in zip(entries, model_urls) if not url)
        if mode == "positive":
            answered = sum(count for status, count in typed.items() if 200 <= status < 300)
            assert answered >= sum(typed.values()) / 3, f"the fuzzer did not reach the models: {summary}"
        total += typed
    answered = sum(count for status, count in total.items() if 200 <= status < 300)
    assert sum(total.values()) >= 5000 and answered >= sum(total.values()) / 3, f"in all (typed routes): {dict(total)}"
