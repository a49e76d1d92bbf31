"""OpenAI's routes over Triton: models, chat completions, completions, embeddings.

Each route resolves the model by name and task, calls the async SDK, and answers in
OpenAI's shapes. A streamed answer is opened (and its first chunk read) *before* the HTTP
response starts, so a refused request gets its real status, not a 200 with an error inside;
the events are then framed by FastAPI's own server-sent-events encoder, and a client that
disconnects cancels the generation on the Triton side (the stream is closed).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response

from tritonhf._wire.aio_transport import all_or_none
from tritonhf.errors import ClientError
from tritonhf.sdk import AsyncClient, AsyncTextStream, ModelInfo
from tritonhf.sdk.results import TokenLogprob, ToolCall
from tritonhf.serve.answers import (
    ChatCompletion,
    Completion,
    EmbeddingList,
    ModelCard,
    ModelList,
    OpenAIError,
    documented,
)
from tritonhf.serve.chat import (
    ChatCall,
    ChatStream,
    Streams,
    argument_fragments,
    calls_message,
    chat_param,
    check_unicode,
    choice_seeds,
    completions_param,
    deltas,
    full_text,
    json_format,
    merged,
    open_chats,
    sampling_options,
    stop_list,
    token_logprobs,
    tool_choice_of,
    usage_of,
)
from tritonhf.serve.errors import GatewayError, empty, refused
from tritonhf.serve.images import chat_content, chat_models, image_bytes
from tritonhf.serve.jsonbody import FastJSONResponse
from tritonhf.serve.limits import Limits
from tritonhf.serve.schemas import ChatBody, CompletionBody, EmbeddingBody, GenerationBody, JsonSchemaFormat
from tritonhf.serve.shared import (
    CLIENT_GONE,
    ClientGone,
    check_count,
    check_texts,
    check_tokens,
    client_of,
    coalescer_of,
    model_for,
    open_stream,
    sse,
    streamed,
    unless_disconnected,
)
from tritonhf.tasks import ONNX_PART_SUFFIX

router = APIRouter()


def _generation_options(body: GenerationBody) -> dict[str, Any]:
    """The SDK options of an OpenAI generation body. What this server cannot honour the schema itself bounds to the
    one value served, so it is a 400 naming the field before a route runs."""
    return {**sampling_options(body), "max_tokens": body.max_completion_tokens or body.max_tokens,
            "stop": stop_list(body.stop), "truncate": body.truncate}  # fmt: skip


def _chat_options(body: ChatBody) -> dict[str, Any]:
    """A chat body's SDK options: a generation's, and the keywords for the chat template."""
    return {**_generation_options(body), "chat_template_kwargs": body.chat_template_kwargs or None}


async def _messages(body: ChatBody, limits: Limits) -> tuple[list[dict[str, Any]], int]:
    """The chat's messages as the SDK takes them, and how many images they carry (``image_url`` parts)."""
    messages: list[dict[str, Any]] = []
    images = 0
    for index, message in enumerate(body.messages):
        content, count = await chat_content(message.content, f"messages[{index}].content", limits)
        images += count
        role = "system" if message.role == "developer" else message.role  # OpenAI's newer name for it
        found: dict[str, Any] = {"role": role, "content": content or ""}
        if message.tool_calls:  # an assistant's earlier calls, sent back with their results
            found["content"] = content or None
            found["tool_calls"] = [call.model_dump() for call in message.tool_calls]
            check_unicode(found["tool_calls"], f"messages[{index}].tool_calls")
        if message.tool_call_id is not None:
            check_unicode(message.tool_call_id, f"messages[{index}].tool_call_id")
            found["tool_call_id"] = message.tool_call_id
        messages.append(found)
    if not messages:
        raise refused("messages", "must hold at least one message.")
    return messages, images


