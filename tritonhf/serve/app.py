"""The gateway's app: one async SDK client to Triton (gRPC), OpenAI and TEI routes, auth, errors.

``create_app(url)`` builds it; ``run`` serves it with uvicorn. Bound to loopback by default;
beyond loopback every route but /health and the page's static files requires ``Authorization: Bearer KEY`` (compared in
constant time). The key comes from a file or the environment, never from a command line.
"""

from __future__ import annotations

import copy
import hmac
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from tritonhf.errors import ClientError
from tritonhf.sdk import AsyncClient, ModelInfo
from tritonhf.serve import audio, endpoints, openai, page, rerank, responses, shared, tei
from tritonhf.serve.admission import RETRY_AFTER_SECONDS, Admission
from tritonhf.serve.coalesce import Coalescer
from tritonhf.serve.errors import GatewayError, empty, internal_error
from tritonhf.serve.images import CHAT_TASKS
from tritonhf.serve.jsonbody import FastJSONResponse
from tritonhf.serve.limits import Limits
from tritonhf.serve.metrics import GatewayMetrics, Metered
from tritonhf.serve.tei import TEI_TASKS
from tritonhf.serve.tokenizers import Tokenizers
from tritonhf.tasks import ONNX_PART_SUFFIX, SEED_MAX

OPEN_PATHS = ("/health",)
# The routers, in the order the app tries them: routing and metrics both read this one tuple.
ROUTERS = (openai.router, responses.router, tei.router, audio.router, rerank.router, endpoints.router, page.router)
OPENAI_PATHS = ("/v1/", "/v2/")  # routes that answer errors in OpenAI's shape (Cohere's /v2/rerank too); others TEI's
LOG = logging.getLogger("tritonhf.gateway")
# Request bodies whose "model" names a served model of these tasks: /openapi.json lists those names as its enum.
MODEL_TASKS = {
    "ChatBody": CHAT_TASKS,
    "CompletionBody": ("text-generation",),
    "ResponsesBody": CHAT_TASKS,
    "EmbeddingBody": ("feature-extraction", "zero-shot-image-classification"),
    "TeiEmbedBody": ("feature-extraction",),
    "TeiPredictBody": ("text-classification",),
    "TeiRerankBody": ("text-ranking",),
    "RerankBody": ("text-ranking",),
}


# An unreachable Triton is retried this long before a route answers 503 (OpenAI clients retry on their own).
UNREACHABLE_SECONDS = 1.5


