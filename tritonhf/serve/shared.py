"""What the gateway's route modules share: the app's client, coalescer and tokenizers; the model a request names,
checked against the tasks a route serves; the token, count and Unicode checks; a stream opened before its response
starts (so a refusal is a real status); a client that leaves cancelling its work; server-sent events.

The route modules (``openai``, ``tei``, ``audio``, ``rerank``, ``endpoints``) import these from here, none from
another route module.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import orjson
from fastapi import Request
from fastapi.responses import StreamingResponse
from fastapi.sse import format_sse_event

from tritonhf._wire import codecs
from tritonhf._wire.aio_transport import cancel_and_wait
from tritonhf.errors import ClientError
from tritonhf.sdk import AsyncClient
from tritonhf.sdk.aio import AsyncResponseStream
from tritonhf.serve.coalesce import Coalescer
from tritonhf.serve.errors import GatewayError, internal_error
from tritonhf.serve.jsonbody import OPTIONS
from tritonhf.serve.tokenizers import Tokenizers, byte_bound, count

LOG = logging.getLogger("tritonhf.gateway")
T = TypeVar("T")
P = TypeVar("P")
S = TypeVar("S", bound="AsyncResponseStream[Any]")


# Answered to a client that disconnected before its answer was ready (nobody reads it; nginx's code).
CLIENT_GONE = 499


class ClientGone(Exception):
    """The HTTP client disconnected while its (non-streamed) answer was being generated."""


def client_of(request: Request) -> AsyncClient:
    return request.app.state.client  # type: ignore[no-any-return]


def coalescer_of(request: Request) -> Coalescer:
    return request.app.state.coalescer  # type: ignore[no-any-return]


def tokenizers_of(request: Request) -> Tokenizers:
    return request.app.state.tokenizers  # type: ignore[no-any-return]


async def check_tokens(
    request: Request, model: str, texts: Sequence[str], pairs: Sequence[str] | None = None, truncate: bool = False
) -> None:
    """At most --max-batch-tokens tokens in all of a request's texts (413, as TEI answers).

    Counted with the model's tokenizer only when the byte bound could pass the limit; a text
    that will be cut (``truncate``) counts at most the model's window. Without the tokenizer on
    this machine the limit is not counted (``/info`` says so).
    """
    limit = request.app.state.limits.max_batch_tokens
    if byte_bound([*texts, *(pairs or [])]) <= limit:
        return
    tokenizer = await tokenizers_of(request).get(model)
    if tokenizer is None:
        return
    found = await count(tokenizer, texts, pairs)
    if truncate:
        found = min(found, len(texts) * int(tokenizer.model_max_length))
    if found > limit:
        raise GatewayError(413, f"The inputs hold {found} tokens; the limit per request is {limit} "
                           "(--max-batch-tokens): send them in several requests.", code="too_many_tokens")  # fmt: skip


def check_texts(texts: Sequence[str], param: str) -> None:
    """Every text encodes as UTF-8 (JSON can carry a lone surrogate); a 400 naming it by this route's names."""
    try:
        for index, text in enumerate(texts):
            codecs.check_unicode(text, f"{param}[{index}]")
    except ClientError as error:
        raise GatewayError.of(error, param) from error


def check_count(request: Request, count: int, param: str) -> None:
    """At most --max-client-batch-size inputs per request (413, as TEI answers); split bigger batches."""
    limit = request.app.state.limits.max_client_batch_size
    if count > limit:
        raise GatewayError(413, f"'{param}' holds {count} inputs; the limit per request is {limit} "
                           "(--max-client-batch-size): send them in several requests.", param=param,
                           code="too_many_inputs")  # fmt: skip