@router.get("/v1/models", response_model=None, responses=documented(ModelList, OpenAIError))
async def list_models(request: Request) -> dict[str, Any]:
    try:
        models = await client_of(request).models()
    except ClientError as error:
        raise GatewayError.of(error) from error
    data = [_model_card(m) for m in models if m.ready and not m.name.endswith(ONNX_PART_SUFFIX)]
    return {"object": "list", "data": data}


@router.get("/v1/models/{model_id}", response_model=None, responses=documented(ModelCard, OpenAIError))
async def retrieve_model(model_id: str, request: Request) -> dict[str, Any]:
    try:
        models = {m.name: m for m in await client_of(request).models()}
    except ClientError as error:
        raise GatewayError.of(error) from error
    found = models.get(model_id)
    if found is None or not found.ready or model_id.endswith(ONNX_PART_SUFFIX):
        raise GatewayError(404, f"The model '{model_id}' does not exist.", param="model", code="model_not_found")
    return _model_card(found)


def _model_card(model: ModelInfo) -> dict[str, Any]:
    """OpenAI's model object, with the task, whether each answer is batch-invariant and whether the vectors may be
    cut (``dimensions``) and whether it thinks before it answers (``reasoning``): tritonhf's fields."""
    card = {"id": model.name, "object": "model", "created": 0, "owned_by": "tritonhf", "task": model.task}
    card = {**card, "batch_invariant": model.batch_invariant, "matryoshka": model.matryoshka,
            "reasoning": model.reasoning}  # fmt: skip
    if model.images is not None:  # an image chat model: what one request may carry
        limits = model.images
        card["images"] = {"per_request": limits.images, "pixels": limits.pixels, "bytes": limits.bytes}
    return card


def _response_format(body: GenerationBody) -> dict[str, Any] | None:
    found = body.response_format
    if found is None:
        return None
    schema = found.json_schema.schema_ if isinstance(found, JsonSchemaFormat) else None
    return json_format(found.type, schema, "response_format")


def _call_deltas(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """OpenAI's streamed tool calls: per call, its id and name first, then its arguments in fragments."""
    deltas = []
    for index, call in enumerate(calls):
        head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        deltas.append({"tool_calls": [head]})
        for fragment in argument_fragments(call.arguments):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    return deltas


def _chat_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    """OpenAI's ``choices[].logprobs`` of chat: each token, its bytes, and its alternatives."""
    return {"content": token_logprobs(entries), "refusal": None}


def _completion_logprobs(entries: Sequence[TokenLogprob], alternatives: int, offset: int) -> dict[str, Any]:
    """The legacy completions' ``logprobs``: tokens, their log-probabilities, alternatives, character offsets."""
    offsets = []
    for entry in entries:
        offsets.append(offset)
        offset += len(entry.token)
    top = [dict(e.top) for e in entries] if alternatives else None
    return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": top, "text_offset": offsets}  # fmt: skip


def _calls_message(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


@router.post(
    "/v1/chat/completions", response_model=None, responses=documented(ChatCompletion, OpenAIError, stream=True)
)
async def chat_completions(body: ChatBody, request: Request) -> dict[str, Any] | Response:
    client = client_of(request)
    options = _chat_options(body)
    if body.top_logprobs is not None and not body.logprobs:
        raise refused("top_logprobs", "needs logprobs: true.")
    if body.logprobs:
        options["logprobs"] = body.top_logprobs or 0
    messages, images = await _messages(body, request.app.state.limits)
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools] if body.tools else None
    check_unicode(tools, "tools")
    format_ = _response_format(body)
    name = await model_for(client, body.model, *chat_models("/v1/chat/completions", images))
    call = ChatCall(name, messages, options, format_, tools, tool_choice_of(body.tool_choice))
    chats = await open_chats(client, call, body.n, chat_param)
    head = _Head(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), name)
    if not body.stream:
        return await _chat_full(head, chats, request)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return sse(_chat_events(head, chats, include_usage), Streams.of(chats))


