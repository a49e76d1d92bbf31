"""A model's URL as a Hugging Face Inference Endpoint: ``POST /models/{name}``, and TEI's routes beneath it.

Hugging Face's ``InferenceClient(model=URL)`` (and every framework that wraps it) posts one model's task to one
URL: JSON ``{"inputs": ..., "parameters": {...}}``, or an image's or a recording's raw bytes. This gateway serves
many models behind one port, so each gets its own URL, and its task (from the model's config) says how the body
is read and which of Hugging Face's task shapes the answer takes. The parameters of Hugging Face's task specs are
honoured where the template has them (``top_k``, ``candidate_labels``, ``aggregation_strategy``,
``max_new_tokens``, ``return_timestamps``, ...); any other is a 400 that names it, never dropped in silence.

Beneath the same URL, TEI's routes serve that model: ``/models/{name}/embed``, ``/predict``, ``/rerank``,
``/similarity``, ``/tokenize``, ``/decode`` and ``GET /models/{name}/info``. Errors are TEI's shape
(``{"error", "error_type"}``), as for TEI's routes.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tritonhf.errors import ClientError, InvalidInputError
from tritonhf.sdk import AsyncClient
from tritonhf.serve import schemas, tei
from tritonhf.serve.answers import TeiError, documented
from tritonhf.serve.errors import GatewayError, refused
from tritonhf.serve.shared import client_of, model_for, open_stream, sse, streamed, unless_disconnected
from tritonhf.tasks import ALL_LABELS

router = APIRouter()
_MASK = re.compile(r"\[MASK\]|<mask>")


@dataclass(frozen=True)
class Call:
    """One request to a model's URL: the model, what it was sent (``inputs``: JSON, or the body's bytes), the
    task's ``parameters``, and the whole JSON body (feature-extraction's fields sit at its root)."""

    request: Request
    client: AsyncClient
    name: str
    inputs: Any
    parameters: dict[str, Any]
    body: dict[str, Any]


Handler = Callable[[Call], Awaitable[Any]]


def _take(parameters: Mapping[str, Any], allowed: tuple[str, ...], task: str) -> dict[str, Any]:
    unknown = sorted(set(parameters) - set(allowed))
    if unknown:
        raise refused(f"parameters.{unknown[0]}", f"is not taken by this {task} model (it takes: "
                      f"{', '.join(allowed) or 'no parameters'}); send it without.")  # fmt: skip
    return {key: value for key, value in parameters.items() if value is not None}


def _text(inputs: Any, task: str) -> str:
    if not isinstance(inputs, str) or not inputs:
        raise refused("inputs", f"must be a non-empty text for a {task} model.")
    return inputs


def _texts(inputs: Any, task: str) -> list[str]:
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
        raise refused("inputs", f"must be a non-empty text or list of texts for a {task} model.")
    return texts


def _binary(inputs: Any, what: str) -> bytes:
    """Raw bytes (the body itself), or base64 in ``inputs`` (what InferenceClient sends with parameters)."""
    if isinstance(inputs, bytes):
        return inputs
    if isinstance(inputs, str) and inputs:
        try:
            return base64.b64decode(inputs.split(",", 1)[1] if inputs.startswith("data:") else inputs, validate=True)
        except (binascii.Error, ValueError) as error:
            raise refused("inputs", f"is not base64 ({error}): send the {what}'s bytes, or base64.") from error
    raise refused("inputs", f"must be the {what}'s bytes (the body) or base64 in 'inputs'.")


def _int(parameters: Mapping[str, Any], key: str) -> int | None:
    value = parameters.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise refused(f"parameters.{key}", f"must be a positive integer, not {value!r}.")
    return value


def _labels(parameters: Mapping[str, Any]) -> list[str] | None:
    labels = parameters.get("candidate_labels")
    if labels is None:
        return None
    if isinstance(labels, str):
        labels = [label.strip() for label in labels.split(",") if label.strip()]
    if not isinstance(labels, list) or not labels or not all(isinstance(label, str) and label for label in labels):
        raise refused("parameters.candidate_labels", "must be a non-empty list of labels.")
    return labels


async def _classification(call: Call) -> Any:
    options = _take(call.parameters, ("top_k", "function_to_apply"), "text-classification")
    if options.get("function_to_apply", "softmax") not in ("softmax", "sigmoid"):
        raise refused("parameters.function_to_apply", "is fixed by the model's head here (softmax or sigmoid).")
    texts = _texts(call.inputs, "text-classification")
    found = await call.client.classify(texts, model=call.name, top_k=_int(options, "top_k") or ALL_LABELS)
    return [[{"label": c.label, "score": c.score} for c in labels] for labels in found]


async def _entities(call: Call) -> Any:
    options = _take(call.parameters, ("aggregation_strategy",), "token-classification")
    texts = _texts(call.inputs, "token-classification")
    found = await call.client.ner(texts, model=call.name, aggregation=options.get("aggregation_strategy"))
    rows = [[{"entity_group": e.entity_group, "score": e.score, "word": e.word, "start": e.start, "end": e.end}
             for e in entities] for entities in found]  # fmt: skip
    return rows[0] if isinstance(call.inputs, str) else rows


async def _embeddings(call: Call) -> Any:
    """TEI's /embed body (InferenceClient sends ``normalize``, ``truncate``... at the root; ``parameters`` too)."""
    fields = {key: value for key, value in call.body.items() if key not in ("inputs", "parameters")}
    given = _take({**call.parameters, **fields}, ("normalize", "truncate", "truncation_direction", "prompt_name"),
                  "feature-extraction")  # fmt: skip
    body = tei.parsed_body(schemas.TeiEmbedBody, {**given, "inputs": call.inputs, "model": call.name})
    return await tei.embed(body, call.request)


