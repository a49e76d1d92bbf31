"""Hugging Face text-embeddings-inference (TEI) routes: /embed, /predict, /rerank.

TEI serves one model; here ``model`` may name one, else the single ready model of the task
is used (a clear error when there are several). Shapes follow TEI: /embed returns a list of
vectors, /predict a list of {label, score} per input (all labels, best first), /rerank a list
of {index, score[, text]} best first.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tritonhf.errors import ClientError
from tritonhf.serve.errors import GatewayError, refused
from tritonhf.serve.openai import check_count, check_texts, client_of
from tritonhf.serve.schemas import TeiEmbedBody, TeiPredictBody, TeiRerankBody

router = APIRouter()
ALL_LABELS = 10_000  # top_k for "every label": the template returns as many as the model has


@router.post("/embed")
async def embed(body: TeiEmbedBody, request: Request) -> JSONResponse:
    check_count(request, 1 if isinstance(body.inputs, str) else len(body.inputs), "inputs")
    check_texts([body.inputs] if isinstance(body.inputs, str) else body.inputs, "inputs")
    try:
        vectors = await client_of(request).embed(body.inputs, model=body.model, normalize=body.normalize,
                                                 truncate=body.truncate)  # fmt: skip
    except ClientError as error:
        raise GatewayError.of(error, "inputs") from error
    return JSONResponse(vectors.tolist())  # not through FastAPI's per-float response validation


@router.post("/predict")
async def predict(body: TeiPredictBody, request: Request) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
    if body.raw_scores:
        raise refused("raw_scores", "is not supported: the classification template returns probabilities.")
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    check_count(request, len(texts), "inputs")
    check_texts(texts, "inputs")
    try:
        ranked = await client_of(request).classify(texts, model=body.model, top_k=ALL_LABELS, truncate=body.truncate)
    except ClientError as error:
        raise GatewayError.of(error, "inputs") from error
    answers = [[{"label": c.label, "score": c.score} for c in labels] for labels in ranked]
    return answers[0] if isinstance(body.inputs, str) else answers


@router.post("/rerank")
async def rerank(body: TeiRerankBody, request: Request) -> list[dict[str, Any]]:
    if body.raw_scores:
        raise refused("raw_scores", "is not supported: the reranker returns each document's relevance score.")
    check_count(request, len(body.texts), "texts")
    check_texts([body.query], "query")
    check_texts(body.texts, "texts")
    try:
        ranked = await client_of(request).rerank(body.query, body.texts, model=body.model, truncate=body.truncate)
    except ClientError as error:
        raise GatewayError.of(error, "texts") from error
    return [{"index": r.index, "score": r.score, **({"text": r.document} if body.return_text else {})} for r in ranked]
