"""The gateway's app: one async SDK client to Triton (gRPC), OpenAI and TEI routes, auth, errors.

``create_app(url)`` builds it; ``run`` serves it with uvicorn. Bound to loopback by default;
beyond loopback every route but /health requires ``Authorization: Bearer KEY`` (compared in
constant time). The key comes from a file or the environment, never from a command line.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from tritonhf.errors import ClientError
from tritonhf.sdk import AsyncClient
from tritonhf.serve import audio, openai, tei
from tritonhf.serve.admission import RETRY_AFTER_SECONDS, Admission
from tritonhf.serve.coalesce import Coalescer
from tritonhf.serve.errors import GatewayError
from tritonhf.serve.limits import Limits
from tritonhf.serve.metrics import GatewayMetrics, Metered
from tritonhf.serve.responses import FastJSONResponse
from tritonhf.serve.tokenizers import Tokenizers

OPEN_PATHS = ("/health",)


# An unreachable Triton is retried this long before a route answers 503 (OpenAI clients retry on their own).
UNREACHABLE_SECONDS = 1.5


def create_app(
    url: str,
    api_key: str | None = None,
    timeout: float = 300.0,
    concurrency: int = 64,
    limits: Limits | None = None,
    repository: Path | None = None,
) -> FastAPI:
    """The gateway for the Triton server at ``url``; ``api_key`` (when set) guards every route but /health;
    ``limits`` bound bodies, inputs and tokens per request and requests in flight (TEI's defaults when not
    given); ``repository`` (the served model repository, when on this machine) gives the tokenizers."""
    limits = limits or Limits()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.client = AsyncClient(
            url, timeout=timeout, concurrency=concurrency, unavailable_timeout=UNREACHABLE_SECONDS
        )
        app.state.coalescer = Coalescer(app.state.client)
        try:
            yield
        finally:
            await app.state.client.close()

    app = FastAPI(
        title="tritonhf gateway",
        description="OpenAI- and TEI-compatible routes over Triton",
        lifespan=lifespan,
        default_response_class=FastJSONResponse,
    )
    app.include_router(openai.router)
    app.include_router(tei.router)
    app.include_router(audio.router)
    app.state.limits = limits
    app.state.tokenizers = Tokenizers(repository)
    metrics = GatewayMetrics(
        [
            (getattr(route, "path", ""), getattr(route, "path_regex", None))
            for route in [*openai.router.routes, *tei.router.routes]
        ]
        + [("/health", None), ("/metrics", None)]
    )

    app.add_middleware(Admission, limits=limits, respond=_error_for_path)
    if api_key:  # a request without the key is refused before it counts against the limits
        app.add_middleware(KeyRequired, key=api_key)
    app.add_middleware(Metered, metrics=metrics)  # added last, so outermost: refusals are counted too

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, error: GatewayError) -> JSONResponse:
        return _error_response(request, error)

    @app.exception_handler(openai.ClientGone)
    async def client_gone(request: Request, error: openai.ClientGone) -> Response:
        """The client left before its answer was ready; its Triton requests were cancelled (nobody reads this)."""
        return Response(status_code=openai.CLIENT_GONE)

    @app.exception_handler(ClientError)
    async def client_error(request: Request, error: ClientError) -> JSONResponse:
        return _error_response(request, GatewayError.of(error))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        """404 (no such route), 405 (wrong method) ... in the route family's shape, not FastAPI's {"detail"}."""
        kinds = {404: "not_found_error", 405: "invalid_request_error"}
        return _error_response(
            request, GatewayError(error.status_code, str(error.detail), kinds.get(error.status_code, "server_error"))
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        param = ".".join(str(part) for part in first.get("loc", ())[1:]) or None
        message = f"{param}: {first.get('msg', 'invalid request')}" if param else str(first.get("msg", "invalid"))
        return _error_response(request, GatewayError(400, message, param=param, code="invalid_value"))

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        client: AsyncClient = request.app.state.client
        try:
            await client.wait_ready(timeout=2)
        except ClientError as error:
            raise GatewayError(503, f"Triton is not ready: {error.message}", "server_error") from error
        return {"status": "ok", "triton": client.url}

    @app.get("/metrics")
    async def gateway_metrics() -> Response:
        """The gateway's own counters in Prometheus' text format (Triton's are on its metrics port)."""
        return metrics.response()

    return app


def _error_response(request: Request, error: GatewayError) -> JSONResponse:
    return _error_for_path(request.url.path, error)


def _error_for_path(path: str, error: GatewayError) -> JSONResponse:
    body = error.openai_body() if path.startswith("/v1/") else error.tei_body()
    response = JSONResponse(body, status_code=error.status)
    if error.status in (429, 503):  # overloaded or not ready: when to come back (OpenAI clients honour it)
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class KeyRequired:
    """``Authorization: Bearer KEY`` on every route but /health, compared in constant time.

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) runs each
    request in a task group of its own, which cost the embeddings route a third of its CPU.
    """

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.key = app, key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = Headers(scope=scope).get("authorization", "")
            token = given[7:] if given[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode(), self.key):
                error = GatewayError(401, "Missing or wrong API key: send Authorization: Bearer KEY.",
                                     "authentication_error", None, "invalid_api_key")  # fmt: skip
                await _error_for_path(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def run(
    url: str,
    host: str = "127.0.0.1",
    port: int = 9000,
    api_key: str | None = None,
    limits: Limits | None = None,
    repository: Path | None = None,
) -> None:
    """Serve the gateway with uvicorn until interrupted."""
    import uvicorn

    app = create_app(url, api_key, limits=limits, repository=repository)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")