async def _similarity(call: Call) -> Any:
    _take(call.parameters, (), "sentence-similarity")
    body = tei.parsed_body(schemas.TeiSimilarityBody, {"inputs": call.inputs, "model": call.name})
    return await tei.similarity(body, call.request)


async def _fill_mask(call: Call) -> Any:
    options = _take(call.parameters, ("top_k",), "fill-mask")
    texts = _texts(call.inputs, "fill-mask")
    found = await call.client.fill_mask(texts, model=call.name, top_k=_int(options, "top_k") or 5)
    rows = [[{"score": c.score, "token_str": c.token, "sequence": _MASK.sub(c.token.strip(), text, count=1)}
             for c in candidates] for text, candidates in zip(texts, found)]  # fmt: skip
    return rows[0] if isinstance(call.inputs, str) else rows


async def _answer(call: Call) -> Any:
    options = _take(call.parameters, ("top_k",), "question-answering")
    given = call.inputs if isinstance(call.inputs, dict) else {}
    question, context = given.get("question"), given.get("context")
    if not (isinstance(question, str) and question and isinstance(context, str) and context):
        raise refused("inputs", 'must be {"question": ..., "context": ...} for a question-answering model.')
    top_k = _int(options, "top_k")
    found = await call.client.answer(question, context, model=call.name, top_k=top_k or 1)
    answers = found if isinstance(found, list) else [found]
    shaped = [{"answer": a.text, "score": a.score, "start": a.start, "end": a.end} for a in answers]
    return shaped if top_k and top_k > 1 else shaped[0]


_GENERATE = ("max_new_tokens", "temperature", "top_p", "seed", "stop", "stop_sequences", "do_sample", "truncate",
             "return_full_text", "details", "decoder_input_details")  # fmt: skip


def _sampling(parameters: Mapping[str, Any], task: str) -> dict[str, Any]:
    """Hugging Face's generation parameters as the SDK's ``Sampling``; what cannot be honoured is a 400."""
    options = _take(parameters, _GENERATE, task)
    for key in ("return_full_text", "details", "decoder_input_details"):
        if options.get(key):
            raise refused(f"parameters.{key}", "is not served: the answer is the new text only.")
    if options.get("truncate") is not None:
        raise refused("parameters.truncate", "(a token count) is not served: a prompt past the context is a 400.")
    sampling = {"max_tokens": options.get("max_new_tokens"), "temperature": options.get("temperature"),
                "top_p": options.get("top_p"), "seed": options.get("seed"),
                "stop": options.get("stop") or options.get("stop_sequences") or None}  # fmt: skip
    if options.get("do_sample") is False:
        sampling["temperature"] = 0.0
    return {key: value for key, value in sampling.items() if value is not None}


