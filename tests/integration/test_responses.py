"""OpenAI's Responses API (``/v1/responses``) on the real SmolLM2-135M-Instruct GGUF, through the real `openai` package
and the OpenAI Agents SDK: plain, streamed (typed events), stored and continued, with a function tool round trip and a
JSON Schema. Greedy answers are compared with ``/v1/chat/completions`` on the same messages: the same machinery
answers both, so the texts must be equal."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from openai_helpers import Weather, openai_client

from harness.invariance import ANSWER_SCHEMA, WEATHER_TOOL
from tritonhf.bootstrap import Stack

QUESTION = "What is the weather like in Paris today?"
TOOL: Any = {"type": "function", **WEATHER_TOOL["function"], "strict": True}  # type: ignore[dict-item]
PARAMETERS: Any = WEATHER_TOOL["function"]["parameters"]  # type: ignore[index]


@pytest.fixture(scope="module")
def gateway(served_stack: Stack) -> Stack:
    """The shared server's gateway (tests/integration/conftest.py); these tests use ``smollm2``."""
    return served_stack


def _chat(client: openai.OpenAI, messages: list[dict[str, Any]], max_tokens: int) -> str:
    found = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=max_tokens)  # type: ignore[arg-type]
    return found.choices[0].message.content or ""


def test_a_response_is_the_chat_answer_whole_streamed_stored_and_continued(gateway: Stack) -> None:
    client = openai_client(gateway)
    first = client.responses.create(model="smollm2", input=QUESTION, instructions="Answer briefly.",
                                    max_output_tokens=24)  # fmt: skip
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}]
    assert first.output_text and first.output_text == _chat(client, messages, 24)
    assert first.object == "response" and first.id.startswith("resp_") and first.model == "smollm2"
    assert first.status in ("completed", "incomplete") and first.usage is not None
    assert first.usage.input_tokens > 0 and 0 < first.usage.output_tokens <= 24
    if first.status == "incomplete":  # max_output_tokens cut it: said, as OpenAI says it
        assert first.incomplete_details is not None and first.incomplete_details.reason == "max_output_tokens"

    # streamed: OpenAI's typed events in their order, numbered; the deltas are the same text
    events = list(client.responses.create(model="smollm2", input=QUESTION, instructions="Answer briefly.",
                                          max_output_tokens=24, stream=True))  # fmt: skip
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]  # fmt: skip
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          f"response.{first.status}"]  # fmt: skip
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == first.output_text
    final: Any = events[-1]
    assert final.response.output_text == first.output_text and final.response.usage.output_tokens > 0
    # the SDK's stream helper assembles the same response from the events (it raises on events out of order)
    with client.responses.stream(model="smollm2", input=QUESTION, instructions="Answer briefly.",
                                 max_output_tokens=24) as stream:  # fmt: skip
        assembled: Any = list(stream)[-1]
    assert assembled.response.output_text == first.output_text

    # stored: read back, continued (the instructions are not carried over), deleted
    assert client.responses.retrieve(first.id).output_text == first.output_text
    second = client.responses.create(model="smollm2", input="And tomorrow?", previous_response_id=first.id,
                                     max_output_tokens=16)  # fmt: skip
    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "And tomorrow?"}]  # fmt: skip
    assert second.output_text == _chat(client, history, 16) and second.previous_response_id == first.id
    assert client.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError, match=first.id):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError, match=first.id) as gone:
        client.responses.create(model="smollm2", input="Again?", previous_response_id=first.id)
    assert gone.value.body["param"] == "previous_response_id"  # type: ignore[index]
    unkept = client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=4, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)


