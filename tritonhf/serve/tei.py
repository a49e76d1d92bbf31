"""Hugging Face text-embeddings-inference (TEI) routes: /embed, /predict, /rerank, /similarity, /tokenize, /decode,
/info.

TEI serves one model; here ``model`` may name one, else the single ready model of the route's
task is used (a clear error when there are none or several). Shapes follow TEI: /embed returns
a list of vectors, /predict a list of {label, score} per input (all labels, best first; pairs
as ``[[text, text_pair], ...]``), /rerank a list of {index, score[, text]} best first, /tokenize
a list of tokens per input. A client that disconnects cancels its Triton requests. As in TEI,
``truncate`` defaults to false: a text past the model's window is a 413, never cut unasked;
with ``truncate: true`` it is cut and the ``X-Truncated-Inputs`` header lists which inputs were
(TEI's bodies have no room for it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from tritonhf._version import __version__
from tritonhf.errors import ClientError
from tritonhf.serve import shared
from tritonhf.serve.answers import Label, Ranked, TeiError, Token, documented
from tritonhf.serve.errors import GatewayError, empty, refused
from tritonhf.serve.jsonbody import FastJSONResponse
from tritonhf.serve.rerank import rank
from tritonhf.serve.schemas import (
    TeiDecodeBody,
    TeiEmbedBody,
    TeiPredictBody,
    TeiRerankBody,
    TeiSimilarityBody,
    TeiTokenizeBody,
)
from tritonhf.serve.tokenizers import tokens_of
from tritonhf.tasks import ALL_LABELS

router = APIRouter()
BodyT = TypeVar("BodyT", bound=BaseModel)
TRUNCATED_HEADER = "X-Truncated-Inputs"
TEI_TASKS = ("feature-extraction", "text-classification", "text-ranking")


def _texts(inputs: str | Sequence[str], param: str = "inputs") -> list[str]:
    texts = [inputs] if isinstance(inputs, str) else list(inputs)
    if not texts or any(not text for text in texts):
        raise empty(param)
    return texts


def _said(response: JSONResponse, truncated: Sequence[bool]) -> JSONResponse:
    cut = [str(index) for index, flag in enumerate(truncated) if flag]
    if cut:
        response.headers[TRUNCATED_HEADER] = ",".join(cut)
    return response


async def _embedding_request(body: TeiEmbedBody, request: Request, route: str) -> tuple[list[str], str]:
    """(texts, model) of an /embed or /embed_all body, checked as TEI checks them."""
    if body.truncation_direction.lower() != "right":
        raise refused("truncation_direction", "can only be Right here: a text past the window keeps its start.")
    texts = _texts(body.inputs)
    shared.check_count(request, len(texts), "inputs")
    shared.check_texts(texts, "inputs")
    name = await shared.model_for(shared.client_of(request), body.model, ("feature-extraction",), route)
    await shared.check_tokens(request, name, texts, truncate=body.truncate)
    return texts, name


@router.post("/embed", response_model=None, responses=documented(list[list[float]], TeiError))
async def embed(body: TeiEmbedBody, request: Request) -> JSONResponse:
    texts, name = await _embedding_request(body, request, "/embed")
    try:
        embedding = shared.coalescer_of(request).embeddings(
            texts, model=name, normalize=body.normalize, truncate=body.truncate, prompt_name=body.prompt_name
        )
        result = await shared.unless_disconnected(request, embedding)
    except ClientError as error:
        raise GatewayError.of_tei(error, "inputs") from error
    # A response of its own, not through FastAPI's per-float response validation.
    return _said(FastJSONResponse(result.vectors), result.truncated)


@router.post("/embed_all", response_model=None, responses=documented(list[list[list[float]]], TeiError))
async def embed_all(body: TeiEmbedBody, request: Request) -> JSONResponse:
    """TEI's /embed_all: every token's vector per input, neither pooled nor normalised."""
    if body.normalize and "normalize" in body.model_fields_set:  # never dropped in silence
        raise refused("normalize", "is not taken by /embed_all: token vectors are returned as the model makes them.")
    texts, name = await _embedding_request(body, request, "/embed_all")
    try:
        work = shared.client_of(request).embed_tokens(
            texts, model=name, truncate=body.truncate, prompt_name=body.prompt_name
        )
        found = await shared.unless_disconnected(request, work)
    except ClientError as error:
        raise GatewayError.of_tei(error, "inputs") from error
    return FastJSONResponse(found)


def _pairs(inputs: str | list[str] | list[list[str]]) -> tuple[list[str], list[str] | None]:
    """(texts, pairs or None): a text, texts, or [[text, text_pair], ...] (one-element lists: no pair)."""
    if isinstance(inputs, str) or all(isinstance(item, str) for item in inputs):
        return _texts(inputs), None  # type: ignore[arg-type]
    if not all(isinstance(item, list) and len(item) in (1, 2) for item in inputs):
        raise refused("inputs", "must be a text, a list of texts, or a list of [text, text_pair] lists.")
    lists: list[list[str]] = inputs  # type: ignore[assignment]
    if any(len(item) != len(lists[0]) for item in lists):
        raise refused("inputs", "mixes single texts and pairs: send pairs in one request, single texts in another.")
    texts = _texts([item[0] for item in lists])
    return texts, ([item[1] for item in lists] if len(lists[0]) == 2 else None)


@router.post("/predict", response_model=None, responses=documented(list[Label] | list[list[Label]], TeiError))
async def predict(body: TeiPredictBody, request: Request) -> JSONResponse:
    if body.raw_scores:
        raise refused("raw_scores", "is not supported: the classification template returns probabilities.")
    texts, pairs = _pairs(body.inputs)
    shared.check_count(request, len(texts), "inputs")
    shared.check_texts(texts + (pairs or []), "inputs")
    client = shared.client_of(request)
    name = await shared.model_for(client, body.model, ("text-classification",), "/predict")
    await shared.check_tokens(request, name, texts, pairs, truncate=body.truncate)
    try:
        work = (
            client.classify(texts, model=name, top_k=ALL_LABELS, truncate=body.truncate)
            if pairs is None
            else client.classify_pairs(list(zip(texts, pairs)), model=name, truncate=body.truncate)
        )
        ranked = await shared.unless_disconnected(request, work)
    except ClientError as error:
        raise GatewayError.of_tei(error, "inputs") from error
    answers = [[{"label": c.label, "score": c.score} for c in labels] for labels in ranked]
    cut = [bool(labels and labels[0].truncated) for labels in ranked]
    return _said(FastJSONResponse(answers[0] if isinstance(body.inputs, str) else answers), cut)


@router.post("/rerank", response_model=None, responses=documented(list[Ranked], TeiError))
async def rerank(body: TeiRerankBody, request: Request) -> JSONResponse:
    if body.raw_scores:
        raise refused("raw_scores", "is not supported: the reranker returns each document's relevance score.")
    texts = _texts(body.texts, "texts")
    ranked = await rank(request, body.model, body.query, texts, "texts", body.truncate, tei=True)
    answer = [
        {"index": r.index, "score": r.score, **({"text": r.document} if body.return_text else {})} for r in ranked
    ]
    cut = [False] * len(texts)
    for r in ranked:
        cut[r.index] = r.truncated
    return _said(FastJSONResponse(answer), cut)


@router.post("/", response_model=None, responses=documented(list[Any], TeiError))
async def root(request: Request) -> Any:
    """TEI's root route, which Hugging Face's ``InferenceClient(model=URL)`` posts to: a ``source_sentence`` body is
    /similarity, a ``query`` with ``texts`` is /rerank, anything else goes to the one embedding model served (/embed),
    else to the one classifier (/predict); with several, a 400 that names them and the routes that take ``model``."""
    try:
        body = await request.json()
    except ValueError as exc:
        raise refused("body", 'must be a JSON object such as {"inputs": "a text"}.') from exc
    if not isinstance(body, dict):
        raise refused("body", 'must be a JSON object such as {"inputs": "a text"}.')
    if isinstance(body.get("inputs"), dict):
        return await similarity(parsed_body(TeiSimilarityBody, body), request)
    if "query" in body and "texts" in body:
        return await rerank(parsed_body(TeiRerankBody, body), request)
    ready = [m for m in await shared.client_of(request).models() if m.ready and m.task in TEI_TASKS]
    kinds = {m.task for m in ready if body.get("model") in (None, m.name)}
    if body.get("model") is None and len(ready) > 1:
        served = ", ".join(sorted(f"{m.name} ({m.task}) at /models/{m.name}" for m in ready))
        raise GatewayError(400, f"POST / needs one served model and this gateway serves several: {served}. Give a "
                           "Hugging Face client that model's URL (its /models/NAME), send 'model' in the body, or use "
                           "/embed, /predict or /rerank with 'model'.", param="model",
                           code="model_required")  # fmt: skip
    if kinds == {"text-classification"}:
        return await predict(parsed_body(TeiPredictBody, body), request)
    return await embed(parsed_body(TeiEmbedBody, body), request)


def parsed_body(kind: type[BodyT], body: dict[str, Any]) -> BodyT:
    """``body`` as ``kind``; a 400 naming the first field that does not fit (as the typed routes answer)."""
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first.get("loc", ())) or None
        raise GatewayError(400, f"{param}: {first.get('msg', 'invalid')}", param=param, code="invalid_value") from exc


@router.post("/similarity", response_model=None, responses=documented(list[float], TeiError))
async def similarity(body: TeiSimilarityBody, request: Request) -> JSONResponse:
    """Each sentence's cosine similarity to the source sentence, from the model's normalised embeddings."""
    texts = _texts([body.inputs.source_sentence, *body.inputs.sentences], "inputs")
    shared.check_count(request, len(texts), "inputs.sentences")
    shared.check_texts(texts, "inputs")
    name = await shared.model_for(shared.client_of(request), body.model, ("feature-extraction",), "/similarity")
    await shared.check_tokens(request, name, texts, truncate=body.truncate)
    try:
        work = shared.coalescer_of(request).embeddings(texts, model=name, normalize=True, truncate=body.truncate)
        result = await shared.unless_disconnected(request, work)
    except ClientError as error:
        raise GatewayError.of_tei(error, "inputs") from error
    vectors = np.asarray(result.vectors, dtype=np.float64)
    return _said(FastJSONResponse((vectors[1:] @ vectors[0]).tolist()), result.truncated[1:])


@router.post("/tokenize", response_model=None, responses=documented(list[list[Token]], TeiError))
async def tokenize(body: TeiTokenizeBody, request: Request) -> list[list[dict[str, Any]]]:
    texts = _texts(body.inputs)
    shared.check_count(request, len(texts), "inputs")
    shared.check_texts(texts, "inputs")
    name = await shared.model_for(shared.client_of(request), body.model, (*TEI_TASKS, "text-generation"), "/tokenize")
    tokenizer = await _tokenizer(request, name)
    return [[token.__dict__ for token in tokens_of(tokenizer, text, body.add_special_tokens)] for text in texts]


@router.post("/decode", response_model=None, responses=documented(list[str], TeiError))
async def decode(body: TeiDecodeBody, request: Request) -> list[str]:
    """Token ids back to text, with the model's tokenizer (one list of ids, or one list per text)."""
    lists = body.ids if isinstance(body.ids[0], list) else [body.ids]
    name = await shared.model_for(shared.client_of(request), body.model, (*TEI_TASKS, "text-generation"), "/decode")
    tokenizer = await _tokenizer(request, name)
    size = len(tokenizer)
    for index, ids in enumerate(lists):
        bad = [i for i in ids if not 0 <= i < size]
        if bad:
            raise refused(f"ids[{index}]" if len(lists) > 1 else "ids", f"holds {bad[0]}, not a token id of "
                          f"'{name}' (0 to {size - 1}).")  # fmt: skip
    return [tokenizer.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in lists]