async def _text2text(call: Call) -> Any:
    """Summarization and translation (one text2text model does either): both of Hugging Face's keys."""
    given = dict(call.parameters)
    generate = given.pop("generate_parameters", None) or given.pop("generation_parameters", None) or {}
    _take({k: v for k, v in given.items() if k != "clean_up_tokenization_spaces"}, (), "text2text-generation")
    sampling = _sampling(generate, "text2text-generation")
    text = await call.client.summarize(_text(call.inputs, "text2text-generation"), model=call.name, **sampling)
    return [{"summary_text": text, "translation_text": text, "generated_text": text}]


async def _zero_shot(call: Call) -> Any:
    options = _take(call.parameters, ("candidate_labels", "multi_label"), "zero-shot-classification")
    multi_label = options.get("multi_label", False)
    if not isinstance(multi_label, bool):
        raise refused("parameters.multi_label", "must be true or false.")
    text = _text(call.inputs, "zero-shot-classification")
    try:
        found = await call.client.zero_shot(text, model=call.name, labels=_labels(options), multi_label=multi_label)
    except InvalidInputError as error:
        if multi_label and "MULTI_LABEL" in str(error):  # the model's own words, said of the field the client sent
            raise refused(
                "parameters.multi_label", "needs an entailment (NLI) model; this one's scores sum to 1."
            ) from (error)
        raise
    return [{"label": label, "score": score} for label, score in zip(found.labels, found.scores)]


async def _image(call: Call) -> Any:
    options = _take(call.parameters, ("top_k", "function_to_apply"), "image-classification")
    if options.get("function_to_apply", "softmax") != "softmax":
        raise refused("parameters.function_to_apply", "is fixed by the model's head here (softmax).")
    image = _binary(call.inputs, "image")
    found = await call.client.classify_images(image, model=call.name, top_k=_int(options, "top_k") or 5)
    return [{"label": c.label, "score": c.score} for c in found]


async def _image_text(call: Call) -> Any:
    options = _take(call.parameters, ("candidate_labels",), "zero-shot-image-classification")
    found = await call.client.zero_shot_images(_binary(call.inputs, "image"), model=call.name, labels=_labels(options))
    return [{"label": label, "score": score} for label, score in zip(found.labels, found.scores)]


async def _speech(call: Call) -> Any:
    options = _take(call.parameters, ("return_timestamps", "language", "task"), "automatic-speech-recognition")
    timestamps = bool(options.get("return_timestamps"))
    speech = {key: options[key] for key in ("language", "task") if key in options}
    audio = _binary(call.inputs, "recording")
    found = await call.client.transcribe(audio, model=call.name, timestamps=timestamps, **speech)
    answer: dict[str, Any] = {"text": found.text}
    if timestamps:
        answer["chunks"] = [{"text": s.text, "timestamp": [s.start, s.end]} for s in found.segments]
    return answer


async def _generation(call: Call) -> Any:
    """``[{"generated_text"}]``, or with ``"stream": true`` TGI's events (one token object per chunk)."""
    prompt = _text(call.inputs, "text-generation")
    sampling = _sampling(call.parameters, "text-generation")
    stream, first = await open_stream(call.client.generate(prompt, model=call.name, stream=True, **sampling))
    if not call.body.get("stream"):
        try:
            return [{"generated_text": "".join([chunk async for chunk in streamed(stream, first)])}]
        except ClientError as error:
            raise GatewayError.of_tei(error, "inputs") from error
        finally:
            await stream.aclose()

    async def events() -> AsyncIterator[dict[str, Any]]:
        text = ""
        async for index, chunk in _numbered(streamed(stream, first)):
            text += chunk
            token = {"id": 0, "text": chunk, "logprob": 0.0, "special": False}
            yield {"index": index, "token": token, "generated_text": None, "details": None}
        usage = stream.usage
        end = {"finish_reason": {"stop": "eos_token"}.get(stream.finish_reason or "", stream.finish_reason),
               "generated_tokens": usage.completion_tokens if usage else 0}  # fmt: skip
        token = {"id": 0, "text": "", "logprob": 0.0, "special": True}
        yield {"index": -1, "token": token, "generated_text": text, "details": end}

    return sse(events(), stream, done=False, tei=True)


async def _numbered(chunks: AsyncIterator[str]) -> AsyncIterator[tuple[int, str]]:
    index = 0
    async for chunk in chunks:
        index += 1
        yield index, chunk


