"""The gateway's own Prometheus metrics (``GET /metrics``): requests by route and status, latency, in flight.

A plain ASGI middleware, outermost, so refusals (401, 413, 429) are counted as well as answers.
Routes are labelled by their template (``/v1/models/{model_id}``), anything else as ``other``, so
a scanner cannot grow the label set. Triton's own metrics (queue, compute, the generation
template's token counters) stay on Triton's metrics port.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class GatewayMetrics:
    """The counters of one app (its own registry: two gateways in one process do not mix)."""

    def __init__(self, routes: Iterable[tuple[str, re.Pattern[str] | None]]) -> None:
        """``routes``: (template, its compiled pattern, or None for a plain path)."""
        self.registry = CollectorRegistry()
        routes = list(routes)
        self.plain = frozenset(template for template, pattern in routes if pattern is None or "{" not in template)
        self.patterns = [(template, pattern) for template, pattern in routes if pattern is not None and "{" in template]
        self.requests = Counter(
            "tritonhf_gateway_requests", "Requests answered, by route and HTTP status", ["route", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "tritonhf_gateway_request_duration_seconds", "From arrival to the end of the response (streams included)",
            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.in_flight = Gauge("tritonhf_gateway_requests_in_flight", "Requests being answered", registry=self.registry)

    def route(self, scope: Scope) -> str:
        path = str(scope.get("path", ""))
        if path in self.plain:
            return path
        return next((template for template, pattern in self.patterns if pattern.match(path)), "other")

    def response(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class Metered:
    """Counts every HTTP request through ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception before any response
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.in_flight.dec()
            route = self.metrics.route(scope)
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