@router.post(
    "/models/{name}/v1/chat/completions",
    response_model=None,
    responses=documented(ChatCompletion, OpenAIError, stream=True),
)
async def model_chat_completions(name: str, body: ChatBody, request: Request) -> dict[str, Any] | Response:
    """Chat completions at a model's URL, as TGI serves them: Hugging Face's ``InferenceClient(model=URL)``
    posts its ``chat_completion`` here, its body's model being that URL; the model is the one the URL names."""
    return await chat_completions(body.model_copy(update={"model": name}), request)


@dataclass(frozen=True)
class _Head:
    """What every chunk of one chat answer carries: its id, when it was made, the model."""

    ident: str
    created: int
    model: str

    def chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.ident, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices}  # fmt: skip


async def _chat_full(head: _Head, chats: Sequence[ChatStream], request: Request) -> dict[str, Any] | Response:
    """The answer as one ``chat.completion``, a choice per generation."""
    try:
        texts = await unless_disconnected(request, all_or_none(full_text(c.stream, c.first) for c in chats))
    except ClientGone:
        return Response(status_code=CLIENT_GONE)
    except BaseException:
        await Streams.of(chats).aclose()
        raise
    choices = []
    for chat, text in zip(chats, texts):
        stream = chat.stream
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if stream.tool_calls:
            message = {"role": "assistant", "content": stream.content or None,
                       "tool_calls": calls_message(stream.tool_calls)}  # fmt: skip
        if stream.reasoning:  # a reasoning model's thinking, apart from its answer (vLLM's and DeepSeek's field)
            message["reasoning_content"] = stream.reasoning
        choices.append({"index": chat.index, "message": message, "finish_reason": stream.finish_reason or "stop",
                        "logprobs": _chat_logprobs(stream.logprobs) if chat.logprobs else None})  # fmt: skip
    return FastJSONResponse({"id": head.ident, "object": "chat.completion", "created": head.created,
                             "model": head.model, "choices": choices,
                             "usage": usage_of(Streams.of(chats).streams, len(chats))})  # fmt: skip


async def _chat_events(head: _Head, chats: Sequence[ChatStream], include_usage: bool) -> AsyncIterator[dict[str, Any]]:
    """The answer as ``chat.completion.chunk`` events, each choice's as they come (by its index), then, when
    asked, the usage of all."""
    async for event in merged([_choice_events(head, chat) for chat in chats]):
        yield event
    if include_usage:
        yield {**head.chunk([]), "usage": usage_of(Streams.of(chats).streams, len(chats))}


async def _choice_events(head: _Head, chat: ChatStream) -> AsyncIterator[dict[str, Any]]:
    """One choice as ``chat.completion.chunk`` events: its content deltas, then its calls and the finish reason."""
    stream, index = chat.stream, chat.index
    role: dict[str, Any] = {"role": "assistant"}
    told = 0  # logprob entries sent

    def logprobs() -> dict[str, Any] | None:
        nonlocal told
        if not chat.logprobs:
            return None
        found, told = stream.logprobs[told:], len(stream.logprobs)
        return _chat_logprobs(found)

    async for kind, piece in deltas(chat):  # a reasoning model's thinking first: reasoning_content (vLLM's name)
        delta = {**role, ("content" if kind == "content" else "reasoning_content"): piece}
        found = logprobs() if kind == "content" else None
        yield head.chunk([{"index": index, "delta": delta, "logprobs": found, "finish_reason": None}])
        role = {}
    for delta in _call_deltas(stream.tool_calls):
        yield head.chunk([{"index": index, "delta": {**role, **delta}, "logprobs": None, "finish_reason": None}])
        role = {}
    yield head.chunk([{"index": index, "delta": {}, "finish_reason": stream.finish_reason or "stop"}])


