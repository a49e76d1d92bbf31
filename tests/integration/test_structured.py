"""Structured output and tool calls on the real SmolLM2-135M-Instruct GGUF, through the gateway with the
real `openai`, `langchain-openai` and `pydantic-ai` packages, and through the SDK over both protocols.

The schemas are bounded (enums, booleans, strings with maxLength): left free, a 135M model repeats digits until
max_tokens. Whatever it writes, a finished constrained answer must parse and validate."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import jsonschema
import openai
import pytest
from openai_helpers import Weather, openai_client

from harness.invariance import ANSWER_SCHEMA, TIME_TOOL, WEATHER_TOOL
from tritonhf import Client, InvalidInputError
from tritonhf.bootstrap import Stack
from tritonhf.sdk import ChatResult, ToolCall

QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]
PICK: Any = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def gateway(served_stack: Stack) -> Stack:
    """The shared server's gateway (tests/integration/conftest.py); these tests use ``smollm2``."""
    return served_stack


def test_json_schema_and_parse_with_the_openaiopenai_client(gateway: Stack) -> None:
    client = openai_client(gateway)
    format_ = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
    for temperature, seed in ((0.0, None), (0.8, 7), (0.8, 2**64 - 1)):
        answer = client.chat.completions.create(model="smollm2", messages=QUESTION, response_format=format_,  # type: ignore[arg-type]
                                                max_tokens=80, temperature=temperature, seed=seed)  # fmt: skip
        assert answer.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(answer.choices[0].message.content or ""), ANSWER_SCHEMA)
    anything = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=80,
                                              response_format={"type": "json_object"})  # fmt: skip
    if anything.choices[0].finish_reason == "stop":  # an open object may run past max_tokens: then it says so
        assert isinstance(json.loads(anything.choices[0].message.content or ""), dict)
    else:
        assert anything.choices[0].finish_reason == "length"
    parsed = client.chat.completions.parse(model="smollm2", messages=QUESTION, response_format=Weather, max_tokens=80)
    assert isinstance(parsed.choices[0].message.parsed, Weather)
    completion = client.completions.create(model="smollm2", prompt="The weather in Paris, as JSON:", max_tokens=80,
                                           extra_body={"response_format": format_})  # fmt: skip
    jsonschema.validate(json.loads(completion.choices[0].text), ANSWER_SCHEMA)


def test_tool_choices_and_streamed_call_deltas(gateway: Stack) -> None:
    client = openai_client(gateway)
    tools: Any = [WEATHER_TOOL, TIME_TOOL]
    named = client.chat.completions.create(model="smollm2", messages=QUESTION, tools=tools, max_tokens=80,
                                           tool_choice=PICK)  # fmt: skip
    (call,) = named.choices[0].message.tool_calls or []
    assert named.choices[0].finish_reason == "tool_calls" and named.choices[0].message.content is None
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])  # type: ignore[index]
    required = client.chat.completions.create(model="smollm2", messages=QUESTION, tools=tools, tool_choice="required",
                                              max_tokens=80)  # fmt: skip
    assert required.choices[0].message.tool_calls and required.choices[0].finish_reason == "tool_calls"
    for choice in ("auto", "none"):
        answer = client.chat.completions.create(model="smollm2", messages=QUESTION, tools=tools, tool_choice=choice,
                                                max_tokens=40)  # fmt: skip
        message = answer.choices[0].message
        assert message.content or message.tool_calls
        if choice == "none":
            assert not message.tool_calls and answer.choices[0].finish_reason in ("stop", "length")
    # streamed: the call's id and name first, then its arguments in fragments; assembled, the same call
    stream = client.chat.completions.create(model="smollm2", messages=QUESTION, tools=tools, max_tokens=80,
                                            tool_choice=PICK, stream=True)  # fmt: skip
    heads, arguments, reasons = [], "", []
    for chunk in stream:
        for part in chunk.choices:
            reasons.append(part.finish_reason)
            for delta in part.delta.tool_calls or []:
                assert delta.index == 0
                if delta.id:
                    heads.append((delta.id, delta.function.name if delta.function else None))
                arguments += (delta.function.arguments or "") if delta.function else ""
    assert len(heads) == 1 and heads[0][1] == "get_weather" and reasons[-1] == "tool_calls"
    assert json.loads(arguments) == json.loads(call.function.arguments), "greedy: the same call, streamed"
    # the call's result sent back with role "tool": the conversation goes on
    history = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear", "celsius": 21}'}]  # fmt: skip
    after = client.chat.completions.create(model="smollm2", messages=history, tools=tools, max_tokens=40,  # type: ignore[arg-type]
                                           tool_choice="none")  # fmt: skip
    assert after.choices[0].message.content


def test_bad_constraints_are_openai_400s_and_the_next_request_is_served(gateway: Stack) -> None:
    client = openai_client(gateway)
    strange = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "a": {"type": "strange"}}}}}  # fmt: skip
    cases: list[tuple[dict[str, Any], tuple[str, ...], str]] = [
        ({"response_format": strange}, ("response_format",), "strange"),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, ("tools", "tools.0.function.name"), ""),
        ({"tools": [TIME_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_date"}}},
         ("tool_choice",), "get_date"),
        ({"tool_choice": "required"}, ("tool_choice",), "tools"),
        ({"logprobs": True, "top_logprobs": 25}, ("logprobs", "top_logprobs"), ""),
    ]  # fmt: skip
    for extra, params, word in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=8, **extra)
        body: Any = refused.value.body
        assert body["type"] == "invalid_request_error" and body["param"] in params, (extra, body)
        assert word in body["message"], (extra, body)
    assert client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=4).choices[0].message.content


