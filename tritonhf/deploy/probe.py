"""Readiness and liveness for a Triton pod: every ready model answers one row.

Triton's own ``/v2/health/ready`` keeps answering 200 when a model's stub process died (its
requests then fail forever), so a pod would stay in the Service while being useless. This
probe asks the server for its models and sends each ready one a row of its config's shape
(zeros; "x" for text), through ``/infer`` or, for a decoupled generation model, one token
of ``/generate_stream``. Exit 0 when all answer, 1 otherwise (with the failures on stderr).

Standard library only: it runs inside NVIDIA's Triton image (``python3 probe.py``), shipped
by `tritonhf deploy` as a ConfigMap. The admin key, when the pod restricts the repository
API, comes from ``$TRITONHF_ADMIN_KEY`` (the same Secret the server gets).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

ADMIN_HEADER = "tritonhf-key"  # the SDK's key header, which the cluster's restriction names
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the pod talks to itself
_ZERO = {"BOOL": False, "BYTES": "x"}


def call(base: str, path: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if os.environ.get("TRITONHF_ADMIN_KEY"):
        headers[ADMIN_HEADER] = os.environ["TRITONHF_ADMIN_KEY"]
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with _NO_PROXY.open(request, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc).encode()


def one_row(config: dict[str, Any]) -> list[dict[str, Any]]:
    """A row of every non-optional input, shaped by the config (variable dims become 1)."""
    batched = int(config.get("max_batch_size", 0)) > 0
    inputs = []
    for spec in config.get("input", []):
        if spec.get("optional"):
            continue
        dims = [1 if int(d) < 0 else int(d) for d in spec.get("dims", [])]
        shape = ([1] if batched else []) + dims
        datatype = str(spec.get("data_type", "TYPE_FP32")).removeprefix("TYPE_")
        datatype = "BYTES" if datatype == "STRING" else datatype
        count = 1
        for dim in shape:
            count *= dim
        inputs.append(
            {"name": spec["name"], "shape": shape, "datatype": datatype, "data": [_ZERO.get(datatype, 0)] * count}
        )
    return inputs


def check_model(base: str, name: str) -> str | None:
    """None when ``name`` answers one row, else why not."""
    quoted = urllib.parse.quote(name, safe="")
    status, body = call(base, f"/v2/models/{quoted}/config")
    if status != 200:
        return f"config: HTTP {status}"
    config = json.loads(body)
    if config.get("model_transaction_policy", {}).get("decoupled"):
        names = {spec.get("name") for spec in config.get("input", [])}
        if "text_input" not in names:
            status, _ = call(base, f"/v2/models/{quoted}/ready")
            return None if status == 200 else f"ready: HTTP {status}"
        status, body = call(base, f"/v2/models/{quoted}/generate_stream", {"text_input": "x", "max_tokens": 1}, 30)
    else:
        status, body = call(base, f"/v2/models/{quoted}/infer", {"inputs": one_row(config)}, 30)
    if status != 200 or b'"error"' in body[:200]:
        return f"HTTP {status}: {body[:200].decode(errors='replace')}"
    return None


def main(argv: list[str]) -> int:
    base = (argv[1] if len(argv) > 1 else "http://127.0.0.1:8000").rstrip("/")
    status, _ = call(base, "/v2/health/ready")
    if status != 200:
        print(f"server not ready (HTTP {status})", file=sys.stderr)
        return 1
    status, body = call(base, "/v2/repository/index", {})
    if status != 200:
        print(f"cannot list models (HTTP {status})", file=sys.stderr)
        return 1
    failures = []
    for entry in json.loads(body):
        if entry.get("state") == "READY":
            problem = check_model(base, str(entry["name"]))
            if problem:
                failures.append(f"{entry['name']}: {problem}")
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
