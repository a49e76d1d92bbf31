"""The gateway's app: one async SDK client to Triton (gRPC), OpenAI and TEI routes, auth, errors.

``create_app(url)`` builds it; ``run`` serves it with uvicorn. Bound to loopback by default;
beyond loopback every route but /health requires ``Authorization: Bearer KEY`` (compared in
constant time). The key comes from a file or the environment, never from a command line.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from tritonhf.errors import ClientError
from tritonhf.sdk import AsyncClient
from tritonhf.serve import openai, tei
from tritonhf.serve.errors import GatewayError

OPEN_PATHS = ("/health",)


def create_app(url: str, api_key: str | None = None, timeout: float = 300.0, concurrency: int = 64) -> FastAPI:
    """The gateway for the Triton server at ``url``; ``api_key`` (when set) guards every route but /health."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.client = AsyncClient(url, timeout=timeout, concurrency=concurrency)
        try:
            yield
        finally:
            await app.state.client.close()

    app = FastAPI(
        title="tritonhf gateway", description="OpenAI- and TEI-compatible routes over Triton", lifespan=lifespan
    )
    app.state.api_key = api_key
    app.include_router(openai.router)
    app.include_router(tei.router)

    @app.middleware("http")
    async def require_key(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        key = request.app.state.api_key
        if key and request.url.path not in OPEN_PATHS:
            given = request.headers.get("authorization", "")
            token = given[7:] if given[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode(), str(key).encode()):
                error = GatewayError(401, "Missing or wrong API key: send Authorization: Bearer KEY.",
                                     "authentication_error", None, "invalid_api_key")  # fmt: skip
                return _error_response(request, error)
        return await call_next(request)

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, error: GatewayError) -> JSONResponse:
        return _error_response(request, error)

    @app.exception_handler(ClientError)
    async def client_error(request: Request, error: ClientError) -> JSONResponse:
        return _error_response(request, GatewayError.of(error))

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

    return app


def _error_response(request: Request, error: GatewayError) -> JSONResponse:
    body = error.openai_body() if request.url.path.startswith("/v1/") else error.tei_body()
    return JSONResponse(body, status_code=error.status)


def run(url: str, host: str = "127.0.0.1", port: int = 9000, api_key: str | None = None) -> None:
    """Serve the gateway with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(url, api_key), host=host, port=port, log_level="warning", lifespan="on")