async def model_for(client: AsyncClient, name: str | None, tasks: Sequence[str], route: str) -> str:
    """``name`` when it is a ready model of one of ``tasks`` (None: the only one); 404 or 400 saying why not."""
    try:
        models = {info.name: info for info in await client.models()}
    except ClientError as error:
        raise GatewayError.of(error) from error
    if name is None:
        candidates = sorted(i.name for i in models.values() if i.ready and i.task in tasks)
        if len(candidates) == 1:
            return candidates[0]
        raise GatewayError(400 if candidates else 404, f"{route} needs 'model': this server has {len(candidates)} "
                           f"ready {' or '.join(tasks)} models ({', '.join(candidates) or 'none'}).", param="model",
                           code="model_required" if candidates else "model_not_found")  # fmt: skip
    info = models.get(name)
    if info is None:
        ready = ", ".join(sorted(i.name for i in models.values() if i.ready and i.task in tasks)) or "none"
        raise GatewayError(404, f"The model '{name}' does not exist. {route} serves: {ready}.", param="model",
                           code="model_not_found")  # fmt: skip
    if not info.ready:
        raise GatewayError(503, f"The model '{name}' is not ready ({info.state}); it may be loading or being repaired.",
                           "server_error", "model", "model_not_ready")  # fmt: skip
    if info.task not in tasks:
        raise GatewayError(400, f"The model '{name}' is a {info.task or 'non-gallery'} model; {route} needs "
                           f"{' or '.join(tasks)}.", param="model", code="model_task_mismatch")  # fmt: skip
    return name


async def open_stream(
    stream_call: Awaitable[S], param: Callable[[ClientError], str | None] = lambda _: None
) -> tuple[S, Any]:
    """Open a stream (generation, transcription) and read its first item, so that a refusal is a real status (its
    ``param`` named by ``param(error)``)."""
    try:
        stream = await stream_call
    except ClientError as error:
        raise GatewayError.of(error, param(error)) from error
    try:
        first = await stream.__anext__()
    except StopAsyncIteration:
        first = None
    except ClientError as error:
        await stream.aclose()
        raise GatewayError.of(error, param(error)) from error
    except BaseException:  # cancelled while it waited (a sibling failed, the client left): Triton stops it too
        await stream.aclose()
        raise
    return stream, first


async def streamed(stream: AsyncResponseStream[P], first: P | None) -> AsyncIterator[P]:
    """An opened stream's items, its first (already read) included."""
    if first is not None:
        yield first
    async for chunk in stream:
        yield chunk


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (the body is already read, so the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result; if the client disconnects first, ``work`` is cancelled (its streams close, so
    Triton stops generating at the next step) and ClientGone is raised. Streamed answers need no
    watcher: their response body is cancelled with the connection."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the gateway cancelled the request itself (shutdown): the work goes too
        await cancel_and_wait(task)
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    await cancel_and_wait(task)  # its own error, if any, is not the answer: the client has left
    raise ClientGone


class Closable(Protocol):
    """What a streamed answer closes when it ends or its client leaves: a stream, or several together."""

    async def aclose(self) -> None: ...


def sse(
    events: AsyncIterator[Any], stream: Closable, done: bool = True, tei: bool = False, named: bool = False
) -> StreamingResponse:
    """Events as server-sent events (FastAPI's encoder), then ``[DONE]`` (OpenAI's end; TEI's streams and the
    Responses API's have none: ``done=False``); ``named``: each event's ``type`` is its SSE event name too (the
    Responses API's typed events). An item that is a list of events is one write (a burst ready at one moment).
    An error after the first event is the stream's last event, in OpenAI's shape or TEI's (``tei``). Closing
    cancels the generation."""

    def failed(found: GatewayError) -> bytes:
        return format_sse_event(data_str=json.dumps(found.tei_body() if tei else found.openai_body()))

    async def body() -> AsyncIterator[bytes]:
        try:
            async for item in events:  # an event, or a burst of them written together
                burst = item if isinstance(item, list) else [item]
                yield b"".join(
                    format_sse_event(data_str=orjson.dumps(event, option=OPTIONS).decode(),
                                     event=str(event["type"]) if named else None)
                    for event in burst
                )  # fmt: skip
            if done:
                yield format_sse_event(data_str="[DONE]")
        except ClientError as error:  # after the first chunk: report it in the stream, as OpenAI and TEI do
            yield failed(GatewayError.of_tei(error) if tei else GatewayError.of(error))
        except Exception as error:  # unforeseen (the app's handler cannot answer once the stream has started)
            yield failed(internal_error(LOG, "a stream", error))
        finally:
            await stream.aclose()  # a client that went away lands here too: the Triton request is cancelled

    return StreamingResponse(body(), media_type="text/event-stream")