HANDLERS: dict[str, Handler] = {
    "text-classification": _classification,
    "token-classification": _entities,
    "feature-extraction": _embeddings,
    "fill-mask": _fill_mask,
    "question-answering": _answer,
    "text2text-generation": _text2text,
    "zero-shot-classification": _zero_shot,
    "image-classification": _image,
    "zero-shot-image-classification": _image_text,
    "automatic-speech-recognition": _speech,
    "text-generation": _generation,
}


async def _body(request: Request) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(inputs, parameters, the whole JSON body): JSON as Hugging Face sends it, else the raw bytes as ``inputs``."""
    raw = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json" or (not kind and raw[:1] in (b"{", b"[")):
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise refused("body", f"is not JSON ({error}).") from error
        if not isinstance(body, dict) or "inputs" not in body:
            raise refused("inputs", 'is missing: send {"inputs": ..., "parameters": {...}}, or an image\'s or a '
                          "recording's bytes as the body.")  # fmt: skip
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise refused("parameters", "must be an object.")
        return body["inputs"], parameters, body
    if not raw:
        raise refused("body", "is empty: send the image's or recording's bytes, or JSON with 'inputs'.")
    return raw, {}, {}


@router.post("/models/{name}", response_model=None, responses=documented(Any, TeiError))
async def endpoint(name: str, request: Request) -> Any:
    """The model's Inference Endpoint: its task's Hugging Face request and answer shapes."""
    client = client_of(request)
    name = await model_for(client, name, (*HANDLERS, "sentence-similarity"), f"/models/{name}")
    task = {m.name: m.task for m in await client.models()}.get(name) or ""
    inputs, parameters, body = await _body(request)
    handler = HANDLERS.get(task)
    if task == "feature-extraction" and isinstance(inputs, dict):
        handler = _similarity  # Hugging Face's sentence-similarity task, on an embedding model
    if handler is None:
        raise refused("model", f"'{name}' is a {task} model; its routes are beneath this URL "
                      f"(/models/{name}/rerank for a reranker).")  # fmt: skip
    started = time.perf_counter()
    try:
        found = await unless_disconnected(request, handler(Call(request, client, name, inputs, parameters, body)))
    except ClientError as error:
        raise GatewayError.of_tei(error, "inputs") from error
    if isinstance(found, Response):
        return found
    response = JSONResponse(found)
    response.headers["x-compute-time"] = f"{time.perf_counter() - started:.4f}"
    return response


# TEI's routes beneath a model's URL: the same handlers, the model named by the URL.


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as error:
        raise refused("body", f"is not JSON ({error}).") from error
    if not isinstance(body, dict):
        raise refused("body", "must be a JSON object.")
    return body


TEI_ROUTES: dict[str, tuple[Callable[..., Awaitable[Any]], type[Any]]] = {
    "embed": (tei.embed, schemas.TeiEmbedBody),
    "embed_all": (tei.embed_all, schemas.TeiEmbedBody),
    "predict": (tei.predict, schemas.TeiPredictBody),
    "rerank": (tei.rerank, schemas.TeiRerankBody),
    "similarity": (tei.similarity, schemas.TeiSimilarityBody),
    "tokenize": (tei.tokenize, schemas.TeiTokenizeBody),
    "decode": (tei.decode, schemas.TeiDecodeBody),
}


@router.post("/models/{name}/{route}", response_model=None, responses=documented(Any, TeiError))
async def beneath(name: str, route: str, request: Request) -> Any:
    """TEI's /embed, /predict, /rerank, /similarity, /tokenize and /decode for the model of this URL."""
    if route not in TEI_ROUTES:
        raise GatewayError(404, f"/models/{name}/{route} is not a route; beneath a model's URL: "
                           f"{', '.join(TEI_ROUTES)} and info.", param="route", code="not_found")  # fmt: skip
    handler, kind = TEI_ROUTES[route]
    body = await _json(request)
    if body.get("model") not in (None, name):
        raise refused("model", f"is '{body['model']}', but this URL serves '{name}'.")
    return await handler(tei.parsed_body(kind, {**body, "model": name}), request)


@router.get("/models/{name}/info", response_model=None, responses=documented(dict[str, Any], TeiError))
async def model_info(name: str, request: Request) -> dict[str, Any]:
    return await tei.info(request, model=name)