@router.post("/v1/completions", response_model=None, responses=documented(Completion, OpenAIError, stream=True))
async def completions(body: CompletionBody, request: Request) -> dict[str, Any] | Response:
    client = client_of(request)
    options = _generation_options(body)
    if body.logprobs is not None:
        options["logprobs"] = body.logprobs
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise refused("prompt", "must be a string or a list of strings (token ids are not accepted).")
    if body.stream and len(prompts) != 1:
        raise refused("prompt", "must be a single string when stream=true.")
    check_count(request, len(prompts) * body.n, "prompt")  # every choice of every prompt is a generation
    name = await model_for(client, body.model, ("text-generation",), "/v1/completions")
    format_ = _response_format(body)
    ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    base = {"id": ident, "object": "text_completion", "created": created, "model": name}
    seeds = choice_seeds(body.n, options["seed"])  # with a seed, n reproducible choices: seed, seed + 1 ...

    async def opened(prompt: str, seed: int | None) -> tuple[AsyncTextStream, str | None]:
        call = client.generate(prompt, model=name, stream=True, response_format=format_, **{**options, "seed": seed})
        return await open_stream(call, completions_param)

    if body.stream:
        streams: list[tuple[AsyncTextStream, str | None]] = []
        try:  # each choice opened (so checked) before the answer starts
            for seed in seeds:
                streams.append(await opened(str(prompts[0]), seed))
        except BaseException:
            await Streams([stream for stream, _ in streams]).aclose()
            raise
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def choice(index: int, stream: AsyncTextStream, first: str | None) -> AsyncIterator[dict[str, Any]]:
            told, offset = 0, 0
            async for chunk in streamed(stream, first):
                found = None
                if body.logprobs is not None:
                    found = _completion_logprobs(stream.logprobs[told:], body.logprobs, offset)
                    told, offset = len(stream.logprobs), offset + len(chunk)
                if chunk or found:
                    yield {**base, "choices": [{"index": index, "text": chunk, "finish_reason": None,
                                                "logprobs": found}]}  # fmt: skip
            final = {"index": index, "text": "", "finish_reason": stream.finish_reason or "stop", "logprobs": None}
            yield {**base, "choices": [final]}

        async def events() -> AsyncIterator[dict[str, Any]]:
            async for event in merged([choice(index, *found) for index, found in enumerate(streams)]):
                yield event
            if include_usage:
                yield {**base, "choices": [], "usage": usage_of([s for s, _ in streams], body.n)}

        return sse(events(), Streams([stream for stream, _ in streams]))

    async def one(prompt: str, seed: int | None) -> tuple[str, AsyncTextStream]:
        stream, first = await opened(prompt, seed)
        return await full_text(stream, first), stream

    try:  # the prompts and their choices run at once (Triton batches them); a client that leaves, or one refused
        # generation (the model's queue is full), cancels them all
        answers = await unless_disconnected(request, all_or_none(one(str(p), seed) for p in prompts for seed in seeds))
    except ClientGone:
        return Response(status_code=CLIENT_GONE)
    choices = []
    for index, (text, stream) in enumerate(answers):  # OpenAI's order: each prompt's n choices together
        found = _completion_logprobs(stream.logprobs, body.logprobs, 0) if body.logprobs is not None else None
        choices.append(
            {"index": index, "text": text, "finish_reason": stream.finish_reason or "stop", "logprobs": found}
        )
    usage = usage_of([stream for _, stream in answers], body.n)
    return FastJSONResponse({**base, "choices": choices, "usage": usage})


EMBEDDING_TASKS = ("feature-extraction", "zero-shot-image-classification")  # texts: either; images: image-text


