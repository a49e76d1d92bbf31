"""Admission before any work: body size (413) and requests in flight (429 with Retry-After).

A plain ASGI middleware (no per-request task group, unlike Starlette's BaseHTTPMiddleware),
so a refusal costs microseconds and never waits for Triton. In flight counts a request from
its arrival to the end of its response, streams included; nothing is queued: beyond the
limit the client is told to come back (TEI's router does the same with its permits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tritonhf.serve.errors import GatewayError
from tritonhf.serve.limits import Limits

OPEN_PATHS = ("/health", "/metrics")  # probes and scrapes are never refused for load
RETRY_AFTER_SECONDS = 1


class Admission:
    def __init__(self, app: ASGIApp, limits: Limits, respond: Callable[[str, GatewayError], JSONResponse]) -> None:
        self.app, self.limits, self.respond = app, limits, respond
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if self.in_flight >= self.limits.max_concurrent_requests:
            error = GatewayError(
                429,
                f"The server is at its limit of {self.limits.max_concurrent_requests} requests in flight; "
                f"retry after {RETRY_AFTER_SECONDS} s.",
                "rate_limit_error",
                code="rate_limit_exceeded",
            )
            await self.respond(path, error)(scope, receive, send)  # with Retry-After
            return
        self.in_flight += 1
        try:
            limit, option = self.limits.body_limit(path)
            body = await self._body(scope, receive, limit)
            if body is None:
                await _drain(scope, receive)
                error = GatewayError(
                    413,
                    f"The request body is larger than the limit of {limit} bytes "
                    f"({option}); send fewer or shorter inputs per request.",
                    code="payload_too_large",
                )
                await self.respond(path, error)(scope, receive, send)
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            self.in_flight -= 1

    async def _body(self, scope: Scope, receive: Receive, limit: int) -> bytes | None:
        """The whole body, or None once it passes ``limit`` (a declared length is checked before reading)."""
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


# A refused body of a declared length is read and dropped, up to this much and this long, before the 413 goes out: a
# client that sends its whole body before reading (Python's urllib) otherwise meets a closed connection ("connection
# reset") instead of the answer. A larger body, or one without a length (chunked), is not read: the connection
# closes after the 413, as before.
DRAIN_BYTES = 16 * 1024 * 1024
DRAIN_SECONDS = 5.0


async def _drain(scope: Scope, receive: Receive) -> None:
    declared = Headers(scope=scope).get("content-length")
    if declared is None or not declared.isdigit() or int(declared) > DRAIN_BYTES:
        return
    deadline = asyncio.get_running_loop().time() + DRAIN_SECONDS
    read = 0
    while read <= DRAIN_BYTES:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), left)
        except asyncio.TimeoutError:
            return
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body once, then the real channel (where a disconnect arrives)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