def create_app(
    url: str,
    api_key: str | None = None,
    timeout: float = 300.0,
    concurrency: int = 64,
    limits: Limits | None = None,
    repository: Path | None = None,
    metrics_url: str | None = None,
) -> FastAPI:
    """The gateway for the Triton server at ``url``; ``api_key`` (when set) guards every route but /health and the
    page's static files; ``limits`` bound bodies, inputs and tokens per request and requests in flight (TEI's
    defaults when not given); ``repository`` (the served model repository, when on this machine) gives the
    tokenizers; ``metrics_url`` (Triton's metrics) gives the page the templates' own figures."""
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
        openapi_url=None,  # served below, with the served models' names in it
        docs_url=None,
        redoc_url=None,
    )
    for router in ROUTERS:
        app.include_router(router)
    app.state.limits = limits
    app.state.metrics_url = metrics_url
    app.state.tokenizers = Tokenizers(repository)
    app.state.responses = responses.ResponseStore(limits.stored_responses, limits.stored_response_seconds)
    # every route is metered under its own path: the same list the app routes by
    metrics = GatewayMetrics(
        [
            (getattr(route, "path", ""), getattr(route, "path_regex", None))
            for router in ROUTERS
            for route in router.routes
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

    @app.exception_handler(shared.ClientGone)
    async def client_gone(request: Request, error: shared.ClientGone) -> Response:
        """The client left before its answer was ready; its Triton requests were cancelled (nobody reads this)."""
        return Response(status_code=shared.CLIENT_GONE)

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
        if first.get("type") in ("string_too_short", "too_short") and param and first.get("input") in ("", []):
            where = param.split(".")[0]  # "inputs.str", "inputs.list[...]": the field itself
            return _error_response(request, empty(where))  # the words the routes' own checks use
        message = f"{param}: {first.get('msg', 'invalid request')}" if param else str(first.get("msg", "invalid"))
        return _error_response(request, GatewayError(400, message, param=param, code="invalid_value"))

    @app.exception_handler(Exception)
    async def unforeseen(request: Request, error: Exception) -> JSONResponse:
        """Anything no route foresaw: a JSON 500 in the route family's shape, never Starlette's plain-text page,
        with a request id that the gateway's log line carries too, beside the traceback."""
        found = internal_error(LOG, f"{request.method} {request.url.path}", error)
        response = _error_response(request, found)
        response.headers["X-Request-Id"] = str(found.ident)
        return response

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi_schema(request: Request) -> JSONResponse:
        """The routes' schema, each request body's "model" an enum of the served models of its task (read now,
        so it follows models as they load and unload)."""
        try:
            models = await request.app.state.client.models()
        except ClientError:
            models = []  # Triton away: the schema without the enums, rather than no schema
        return JSONResponse(with_model_names(app.openapi(), models))

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="tritonhf gateway")

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


def _exact_integers(node: Any) -> None:
    """Integer bounds as integers: FastAPI's OpenAPI model holds them as floats, and 2**64 - 1 (the seed's maximum)
    comes out as 2**64. Bounds at that float are the seed's; the others are exact."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                value = node.get(key)
                if isinstance(value, float) and value.is_integer():
                    node[key] = SEED_MAX if value == float(SEED_MAX) else int(value)
        for child in node.values():
            _exact_integers(child)
    elif isinstance(node, list):
        for child in node:
            _exact_integers(child)


def with_model_names(schema: dict[str, Any], models: Sequence[ModelInfo]) -> dict[str, Any]:
    """A copy of ``schema`` whose request bodies' "model" lists the ready models of the body's tasks."""
    schema = copy.deepcopy(schema)
    _exact_integers(schema)
    bodies = schema.get("components", {}).get("schemas", {})
    for body, tasks in MODEL_TASKS.items():
        field = bodies.get(body, {}).get("properties", {}).get("model")
        names = _served(models, tasks)
        if field is None or not names:
            continue
        _name_enum(field, names)
        if len(names) > 1 and "model" not in bodies[body].setdefault("required", []):
            bodies[body]["required"].append("model")  # optional only while one model of the task is served
    names = _served(models, TEI_TASKS)
    for parameter in schema.get("paths", {}).get("/info", {}).get("get", {}).get("parameters", []):
        if parameter.get("name") == "model" and names:  # /info's ?model=, as the bodies' "model"
            _name_enum(parameter.get("schema", {}), names)
            parameter["required"] = len(names) > 1
    _model_urls(schema, models)
    return schema


def _model_urls(schema: dict[str, Any], models: Sequence[ModelInfo]) -> None:
    """A model's URL (``/models/{name}``...) names a served model, and the routes beneath it are TEI's: both enums."""
    names = _served(models, (*endpoints.HANDLERS, *TEI_TASKS))
    for path, operations in schema.get("paths", {}).items():
        if not path.startswith("/models/{name}"):
            continue
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("name") == "name" and names:
                    _name_enum(parameter.get("schema", {}), names)
                elif parameter.get("name") == "route":
                    _name_enum(parameter.get("schema", {}), sorted(endpoints.TEI_ROUTES))


def _served(models: Sequence[ModelInfo], tasks: Sequence[str]) -> list[str]:
    return sorted(m.name for m in models if m.ready and m.task in tasks and not m.name.endswith(ONNX_PART_SUFFIX))


def _name_enum(field: dict[str, Any], names: list[str]) -> None:
    for branch in field.get("anyOf", [field]):  # "str | None" is an anyOf with a null branch
        if branch.get("type") == "string":
            branch["enum"] = names


def _error_response(request: Request, error: GatewayError) -> JSONResponse:
    return _error_for_path(request.url.path, error)


def _error_for_path(path: str, error: GatewayError) -> JSONResponse:
    openai_shaped = path.startswith(OPENAI_PATHS) or "/v1/" in path  # a model's URL's OpenAI route too
    body = error.openai_body() if openai_shaped else error.tei_body()
    response = JSONResponse(body, status_code=error.status)
    if error.status in (429, 503):  # overloaded or not ready: when to come back (OpenAI clients honour it)
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class KeyRequired:
    """``Authorization: Bearer KEY`` on every route but /health and the page's static files, compared in constant
    time.

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) runs each
    request in a task group of its own, which cost the embeddings route a third of its CPU.
    """

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.key = app, key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _open(scope):
            given = Headers(scope=scope).get("authorization", "")
            token = given[7:] if given[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode(), self.key):
                error = GatewayError(401, "Missing or wrong API key: send Authorization: Bearer KEY.",
                                     "authentication_error", None, "invalid_api_key")  # fmt: skip
                await _error_for_path(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _open(scope: Scope) -> bool:
    """/health, and the page with its static files (they hold no data: the page asks for the key)."""
    return scope["path"] in OPEN_PATHS or (scope["method"] == "GET" and scope["path"] in page.PAGE_PATHS)


def run(
    url: str,
    host: str = "127.0.0.1",
    port: int = 9000,
    api_key: str | None = None,
    limits: Limits | None = None,
    repository: Path | None = None,
    metrics_url: str | None = None,
) -> None:
    """Serve the gateway with uvicorn until interrupted."""
    import uvicorn

    app = create_app(url, api_key, limits=limits, repository=repository, metrics_url=metrics_url)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")