async def _tokenizer(request: Request, name: str) -> Any:
    tokenizer = await shared.tokenizers_of(request).get(name)
    if tokenizer is None:
        raise GatewayError(501, f"The tokenizer of '{name}' is not readable by this gateway (it needs the model "
                           "repository on its machine).", "server_error", "model", "tokenizer_unavailable")  # fmt: skip
    return tokenizer


@router.get("/info", response_model=None, responses=documented(dict[str, Any], TeiError))
async def info(request: Request, model: str | None = None) -> dict[str, Any]:
    """TEI's /info for the model (``?model=``, or the single one served); the limits this gateway applies."""
    client = shared.client_of(request)
    name = await shared.model_for(client, model, TEI_TASKS, "/info")
    task = {m.name: m.task for m in await client.models()}.get(name)
    tokenizer = await shared.tokenizers_of(request).get(name)
    limits = request.app.state.limits
    kinds = {"feature-extraction": "embedding", "text-classification": "classifier", "text-ranking": "reranker"}
    return {  # TEI's field names; None where this gateway does not know (the model's own repository does)
        "model_id": name,
        "model_sha": None,
        "model_dtype": None,
        "model_type": {kinds.get(task or "", "embedding"): {}},
        "task": task,
        "max_input_length": tokenizer.model_max_length if tokenizer is not None else None,
        "max_batch_tokens": limits.max_batch_tokens,
        "max_batch_tokens_counted": tokenizer is not None,  # without the tokenizer here, not enforced
        "max_batch_requests": None,  # Triton's dynamic batcher decides (the model's max_batch_size)
        "max_client_batch_size": limits.max_client_batch_size,
        "max_concurrent_requests": limits.max_concurrent_requests,
        "auto_truncate": False,  # a text past the window is a 413 unless the request sends truncate
        "tokenization_workers": None,
        "payload_limit": limits.payload_limit,
        "version": __version__,
        "sha": None,
        "docker_label": None,
        "router": "tritonhf",
    }
