"""The gateway's page: ``GET /`` for a browser, its static files, and the server's state the page polls.

The page is three static files beside this module (``page/``): no build step, nothing from another host. It calls
the same routes any client does (``/models/NAME``, ``/v1/chat/completions``, ``/v1/rerank``,
``/v1/audio/transcriptions``), with the key the user gives it (kept in the browser's session storage, sent as
``Authorization: Bearer``, never in a URL). The page itself and its two files are open (they hold no data); the
state below is guarded like every route. Nothing here runs unless a browser asks: an API request costs what it did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import urllib.request
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from tritonhf.errors import ClientError
from tritonhf.sdk import AsyncClient, ModelInfo
from tritonhf.serve.errors import GatewayError
from tritonhf.serve.shared import client_of
from tritonhf.tasks import ONNX_PART_SUFFIX

router = APIRouter(include_in_schema=False)
FILES = Path(__file__).with_name("page")
ASSETS = {"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}
# GET without the key: the page and its files (static, no data); the page then asks for the key
PAGE_PATHS = ("/", *(f"/ui/{name}" for name in ASSETS))
# Triton's and the templates' figures the page shows, per model (the rest of the metrics text is left out)
FIGURES = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "tritonhf_running_sequences",
    "tritonhf_waiting_sequences",
    "tritonhf_generated_tokens_total",
    "tritonhf_cancelled_total",
    "tritonhf_time_to_first_token_seconds_sum",
    "tritonhf_time_to_first_token_seconds_count",
)
_SAMPLE = re.compile(r'^([a-z_]+)\{model="([^"]+)"[^}]*\} (\S+)$', re.MULTILINE)
METRICS_TIMEOUT = 2.0


@cache
def _file(name: str) -> bytes:
    return (FILES / name).read_bytes()


@router.get("/")
async def page(request: Request) -> Response:
    """The page, for a browser (it asks for HTML); any other client is told where the API is described."""
    if "text/html" not in request.headers.get("accept", ""):
        raise GatewayError(404, "GET / is the page, for a browser (Accept: text/html); the routes are described at "
                           "/docs and /openapi.json.", "not_found_error")  # fmt: skip
    return HTMLResponse(_file("index.html"), headers={"Cache-Control": "no-cache"})


@router.get("/ui/state")
async def state(request: Request) -> dict[str, Any]:
    """The served models (task, engine and why gallery add chose it, readiness), Triton's statistics per model
    (requests, failures, queue and compute time, the batch sizes it formed) and, when the gateway was given Triton's
    metrics, the templates' own figures (sequences running and waiting, tokens, time to first token); None for what
    the gateway cannot read. Counters are cumulative: the page turns two readings into rates."""
    client: AsyncClient = client_of(request)
    try:
        models = await client.models()
    except ClientError as error:
        raise GatewayError.of(error) from error
    try:
        statistics = _statistics((await client.statistics()).get("model_stats", []))
    except ClientError:  # Triton's statistics API closed to the gateway: the models are still worth showing
        statistics = None
    url = request.app.state.metrics_url
    figures = await asyncio.to_thread(_metrics, url) if url else None
    return {
        "models": [_model(model) for model in models if not model.name.endswith(ONNX_PART_SUFFIX)],
        "statistics": statistics,
        "figures": figures,
    }


@router.get("/ui/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise GatewayError(404, f"The page has no file '{name}'.", "not_found_error")
    return Response(_file(name), media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})


def _model(model: ModelInfo) -> dict[str, Any]:
    """The SDK's ModelInfo as it is, with whether it is ready."""
    return {**dataclasses.asdict(model), "ready": model.ready}


def _count(entry: Mapping[str, Any]) -> tuple[int, int]:
    return int(entry.get("count", 0) or 0), int(entry.get("ns", 0) or 0)


def _statistics(stats: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Triton's statistics per model: counts, and the time spent in the queue and computing (ns), and the batch
    sizes it formed with how many of each."""
    found = {}
    for entry in stats:
        inference = entry.get("inference_stats", {})
        (success, _), (fail, _) = _count(inference.get("success", {})), _count(inference.get("fail", {}))
        queued, queue_ns = _count(inference.get("queue", {}))
        computed, compute_ns = _count(inference.get("compute_infer", {}))
        batches = {
            str(b.get("batch_size")): _count(b.get("compute_infer", {}))[0] for b in entry.get("batch_stats", [])
        }
        found[str(entry.get("name", ""))] = {
            "success": success, "fail": fail, "queued": queued, "queue_ns": queue_ns, "computed": computed,
            "compute_ns": compute_ns, "batches": batches,
        }  # fmt: skip
    return found


def _metrics(url: str) -> dict[str, dict[str, float]] | None:
    """The figures of ``FIGURES`` per model from Triton's metrics text; None when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT) as response:
            text = response.read().decode("utf-8", "replace")
    except OSError:
        return None
    found: dict[str, dict[str, float]] = {}
    for name, model, value in _SAMPLE.findall(text):
        if name in FIGURES:
            figures = found.setdefault(model, {})
            figures[name] = figures.get(name, 0.0) + float(value)  # one line per version: summed
    return found
