"""OpenAI's Responses API over Triton: ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``.

What the openai SDK's ``responses.create``, the OpenAI Agents SDK and Codex speak. A request becomes chat messages
(``instructions`` first, then a stored conversation when ``previous_response_id`` names one, then the ``input``
items) and is answered by the chat machinery (``serve/chat.py``): the same template call, grammars and limits as
``/v1/chat/completions``; this module writes the Responses shapes and its typed stream events.

Stored responses (``store``, the default) are kept in this gateway's memory, each for ``--stored-response-seconds``
and at most ``--stored-responses`` of them (the oldest go first): a gateway restarted, or one of several behind a
load balancer, does not have another's. An id it does not hold is a 404 naming it.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tritonhf.errors import ClientError
from tritonhf.sdk import AsyncClient
from tritonhf.sdk.results import ToolCall
from tritonhf.serve.answers import DeletedResponse, OpenAIError, ResponseObject, documented
from tritonhf.serve.chat import (
    ChatCall,
    ChatStream,
    argument_fragments,
    calls_message,
    check_unicode,
    deltas,
    full_text,
    json_format,
    open_chats,
    responses_param,
    sampling_options,
    stop_list,
    stream_usage,
    token_logprobs,
)
from tritonhf.serve.errors import GatewayError, internal_error, refused
from tritonhf.serve.images import chat_content, chat_models
from tritonhf.serve.jsonbody import FastJSONResponse
from tritonhf.serve.limits import Limits
from tritonhf.serve.schemas import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputMessage,
    ResponseJsonSchema,
    ResponsesBody,
    ResponseToolChoice,
)
from tritonhf.serve.shared import CLIENT_GONE, LOG, ClientGone, client_of, model_for, sse, unless_disconnected

router = APIRouter()


@dataclass
class _Stored:
    response: dict[str, Any]
    conversation: list[dict[str, Any]]  # its messages and its answer, without the instructions (not carried over)
    expires: float


@dataclass
class ResponseStore:
    """Responses kept for ``GET`` and ``previous_response_id``: each for ``seconds``, at most ``size`` of them."""

    size: int
    seconds: float
    _items: OrderedDict[str, _Stored] = field(default_factory=OrderedDict)

    def put(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        self._expire()
        self._items[response["id"]] = _Stored(response, conversation, time.monotonic() + self.seconds)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def get(self, ident: str, param: str | None = None) -> _Stored:
        self._expire()
        found = self._items.get(ident)
        if found is None:
            raise GatewayError(404, f"No stored response '{ident}': it was never stored (store: false), or it "
                               f"expired (a response is kept {self.seconds:g} s, the newest {self.size}), or this "
                               "gateway restarted since.", param=param, code="response_not_found")  # fmt: skip
        return found

    def delete(self, ident: str) -> None:
        self.get(ident)
        del self._items[ident]

    def _expire(self) -> None:
        now = time.monotonic()
        while self._items and next(iter(self._items.values())).expires <= now:
            self._items.popitem(last=False)


def store_of(request: Request) -> ResponseStore:
    return request.app.state.responses  # type: ignore[no-any-return]


async def _input_messages(body: ResponsesBody, limits: Limits) -> tuple[list[dict[str, Any]], int]:
    """The ``input`` as chat messages, and how many images they carry: a text is the user's; a message's parts are
    text and ``input_image`` (``serve.images``); a function call joins the assistant message before it (calls made
    together are one message), its output is a 'tool' message; reasoning sent back is left out."""
    if isinstance(body.input, str):
        return [{"role": "user", "content": body.input}], 0
    messages: list[dict[str, Any]] = []
    images = 0
    for index, item in enumerate(body.input):
        where = f"input[{index}]"
        if isinstance(item, InputMessage):
            role = "system" if item.role == "developer" else item.role
            content, count = await chat_content(item.content, f"{where}.content", limits)
            images += count
            messages.append({"role": role, "content": content})
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            check_unicode(call, where)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last["content"] = last["content"] or None
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            check_unicode(item.call_id, where)
            output, _ = await chat_content(item.output, f"{where}.output", limits)
            if not isinstance(output, str):
                raise refused(f"{where}.output", "must be text: a function's output carries no images.")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
    return messages, images


def _images_in(message: dict[str, Any]) -> int:
    content = message.get("content")
    return sum(part.get("type") == "image" for part in content) if isinstance(content, list) else 0


async def _template_kwargs(client: AsyncClient, name: str, body: ResponsesBody) -> dict[str, Any] | None:
    """The chat template's keywords: the request's own (vLLM's ``chat_template_kwargs``), and for a reasoning model
    asked for no reasoning effort ('none', 'minimal'), ``enable_thinking: false``. An effort asked of a model that
    does not think is refused, as OpenAI refuses it for its models that do not reason."""
    kwargs = dict(body.chat_template_kwargs or {})
    effort = body.reasoning.effort if body.reasoning else None
    if effort is None:
        return kwargs or None
    info = {m.name: m for m in await client.models()}.get(name)
    thinking = info is not None and info.reasoning
    if effort in ("none", "minimal"):
        if thinking:
            kwargs.setdefault("enable_thinking", False)
    elif not thinking:
        raise refused("reasoning.effort", f"is '{effort}': '{name}' does not think before it answers (its chat "
                      "template writes no <think> block); leave reasoning out.")  # fmt: skip
    return kwargs or None


def _call(
    body: ResponsesBody, model: str, messages: list[dict[str, Any]], template_kwargs: dict[str, Any] | None
) -> ChatCall:
    """The chat call a Responses request asks for (``messages``: the history's, then the input's)."""
    if not messages:
        raise refused("input", "must hold at least one message.")
    if body.instructions:
        messages = [{"role": "system", "content": body.instructions}, *messages]
    options = sampling_options(body)
    options.update(max_tokens=body.max_output_tokens, stop=stop_list(body.stop), truncate=body.truncation == "auto",
                   chat_template_kwargs=template_kwargs)  # fmt: skip
    if body.include or body.top_logprobs is not None:  # alternatives asked are log-probabilities asked
        options["logprobs"] = body.top_logprobs or 0
    tools = [{"type": "function", "function": t.model_dump(exclude_none=True, exclude={"type"})}
             for t in body.tools] if body.tools else None  # fmt: skip
    check_unicode(tools, "tools")
    choice = body.tool_choice.name if isinstance(body.tool_choice, ResponseToolChoice) else body.tool_choice
    found = body.text.format if body.text else None
    schema = found.schema_ if isinstance(found, ResponseJsonSchema) else None
    format_ = json_format(found.type, schema, "text.format") if found else None
    return ChatCall(model, messages, options, format_, tools, choice)


@router.post("/v1/responses", response_model=None, responses=documented(ResponseObject, OpenAIError, stream=True))
async def create_response(body: ResponsesBody, request: Request) -> dict[str, Any] | Response:
    client, store = client_of(request), store_of(request)
    history = store.get(body.previous_response_id, "previous_response_id").conversation if (
        body.previous_response_id) else []  # fmt: skip
    messages, images = await _input_messages(body, request.app.state.limits)
    messages = [*history, *messages]
    images += sum(_images_in(message) for message in history)
    name = await model_for(client, body.model, *chat_models("/v1/responses", images))
    call = _call(body, name, messages, await _template_kwargs(client, name, body))
    (chat,) = await open_chats(client, call, 1, responses_param)
    answer = _Answer(body, call, chat, f"resp_{uuid.uuid4().hex}", int(time.time()), store)
    if body.stream:
        return sse(answer.events(), chat.stream, done=False, named=True)
    try:
        text = await unless_disconnected(request, full_text(chat.stream, chat.first))
    except ClientGone:
        return Response(status_code=CLIENT_GONE)
    return FastJSONResponse(answer.finished(answer.output(text)))


@router.get("/v1/responses/{response_id}", response_model=None, responses=documented(ResponseObject, OpenAIError))
async def retrieve_response(response_id: str, request: Request) -> dict[str, Any]:
    return store_of(request).get(response_id, "response_id").response


@router.delete("/v1/responses/{response_id}", response_model=None, responses=documented(DeletedResponse, OpenAIError))
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    store_of(request).delete(response_id)
    return {"id": response_id, "object": "response", "deleted": True}


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _message(ident: str, text: str, status: str, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}] if status != (
        "in_progress") else []  # fmt: skip
    return {"type": "message", "id": ident, "status": status, "role": "assistant", "content": content}


def _reasoning(ident: str, text: str, status: str) -> dict[str, Any]:
    """A reasoning item: the model's whole thinking as its content (no summary is made)."""
    content = [{"type": "reasoning_text", "text": text}] if status != "in_progress" else []
    return {"type": "reasoning", "id": ident, "summary": [], "content": content, "status": status}


def _function_call(ident: str, call: ToolCall, arguments: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": ident, "call_id": call.id, "name": call.name, "arguments": arguments,
            "status": status}  # fmt: skip


@dataclass
class _Answer:
    """One response being answered: its shapes, whole or as the typed events of a stream, and its storing."""

    body: ResponsesBody
    call: ChatCall
    chat: ChatStream
    ident: str
    created: int
    store: ResponseStore
    sequence: int = 0

    def response(self, status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """The response object (OpenAI's fields, the request's settings as served)."""
        body = self.body
        text_format = body.text.format.model_dump(by_alias=True, exclude_none=True) if body.text else {"type": "text"}
        tool_choice = body.tool_choice if body.tool_choice is not None else ("auto" if body.tools else "none")
        return {
            "id": self.ident,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": self.call.model,
            "output": output,
            "parallel_tool_calls": body.parallel_tool_calls if body.parallel_tool_calls is not None else True,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
            "store": body.store,
            "temperature": body.temperature if body.temperature is not None else 0.0,
            "text": {"format": text_format},
            "tool_choice": tool_choice.model_dump() if isinstance(tool_choice, ResponseToolChoice) else tool_choice,
            "tools": [tool.model_dump(exclude_none=True) for tool in body.tools or []],
            "top_p": body.top_p if body.top_p is not None else 1.0,
            "truncation": body.truncation,
            "usage": None,
            "user": None,
            "metadata": body.metadata or {},
            **extra,
        }

    def usage(self) -> dict[str, Any]:
        found = stream_usage(self.chat.stream)
        thought = found.get("completion_tokens_details", {}).get("reasoning_tokens", 0)
        return {"input_tokens": found["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": found["completion_tokens"], "output_tokens_details": {"reasoning_tokens": thought},
                "total_tokens": found["total_tokens"]}  # fmt: skip

    @property
    def scored(self) -> bool:
        """Log-probabilities asked (include: message.output_text.logprobs, or top_logprobs)."""
        return self.call.options.get("logprobs") is not None

    def logprobs(self) -> list[dict[str, Any]] | None:
        """Each token's log-probability so far, when asked."""
        return token_logprobs(self.chat.stream.logprobs) if self.scored else None

    def output(self, text: str) -> list[dict[str, Any]]:
        """The output items of a whole answer: the message (unless the answer is only calls), then each call."""
        stream = self.chat.stream
        status = "incomplete" if stream.finish_reason == "length" else "completed"
        content = (stream.content or "") if stream.tool_calls else text
        items = [_reasoning(_item_id("rs"), stream.reasoning, "completed")] if stream.reasoning else []
        if content or not stream.tool_calls:
            items.append(_message(_item_id("msg"), content, status, self.logprobs()))
        items += [_function_call(_item_id("fc"), call, call.arguments, "completed") for call in stream.tool_calls]
        return items

    def finished(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        """The final response (completed, or incomplete when max_output_tokens cut it), stored when asked."""
        stream = self.chat.stream
        cut = stream.finish_reason == "length"
        found = self.response("incomplete" if cut else "completed", output, usage=self.usage(),
                              incomplete_details={"reason": "max_output_tokens"} if cut else None)  # fmt: skip
        if self.body.store:
            answer: dict[str, Any] = {
                "role": "assistant",
                "content": stream.content
                if stream.tool_calls
                else (
                    "".join(part["text"] for item in output if item["type"] == "message" for part in item["content"])
                ),
            }
            if stream.tool_calls:
                answer["tool_calls"] = calls_message(stream.tool_calls)
            conversation = self.call.messages[1:] if self.body.instructions else self.call.messages
            self.store.put(found, [*conversation, answer])
        return found

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence - 1, **fields}

    async def events(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The typed events, in bursts written together (what is ready at one moment is one write): created and
        in_progress; each item's opening with its first delta, then each delta; the items' ends (each call's item
        and argument deltas among them) with completed (or incomplete); or failed with the error."""
        started = self.response("in_progress", [])
        yield [self.event("response.created", response=started), self.event("response.in_progress", response=started)]
        output: list[dict[str, Any]] = []
        closing: list[dict[str, Any]] = []
        try:
            async for burst in self._output_events(output, closing):
                yield burst
        except Exception as error:  # after the first event: the stream's last event says it
            found = GatewayError.of(error) if isinstance(error, ClientError) else internal_error(LOG, "a response",
                                                                                                   error)  # fmt: skip
            failed = self.response("failed", [], error={"code": found.code or "server_error", "message": found.message})
            yield [self.event("response.failed", response=failed)]
            return
        final = self.finished(output)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield [*closing, self.event(kind, response=final)]

    async def _output_events(
        self, output: list[dict[str, Any]], closing: list[dict[str, Any]]
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The output items' events as they come, in bursts: a reasoning model's thinking (a reasoning item), the
        message; what comes once the answer has ended (the last item's end, each call) goes into ``closing``."""
        stream, told = self.chat.stream, 0
        opened: dict[str, Any] | None = None  # the item whose part is streaming: {"kind", "id", "text"}
        async for kind, piece in deltas(self.chat):
            burst: list[dict[str, Any]] = []
            if opened is not None and opened["kind"] != kind:  # the thinking ended: its item is done
                burst += self._part_done(opened, output)
                opened = None
            if opened is None:
                opened = {"kind": kind, "id": _item_id("rs" if kind == "reasoning" else "msg"), "text": ""}
                burst += self._part_added(opened, len(output))
            if piece:
                where = {"item_id": opened["id"], "output_index": len(output), "content_index": 0}
                opened["text"] += piece
                if kind == "reasoning":
                    burst.append(self.event("response.reasoning_text.delta", **where, delta=piece))
                else:
                    fresh = token_logprobs(stream.logprobs[told:]) if self.scored else []
                    told = len(stream.logprobs)
                    burst.append(self.event("response.output_text.delta", **where, delta=piece, logprobs=fresh))
            if burst:
                yield burst
        if opened is None and not stream.tool_calls:  # an empty answer: an empty message
            opened = {"kind": "content", "id": _item_id("msg"), "text": ""}
            closing += self._part_added(opened, len(output))
        if opened is not None:
            closing += self._part_done(opened, output)
        for call in stream.tool_calls:
            index, call_ident = len(output), _item_id("fc")
            closing.append(self.event("response.output_item.added", output_index=index,
                                      item=_function_call(call_ident, call, "", "in_progress")))  # fmt: skip
            for fragment in argument_fragments(call.arguments):
                closing.append(self.event("response.function_call_arguments.delta", item_id=call_ident,
                                          output_index=index, delta=fragment))  # fmt: skip
            closing.append(self.event("response.function_call_arguments.done", item_id=call_ident,
                                      output_index=index, name=call.name, arguments=call.arguments))  # fmt: skip
            item = _function_call(call_ident, call, call.arguments, "completed")
            closing.append(self.event("response.output_item.done", output_index=index, item=item))
            output.append(item)

    def _part_added(self, opened: dict[str, Any], index: int) -> list[dict[str, Any]]:
        part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        if opened["kind"] == "reasoning":
            item = _reasoning(opened["id"], "", "in_progress")
        else:
            item = _message(opened["id"], "", "in_progress", None)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        where = {"item_id": opened["id"], "output_index": index, "content_index": 0}
        return [self.event("response.output_item.added", output_index=index, item=item),
                self.event("response.content_part.added", **where, part=part)]  # fmt: skip

    def _part_done(self, opened: dict[str, Any], output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        index, text = len(output), opened["text"]
        where = {"item_id": opened["id"], "output_index": index, "content_index": 0}
        if opened["kind"] == "reasoning":
            item = _reasoning(opened["id"], text, "completed")
            done = self.event("response.reasoning_text.done", **where, text=text)
        else:
            status = "incomplete" if self.chat.stream.finish_reason == "length" else "completed"
            item = _message(opened["id"], text, status, self.logprobs())
            done = self.event("response.output_text.done", **where, text=text, logprobs=item["content"][0]["logprobs"])
        output.append(item)
        return [done, self.event("response.content_part.done", **where, part=item["content"][0]),
                self.event("response.output_item.done", output_index=index, item=item)]  # fmt: skip
