"""The chat machinery both chat routes share: OpenAI's chat completions (``openai.py``) and its Responses API
(``responses.py``) differ in their shapes only.

A request becomes chat messages and SDK options; each answer is one generation on the model's template, opened (and
so checked) before the HTTP response starts; its text is read whole or as deltas (a reasoning model's thinking, then
the content, held back while it may still be a tool call). The same template call, grammars and limits serve both
routes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tritonhf.errors import ClientError
from tritonhf.runtime import tools as tools_module
from tritonhf.sdk import AsyncClient, AsyncTextStream
from tritonhf.sdk.results import TokenLogprob, ToolCall
from tritonhf.serve.errors import GatewayError, refused
from tritonhf.serve.schemas import NamedToolChoice, Sampling
from tritonhf.serve.shared import open_stream, streamed
from tritonhf.tasks import SEED_MAX

ARGUMENT_FRAGMENT = 16  # characters of a tool call's arguments per streamed delta


def sampling_options(body: Sampling) -> dict[str, Any]:
    """The SDK's sampling options of a request body (temperature, top_p, seed, the penalties, top_k, min_p,
    logit_bias); each was bounded by the schema, so what is given is applied."""
    return {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "presence_penalty": body.presence_penalty or None,
        "frequency_penalty": body.frequency_penalty or None,
        "repetition_penalty": body.repetition_penalty,
        "top_k": body.top_k,
        "min_p": body.min_p,
        "logit_bias": body.logit_bias or None,
    }


def stop_list(stop: str | list[str] | None) -> list[str] | None:
    """The SDK's ``stop``: a request's string or strings, None when there are none."""
    found = [stop] if isinstance(stop, str) else stop
    return found or None


def check_unicode(value: Any, where: str) -> None:
    """Every string inside ``value`` (a message's tool calls, a tool's schema) encodes as UTF-8: JSON can carry a lone
    surrogate, which no tokenizer takes; a 400 naming where it is."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise refused(where, "is not valid Unicode (a lone surrogate); send UTF-8 text.") from error
    elif isinstance(value, dict):
        for key, item in value.items():
            check_unicode(key, where)
            check_unicode(item, f"{where}.{key}" if isinstance(key, str) and key.isidentifier() else where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_unicode(item, f"{where}[{index}]")


def tool_choice_of(choice: str | NamedToolChoice | None) -> str | None:
    """The SDK's tool choice: 'none', 'auto', 'required' or a function's name."""
    return choice.function.name if isinstance(choice, NamedToolChoice) else choice


def json_format(kind: str, schema: dict[str, Any] | None, where: str) -> dict[str, Any] | None:
    """The SDK's ``response_format`` of a route's format: a JSON Schema (``json_object``: any object), or None for
    free text; a 400 naming ``where`` for a schema with a string that is not valid Unicode."""
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    schema = schema or {"type": "object"}
    check_unicode(schema, where)
    return {"type": "json_schema", "json_schema": {"schema": schema}}


# A template's input named in its refusal -> the field it came from on each route: (words, chat completions'
# field, legacy completions' field, Responses' field). The first whose words the refusal holds names it.
TEMPLATE_INPUTS = (
    ("input 'logprobs'", "top_logprobs", "logprobs", "top_logprobs"),
    ("input 'max_tokens'", "max_tokens", "max_tokens", "max_output_tokens"),
    ("tool_choice", "tool_choice", None, "tool_choice"),
    ("'tools'", "tools", None, "tools"),
    ("tools[", "tools", None, "tools"),
    ("json_schema", "response_format", "response_format", "text.format"),
    ("text_input", "messages", "prompt", "input"),
)


def _field_on(route: int) -> Callable[[ClientError], str | None]:
    """The field on route ``route`` (a column of ``TEMPLATE_INPUTS``) that a template's refusal is about."""

    def field(error: ClientError) -> str | None:
        return next((found[route] for found in TEMPLATE_INPUTS if found[0] in error.message), None)

    return field


chat_param, completions_param, responses_param = (_field_on(route) for route in (1, 2, 3))


@dataclass(frozen=True)
class ChatStream:
    """One choice's generation, opened: what its full answer and its streamed events are both made from."""

    stream: AsyncTextStream
    first: str | None
    logprobs: bool  # asked for
    calling: bool  # tools offered and not refused: content is held back until it is not a call
    index: int = 0  # the choice's index


@dataclass(frozen=True)
class Streams:
    """Several choices' streams, closed together (a client that leaves cancels every generation)."""

    streams: Sequence[AsyncTextStream]

    @classmethod
    def of(cls, chats: Sequence[ChatStream]) -> Streams:
        return cls([chat.stream for chat in chats])

    async def aclose(self) -> None:
        for stream in self.streams:
            await stream.aclose()


@dataclass(frozen=True)
class ChatCall:
    """What one chat answer asks of the model: its messages and the SDK's options for them."""

    model: str
    messages: list[dict[str, Any]]
    options: dict[str, Any]  # sampling_options, max_tokens, stop, truncate, logprobs ...
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None

    @property
    def calling(self) -> bool:
        """Tools offered and not refused: the answer may be a call."""
        return bool(self.tools) and self.tool_choice != "none"


async def open_chats(
    client: AsyncClient, call: ChatCall, n: int, param: Callable[[ClientError], str | None]
) -> list[ChatStream]:
    """``n`` generations of ``call``, each opened (so checked, a refusal's field named by ``param``) before the answer
    starts; with several, a seed gives seed, seed + 1 ... (each choice reproducible, each its own)."""
    chats: list[ChatStream] = []
    asked = call.options.get("logprobs") is not None
    try:
        for index, seed in enumerate(choice_seeds(n, call.options.get("seed"))):
            options = {**call.options, "seed": seed}
            opening = client.chat(call.messages, model=call.model, stream=True, response_format=call.response_format,
                                  tools=call.tools, tool_choice=call.tool_choice, **options)  # fmt: skip
            stream, first = await open_stream(opening, param)
            chats.append(ChatStream(stream, first, asked, call.calling, index))
    except BaseException:
        await Streams.of(chats).aclose()
        raise
    return chats


def choice_seeds(n: int, seed: int | None) -> list[int | None]:
    """Each choice's seed: the request's for the first and the next ones after it, drawn when sampling without one;
    one choice keeps the request's."""
    if n == 1:
        return [seed]
    first = seed if seed is not None else random.getrandbits(63)
    return [(first + index) % (SEED_MAX + 1) for index in range(n)]


async def full_text(stream: AsyncTextStream, first: str | None) -> str:
    """The whole text of an opened stream (a non-streamed answer); the stream is closed after."""
    try:
        return "".join([chunk async for chunk in streamed(stream, first)])
    except ClientError as error:
        raise GatewayError.of(error) from error
    finally:
        await stream.aclose()


async def deltas(chat: ChatStream) -> AsyncIterator[tuple[str, str]]:
    """One choice's answer as it may be shown, as ("reasoning", text) and ("content", text) pieces: a reasoning
    model's thinking as it grows (before any content); the content as it comes (the first piece at once, to carry the
    role, when no call can come), held back while it may still be a tool call; once the stream ends, what was held
    back when no call came. The calls themselves are the stream's ``tool_calls`` after the last piece."""
    stream = chat.stream
    text, sent, thought, started = "", 0, 0, False
    async for chunk in streamed(stream, chat.first):
        if len(stream.reasoning) > thought:
            yield "reasoning", stream.reasoning[thought:]
            thought = len(stream.reasoning)
        text += chunk
        safe = tools_module.safe_to_stream(text) if chat.calling else len(text)
        if safe > sent or (not started and not chat.calling and chunk):
            yield "content", text[sent:safe]
            started, sent = True, max(sent, safe)
    if len(stream.reasoning) > thought:
        yield "reasoning", stream.reasoning[thought:]
    if not stream.tool_calls and sent < len(text):  # held back, and no call came: it was content
        yield "content", text[sent:]


def stream_usage(stream: AsyncTextStream) -> dict[str, Any]:
    """OpenAI's usage; ``prompt_tokens_cut`` (not OpenAI's) says how much of a prompt ``truncate`` cut."""
    found_usage = stream.usage
    prompt, completion = (found_usage.prompt_tokens, found_usage.completion_tokens) if found_usage else (0, 0)
    found: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}  # fmt: skip
    if found_usage and found_usage.prompt_tokens_cut:
        found["prompt_tokens_cut"] = found_usage.prompt_tokens_cut
    if found_usage and found_usage.reasoning_tokens:  # OpenAI's field for them
        found["completion_tokens_details"] = {"reasoning_tokens": found_usage.reasoning_tokens}
    return found