def test_a_function_tool_round_trip_and_a_schema(gateway: Stack) -> None:
    client = openai_client(gateway)
    named = client.responses.create(model="smollm2", input=QUESTION, tools=[TOOL], max_output_tokens=80,
                                    tool_choice={"type": "function", "name": "get_weather"})  # fmt: skip
    (call,) = [item for item in named.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), PARAMETERS)
    # streamed: the call's item, then its arguments in fragments; assembled, the same call (greedy)
    events = list(client.responses.create(model="smollm2", input=QUESTION, tools=[TOOL], max_output_tokens=80,
                                          tool_choice="required", stream=True))  # fmt: skip
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done: Any = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == arguments and json.loads(arguments) == json.loads(call.arguments)
    assert events[-1].type == "response.completed"
    # the result sent back as a function_call_output: the conversation goes on to a text answer
    after = client.responses.create(
        model="smollm2",
        tools=[TOOL],
        tool_choice="none",
        max_output_tokens=24,
        input=[{"role": "user", "content": QUESTION}, call.model_dump(exclude_none=True),  # type: ignore[list-item]
               {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "clear", "celsius": 21}'}],
    )  # fmt: skip
    assert after.output_text and not [item for item in after.output if item.type == "function_call"]
    # text.format: the answer is held to the schema; the SDK's parse gives the typed object
    format_: Any = {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}
    shaped = client.responses.create(model="smollm2", input=QUESTION, text={"format": format_}, max_output_tokens=80)
    jsonschema.validate(json.loads(shaped.output_text), ANSWER_SCHEMA)
    parsed = client.responses.parse(model="smollm2", input=QUESTION, text_format=Weather, max_output_tokens=80)
    assert isinstance(parsed.output_parsed, Weather)


def test_what_cannot_be_served_is_refused_by_name(gateway: Stack) -> None:
    assert gateway.state is not None
    base = {"model": "smollm2", "input": QUESTION, "max_output_tokens": 4}
    cases: list[tuple[dict[str, Any], str, int]] = [
        ({"tools": [{"type": "web_search"}]}, "tools", 400),
        ({"background": True}, "background", 400),
        ({"conversation": "conv_1"}, "conversation", 400),
        ({"input": [{"type": "input_image", "image_url": "x"}]}, "input", 400),
        ({"input": []}, "input", 400),
        ({"previous_response_id": "resp_unknown"}, "previous_response_id", 404),
        ({"tool_choice": "required"}, "tool_choice", 400),
    ]
    with httpx.Client(base_url=gateway.state.gateway_url, timeout=60) as http:
        for extra, param, status in cases:
            answer = http.post("/responses", json={**base, **extra})
            assert answer.status_code == status, (extra, answer.text)
            assert param in (answer.json()["error"]["param"] or ""), (extra, answer.json())
        assert http.post("/responses", json=base).status_code == 200  # the gateway still answers
        # alternatives asked are log-probabilities asked (the transformers engine gives both)
        scored = http.post("/responses", json={"model": "writer", "input": "hi", "max_output_tokens": 4,
                                               "top_logprobs": 2}).json()  # fmt: skip
        (message,) = [item for item in scored["output"] if item["type"] == "message"]
        entries = message["content"][0]["logprobs"]
        assert len(entries) == scored["usage"]["output_tokens"] and all(len(e["top_logprobs"]) == 2 for e in entries)


def test_the_agents_sdk_runs_an_agent_with_a_function_tool(gateway: Stack) -> None:
    agents = pytest.importorskip("agents")
    assert gateway.state is not None
    agents.set_tracing_disabled(True)  # traces go to OpenAI's servers otherwise
    calls: list[tuple[str, str]] = []
    url = gateway.state.gateway_url

    @agents.function_tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """The current weather in a city."""
        calls.append((city, unit))
        return f"Sunny and 21 degrees in {city}."

    def agent() -> Any:  # a client per event loop (run_sync runs its own)
        client = openai.AsyncOpenAI(base_url=url, api_key="unused-on-loopback", max_retries=0)
        model = agents.OpenAIResponsesModel(model="smollm2", openai_client=client)
        # the first turn must call the tool (a 135M model would not choose to); the next may answer (reset_tool_choice)
        settings = agents.ModelSettings(tool_choice="required", max_tokens=48)
        return agents.Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather], model=model,
                            model_settings=settings)  # fmt: skip

    result = agents.Runner.run_sync(agent(), QUESTION, max_turns=4)
    assert calls and isinstance(result.final_output, str) and result.final_output

    async def streamed() -> Any:  # the same run over the typed stream events
        run = agents.Runner.run_streamed(agent(), QUESTION, max_turns=4)
        async for _ in run.stream_events():
            pass
        return run.final_output

    final = asyncio.run(streamed())
    assert len(calls) == 2 and calls[0] == calls[1] and final == result.final_output  # greedy: the same run


def test_a_reasoning_models_thinking_comes_apart_on_both_routes(gateway: Stack) -> None:
    from harness.tiny_models import THINKER_SAYS, THINKER_THINKS

    client = openai_client(gateway)
    said, thought = THINKER_SAYS.strip(), THINKER_THINKS
    assert client.models.retrieve("thinker").model_extra["reasoning"] is True  # type: ignore[index]
    question: Any = [{"role": "user", "content": "tell me about this"}]
    answer: Any = client.chat.completions.create(model="thinker", messages=question, max_tokens=24)
    message = answer.choices[0].message
    assert message.content == said and message.model_extra["reasoning_content"] == thought
    assert answer.usage.completion_tokens_details.reasoning_tokens > 0
    chunks = list(client.chat.completions.create(model="thinker", messages=question, max_tokens=24, stream=True))
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert deltas[0].role == "assistant"  # the first delta carries the role, and it is the thinking's
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == thought
    assert "".join(d.content or "" for d in deltas) == said
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    plain: Any = client.chat.completions.create(model="thinker", messages=question, max_tokens=24, extra_body=off)
    assert plain.choices[0].message.content == said and "reasoning_content" not in plain.choices[0].message.model_extra

    # the Responses API: a reasoning item first, whole and streamed; effort "none" turns the thinking off
    response: Any = client.responses.create(model="thinker", input="tell me about this", max_output_tokens=24)
    reasoning, _ = response.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == thought and response.output_text == said
    thinking = answer.usage.completion_tokens_details.reasoning_tokens
    assert response.usage.output_tokens_details.reasoning_tokens == thinking
    events = list(client.responses.create(model="thinker", input="tell me about this", max_output_tokens=24,
                                          stream=True))  # fmt: skip
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == thought
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == said
    done = [(e.output_index, e.item.type) for e in events if e.type == "response.output_item.done"]
    assert done == [(0, "reasoning"), (1, "message")]
    quick: Any = client.responses.create(model="thinker", input="tell me about this", max_output_tokens=24,
                                         reasoning={"effort": "none"})  # fmt: skip
    assert [item.type for item in quick.output] == ["message"] and quick.output_text == said
    with pytest.raises(openai.BadRequestError, match="does not think") as refused:
        client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=4, reasoning={"effort": "high"})
    assert refused.value.body["param"] == "reasoning.effort"  # type: ignore[index]