def test_langchain_structured_output_and_bound_tools(gateway: Stack) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    assert gateway.state is not None
    chat = ChatOpenAI(base_url=gateway.state.gateway_url, api_key="unused", model="smollm2", max_tokens=80,  # type: ignore[arg-type]
                      temperature=0, max_retries=0)  # fmt: skip
    found = chat.with_structured_output(Weather, method="json_schema").invoke("The weather in Paris?")
    assert isinstance(found, Weather)

    @tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """The current weather in a city."""
        return "sunny"

    message = chat.bind_tools([get_weather], tool_choice="get_weather").invoke("The weather in Paris?")
    (call,) = message.tool_calls
    assert call["name"] == "get_weather" and set(call["args"]) == {"city", "unit"} and call["id"]


def test_pydantic_ai_agent_returns_a_typed_result(gateway: Stack) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    assert gateway.state is not None
    provider = OpenAIProvider(base_url=gateway.state.gateway_url, api_key="unused")
    agent = Agent(OpenAIChatModel("smollm2", provider=provider), output_type=Weather,
                  model_settings={"max_tokens": 80, "temperature": 0})  # fmt: skip
    result = asyncio.run(agent.run("The weather in Paris?"))
    assert isinstance(result.output, Weather)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sdk_chat_returns_parsed_objects_and_tool_calls(gateway: Stack, protocol: str) -> None:
    server = gateway.server
    with Client(server.http_url if protocol == "http" else server.grpc_url, timeout=300) as client:
        result = client.chat(QUESTION, model="smollm2", response_format=Weather, max_tokens=80)
        assert isinstance(result, ChatResult) and isinstance(result.parsed, Weather)
        assert result.finish_reason == "stop" and result.usage and result.usage.completion_tokens > 0
        as_dict = client.chat(QUESTION, model="smollm2", response_format=ANSWER_SCHEMA, max_tokens=80)
        jsonschema.validate(as_dict.parsed, ANSWER_SCHEMA)
        called = client.chat(QUESTION, model="smollm2", tools=[WEATHER_TOOL], tool_choice="get_weather", max_tokens=80)
        (call,) = called.tool_calls
        assert isinstance(call, ToolCall) and call.name == "get_weather" and called.finish_reason == "tool_calls"
        assert set(call.parsed_arguments()) == {"city", "unit"} and called.parsed is None
        with client.chat(QUESTION, model="smollm2", tools=[WEATHER_TOOL], tool_choice="required", max_tokens=80,
                         stream=True) as stream:  # fmt: skip
            text = "".join(stream)
        assert stream.tool_calls and stream.tool_calls[0].name == "get_weather" and text.startswith("{")
        cut = client.chat(QUESTION, model="smollm2", response_format=ANSWER_SCHEMA, max_tokens=3)
        assert cut.finish_reason == "length" and cut.parsed is None, "a cut answer is not parsed, and says why"
        with pytest.raises(InvalidInputError, match="tool_choice"):
            client.chat(QUESTION, model="smollm2", tools=[WEATHER_TOOL], tool_choice="get_time")
        with pytest.raises(InvalidInputError, match="strange"):
            client.chat(QUESTION, model="smollm2", response_format={"type": "strange"})
        assert client.chat(QUESTION, model="smollm2", max_tokens=4), "the model serves the next request"


def test_logprobs_in_openais_shapes(gateway: Stack) -> None:
    """Chat's ``logprobs.content`` (streamed with the chunks too) and the legacy completions' shape; the
    OpenVINO engine gives each chosen token's, the transformers engine alternatives too."""
    client = openai_client(gateway)
    answer = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=12, logprobs=True)
    content = answer.choices[0].logprobs.content if answer.choices[0].logprobs else None
    assert content and answer.usage and len(content) == answer.usage.completion_tokens
    assert all(entry.logprob <= 0 and entry.top_logprobs == [] and entry.bytes for entry in content)
    plain = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=12)
    assert answer.choices[0].message.content == plain.choices[0].message.content and plain.choices[0].logprobs is None
    streamed = [part.choices[0].logprobs.content or [] for part in client.chat.completions.create(
        model="smollm2", messages=QUESTION, max_tokens=12, logprobs=True, stream=True)
        if part.choices and part.choices[0].logprobs]  # fmt: skip
    assert [e.token for chunk in streamed for e in chunk] == [e.token for e in content]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=4, logprobs=True, top_logprobs=2)
    body: Any = refused.value.body
    assert body["param"] == "top_logprobs" and "OpenVINO engine" in body["message"]
    tiny = client.completions.create(model="writer", prompt="Once upon a time", max_tokens=6, logprobs=2)
    found = tiny.choices[0].logprobs
    assert found and found.tokens and found.token_logprobs and found.top_logprobs and found.text_offset is not None
    assert len(found.tokens) == len(found.token_logprobs) == len(found.top_logprobs)
    assert all(len(top) <= 2 for top in found.top_logprobs)