@router.post("/v1/embeddings", response_model=None, responses=documented(EmbeddingList, OpenAIError))
async def embeddings(body: EmbeddingBody, request: Request) -> FastJSONResponse:
    client = client_of(request)
    inputs = [body.input] if isinstance(body.input, str) else body.input
    if not all(isinstance(item, str) for item in inputs):
        raise refused("input", "must be a string or a list of strings; token ids are not accepted (send the text).")
    texts = [str(item) for item in inputs]
    if not texts or not all(texts):
        raise empty("input")
    check_count(request, len(texts), "input")
    if body.modality == "image":
        if body.dimensions is not None:
            raise refused("dimensions", "is for text embeddings of a Matryoshka model, not images.")
        return await _image_embeddings(client, request, body, texts)
    check_texts(texts, "input")
    name = await model_for(client, body.model, EMBEDDING_TASKS, "/v1/embeddings")
    if body.dimensions is not None:
        await _check_matryoshka(client, name)
    await check_tokens(request, name, texts, truncate=body.truncate)
    try:  # as OpenAI: a text past the model's window is a 400 (context_length_exceeded), unless truncate
        result = await unless_disconnected(
            request,
            coalescer_of(request).embeddings(
                texts, model=name, normalize=True, truncate=body.truncate, prompt_name=body.prompt_name
            ),
        )
    except ClientError as error:
        raise GatewayError.of(error, "input") from error
    vectors = result.vectors if body.dimensions is None else _first_components(result.vectors, body.dimensions)
    data = []
    for index, vector in enumerate(vectors):
        value: Any = vector  # orjson writes the array itself
        if body.encoding_format == "base64":
            value = base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode()
        item = {"object": "embedding", "index": index, "embedding": value}
        if result.truncated[index]:
            item["truncated"] = True  # not OpenAI's: only with truncate=true, on the inputs that were cut
        data.append(item)
    usage = {"prompt_tokens": result.total_tokens, "total_tokens": result.total_tokens}
    # A response of its own: FastAPI would otherwise walk every float through jsonable_encoder.
    return FastJSONResponse({"object": "list", "data": data, "model": name, "usage": usage})


async def _check_matryoshka(client: AsyncClient, name: str) -> None:
    """``dimensions`` only for a model trained so that its first N components embed on their own: cutting any other
    model's vectors would change them silently."""
    info = {m.name: m for m in await client.models()}.get(name)
    if info is None or not info.matryoshka:
        raise refused("dimensions", f"is refused: '{name}' was not added as a Matryoshka model (trained so that its "
                      "first N components are an embedding of their own); `gallery add ... --param matryoshka=true` "
                      "says it was.")  # fmt: skip


def _first_components(vectors: np.ndarray[Any, Any], dimensions: int) -> np.ndarray[Any, Any]:
    """The Matryoshka convention, as OpenAI's text-embedding-3 does: the first ``dimensions`` components, normalised
    again to length 1."""
    if dimensions > vectors.shape[1]:
        raise refused("dimensions", f"is {dimensions}, more than the model's {vectors.shape[1]} components.")
    cut = np.asarray(vectors[:, :dimensions], dtype=np.float32)
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return cut / np.where(norms > 0, norms, 1.0)


async def _image_embeddings(
    client: AsyncClient, request: Request, body: EmbeddingBody, items: list[str]
) -> FastJSONResponse:
    """``"modality": "image"``: every input an image, embedded by an image-text model (Infinity's shape)."""
    limits = request.app.state.limits
    route = '/v1/embeddings with "modality": "image" (an image-text model: this one takes no images)'
    try:
        images = [await image_bytes(item, f"input[{index}]", limits) for index, item in enumerate(items)]
    except GatewayError as error:  # images sent to a text model: that is the mistake to name, not their bytes
        try:
            await model_for(client, body.model, ("zero-shot-image-classification",), route)
        except GatewayError as mismatch:
            if mismatch.code == "model_task_mismatch":
                raise mismatch from error
        raise
    name = await model_for(client, body.model, ("zero-shot-image-classification",), route)
    try:  # a client that leaves cancels the Triton call (ClientGone: 499, as on every route)
        vectors = await unless_disconnected(request, client.embed_images(images, model=name, normalize=True))
    except ClientError as error:
        raise GatewayError.of(error, "input") from error
    data = []
    for index, vector in enumerate(vectors):
        value: Any = vector
        if body.encoding_format == "base64":
            value = base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode()
        data.append({"object": "embedding", "index": index, "embedding": value})
    usage = {"prompt_tokens": 0, "total_tokens": 0}  # images are not tokens
    return FastJSONResponse({"object": "list", "data": data, "model": name, "usage": usage})