def usage_of(streams: Sequence[AsyncTextStream], choices: int) -> dict[str, Any]:
    """The usage of an answer of several generations, each run of ``choices`` of them answering one prompt: each
    prompt counted once (with what truncate cut of it), every generation's tokens (and thinking tokens)."""
    found: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0}
    for index, stream in enumerate(streams):
        usage = stream_usage(stream)
        if index % choices == 0:
            found["prompt_tokens"] += usage["prompt_tokens"]
            if "prompt_tokens_cut" in usage:
                found["prompt_tokens_cut"] = found.get("prompt_tokens_cut", 0) + usage["prompt_tokens_cut"]
        found["completion_tokens"] += usage["completion_tokens"]
        if "completion_tokens_details" in usage:
            details = found.setdefault("completion_tokens_details", {"reasoning_tokens": 0})
            details["reasoning_tokens"] += usage["completion_tokens_details"]["reasoning_tokens"]
    found["total_tokens"] = found["prompt_tokens"] + found["completion_tokens"]
    return found


def _token(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8", "replace"))}


def token_logprobs(entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """Each token's log-probability, its bytes and its alternatives (chat's ``logprobs.content``, and the
    Responses API's ``output_text.logprobs``)."""
    return [{**_token(e.token, e.logprob), "top_logprobs": [_token(t, v) for t, v in e.top]} for e in entries]


def calls_message(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` (chat completions' shape)."""
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


def argument_fragments(arguments: str) -> list[str]:
    """A call's arguments as they are streamed: fragments of ``ARGUMENT_FRAGMENT`` characters."""
    return [arguments[start : start + ARGUMENT_FRAGMENT] for start in range(0, len(arguments), ARGUMENT_FRAGMENT)]


async def merged(sources: Sequence[AsyncIterator[dict[str, Any]]]) -> AsyncIterator[dict[str, Any]]:
    """The events of several sources as each comes; one source alone is read as it is."""
    if len(sources) == 1:
        async for event in sources[0]:
            yield event
        return
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def pump(source: AsyncIterator[dict[str, Any]]) -> None:
        try:
            async for event in source:
                await queue.put(("event", event))
        except Exception as error:  # the first failure ends the answer (the stream's error event says it)
            await queue.put(("error", error))
        else:
            await queue.put(("done", None))

    tasks = [asyncio.ensure_future(pump(source)) for source in sources]
    try:
        running = len(tasks)
        while running:
            kind, value = await queue.get()
            if kind == "event":
                yield value
            elif kind == "error":
                raise value
            else:
                running -= 1
    finally:
        for task in tasks:
            task.cancel()
