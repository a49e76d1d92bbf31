"""Rerank in the shape retrieval frameworks speak: Cohere's and Jina's ``POST /v1/rerank`` (and Cohere's
``/v2/rerank``), over the gallery's text-ranking models.

LlamaIndex, LangChain, Dify and Open WebUI call a reranker this way: ``model``, ``query``, ``documents`` (strings or
``{"text": ...}``), ``top_n``, ``return_documents``; the answer is ``{"results": [{"index", "relevance_score",
"document": {"text"}}]}``, best first. The scores are the template's, as the SDK's ``rerank`` and TEI's ``/rerank``
return them. Documents are sent as they are: a text past the model's window is a 400 (``truncate: true``, not
Cohere's, cuts it instead), never cut unasked.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request

from tritonhf.errors import ClientError
from tritonhf.sdk import Ranked
from tritonhf.serve.answers import OpenAIError, RerankList, documented
from tritonhf.serve.errors import GatewayError, empty
from tritonhf.serve.jsonbody import FastJSONResponse
from tritonhf.serve.schemas import RerankBody
from tritonhf.serve.shared import check_count, check_texts, check_tokens, client_of, model_for, unless_disconnected

router = APIRouter()


async def rank(
    request: Request,
    model: str | None,
    query: str,
    texts: list[str],
    param: str,
    truncate: bool,
    top_n: int | None = None,
    tei: bool = False,
) -> list[Ranked]:
    """The checks every rerank route makes (empty query, input count, Unicode, tokens), then the template's ranking;
    errors in the route family's shape (``tei``: TEI's 413 for a too-long text, else OpenAI's 400)."""
    if not query:
        raise empty("query")
    check_count(request, len(texts), param)
    check_texts([query], "query")
    check_texts(texts, param)
    client = client_of(request)
    name = await model_for(client, model, ("text-ranking",), "/rerank" if tei else "/v1/rerank")
    await check_tokens(request, name, [query] * len(texts), texts, truncate=truncate)
    try:
        return await unless_disconnected(
            request, client.rerank(query, texts, model=name, top_n=top_n, truncate=truncate)
        )
    except ClientError as error:
        raise (GatewayError.of_tei if tei else GatewayError.of)(error, param) from error


@router.post("/v1/rerank", response_model=None, responses=documented(RerankList, OpenAIError))
@router.post("/v2/rerank", response_model=None, responses=documented(RerankList, OpenAIError))
async def rerank(body: RerankBody, request: Request) -> FastJSONResponse:
    texts = [item if isinstance(item, str) else item.text for item in body.documents]
    ranked = await rank(request, body.model, body.query, texts, "documents", body.truncate, body.top_n)
    results: list[dict[str, Any]] = []
    for found in ranked:
        item: dict[str, Any] = {"index": found.index, "relevance_score": found.score}
        if body.return_documents:
            item["document"] = {"text": found.document}
        results.append(item)
    meta = {"api_version": {"version": "2" if request.url.path.startswith("/v2/") else "1"},
            "billed_units": {"search_units": 1}}  # fmt: skip
    name = body.model
    return FastJSONResponse({"id": str(uuid.uuid4()), "model": name, "results": results, "meta": meta})
