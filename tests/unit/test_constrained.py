"""Constrained answers and tool calls: the runtime's pure parts, and the text-generation template's
transformers engine stepped by hand on a tiny Llama (the OpenVINO engine's are in test_openvino_engine.py).

A tiny random model writes nonsense, so the schemas here leave it few choices (booleans, enums, short strings):
the grammar then finishes the answer, and a finished answer must parse and validate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from generation_helpers import last, request, run, text_of
from template_harness import instantiate

from tritonhf.errors import InvalidInputError
from tritonhf.gallery import AddRequest, add_model
from tritonhf.runtime import tools
from tritonhf.runtime.common import BadRequest
from tritonhf.sdk._errors import error_for

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "celsius": {"type": "boolean"}},
            "required": ["city", "celsius"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ANSWER = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "mood": {"enum": ["happy", "sad"]}},
    "required": ["ok", "mood"],
    "additionalProperties": False,
}


# ---------------------------------------------------------------------------------------------- runtime/tools.py


def test_calls_are_read_in_each_format_and_other_text_is_content() -> None:
    names = ["get_weather", "get_time"]
    content, calls = tools.parse_calls('{"name": "get_weather", "arguments": {"city": "Paris"}}', names)
    assert content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]
    text = 'Let me look.\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n<tool_call>[{"name": ' \
        '"get_weather", "parameters": {"city": "Rome"}}]</tool_call>'  # fmt: skip
    content, calls = tools.parse_calls(text, names)
    assert content == "Let me look." and [c["name"] for c in calls] == ["get_time", "get_weather"]
    assert json.loads(calls[1]["arguments"]) == {"city": "Rome"} and calls[0]["id"] != calls[1]["id"]
    for plain in ("Paris is sunny.", '{"name": "unknown", "arguments": {}}', "<tool_call>not json</tool_call>", "{"):
        assert tools.parse_calls(plain, names) == (plain, [])


def test_a_required_call_schema_holds_name_and_arguments() -> None:
    schema = json.loads(tools.call_schema([WEATHER, TIME], ["get_weather"]))
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Rome", "celsius": True}}, schema)
    for wrong in ({"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    either = json.loads(tools.call_schema([WEATHER, TIME], ["get_weather", "get_time"]))
    jsonschema.validate({"name": "get_time", "arguments": {}}, either)


def test_tool_choice_and_bad_tools_are_named() -> None:
    assert tools.resolve_choice(None, [WEATHER, TIME]) == ("auto", ["get_weather", "get_time"])
    assert tools.resolve_choice("get_time", [WEATHER, TIME]) == ("required", ["get_time"])
    assert tools.resolve_choice("none", [WEATHER])[0] == "none"
    with pytest.raises(BadRequest, match=r"tool_choice.*'get_date'.*get_weather"):
        tools.resolve_choice("get_date", [WEATHER])
    cases = {
        '[{"type": "function", "function": {"description": "no name"}}]': r"tools\[0\].function.name",
        '[{"type": "retrieval"}]': r"tools\[0\].*function tools only",
        json.dumps([WEATHER, WEATHER]): "given twice",
        "[]": "non-empty",
        "{": "not JSON",
        json.dumps([TIME] * 200): "at most 128",
        json.dumps([{"type": "function", "function": {"name": "x" * 100_000}}]): "over 64 KiB",
    }
    for text, message in cases.items():
        with pytest.raises(BadRequest, match=message):
            tools.check_tools(text)
    with pytest.raises(BadRequest, match=r"json_schema.*JSON Schema object"):
        tools.check_schema("[1, 2]")


def test_messages_for_a_template_without_tools_carry_the_generic_prompt() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
    ]
    shaped = tools.template_messages(messages, [TIME], template_takes_tools=False)
    assert shaped[0]["content"].startswith("Be brief.") and '"name": "get_time"' in shaped[0]["content"]
    assert shaped[2] == {"role": "assistant", "content": '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'}
    assert shaped[3] == {"role": "user", "content": "<tool_response>\nnoon\n</tool_response>"}
    hf = tools.template_messages(messages, [TIME], template_takes_tools=True)
    assert hf[0] == messages[0] and hf[2]["tool_calls"][0]["function"]["arguments"] == {}
    assert hf[3]["role"] == "tool"


def test_streamed_content_holds_back_what_may_become_a_call() -> None:
    assert tools.safe_to_stream("Hello there") == len("Hello there")
    assert tools.safe_to_stream("Hello <tool") == len("Hello ")
    assert tools.safe_to_stream('Hi <tool_call>{"name"') == len("Hi ")
    assert tools.safe_to_stream(' {"name": "get') == 0


# ---------------------------------------------------------------------------------------------- the template


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory, tiny: dict[str, Path]) -> Any:
    folder = add_model(
        AddRequest("text-generation", str(tiny["llama"]), tmp_path_factory.mktemp("repo"), name="pt",
                   engine="transformers")
    )  # fmt: skip
    model = instantiate(folder)
    model.finalize()  # the tests step the scheduler themselves
    return model


def _alone(model: Any, prompt: str, **options: Any) -> str:
    req = request(prompt, **options)
    model.execute([req])
    run(model)
    return text_of(req)


def test_a_schema_holds_the_answer_and_changes_no_neighbour(llama: Any) -> None:
    free = ["the movie", "alice visited paris"]
    solo = [_alone(llama, prompt, max_tokens=12) for prompt in free]
    held = [request("Answer in JSON:", json_schema=ANSWER, max_tokens=40),
            request("the weather", json_schema=ANSWER, max_tokens=40, temperature=0.9, seed=7)]  # fmt: skip
    others = [request(prompt, max_tokens=12) for prompt in free]
    llama.execute([held[0], others[0], held[1], others[1]])
    run(llama)
    assert [text_of(r) for r in others] == solo, "a constrained neighbour changed a free answer"
    for req in held:
        assert last(req, "finish_reason").decode() == "stop"
        jsonschema.validate(json.loads(text_of(req)), ANSWER)
    assert llama.grammars.cache_bytes() > 0
    again = request("the weather", json_schema=ANSWER, max_tokens=40, temperature=0.9, seed=7)
    llama.execute([again])
    run(llama)
    assert text_of(again) == text_of(held[1]), "a seeded constrained answer is the same alone"


def test_a_schema_the_compiler_refuses_fails_that_request_alone(llama: Any) -> None:
    bad = request("x", json_schema={"type": "object", "properties": {"a": {"type": "strange"}}})
    not_json = request("x", json_schema="{nope")
    fine = request("the movie", max_tokens=6)
    llama.execute([bad, not_json, fine])
    run(llama)
    assert 'Unsupported type "strange"' in bad.sender.responses[0].error().message()
    assert "json_schema" in bad.sender.responses[0].error().message()
    assert "not JSON" in not_json.sender.responses[0].error().message()
    assert last(fine, "finish_reason").decode() in ("stop", "length")


def test_a_required_call_parses_and_auto_lets_the_model_choose(llama: Any) -> None:
    messages = json.dumps([{"role": "user", "content": "What is the weather in Rome?"}])
    # the tiny model's context is 128 tokens: the tool prompt's start is cut (truncate), the grammar is not
    named = request(messages, chat=True, tools=[WEATHER, TIME], tool_choice="get_weather", max_tokens=96, truncate=True)
    required = request(messages, chat=True, tools=[WEATHER, TIME], tool_choice="required", max_tokens=96, truncate=True)
    auto = request(messages, chat=True, tools=[WEATHER, TIME], max_tokens=8, truncate=True)
    llama.execute([named, required, auto])
    run(llama)
    for req in (named, required):
        assert last(req, "finish_reason").decode() == "tool_calls"
        (call,) = json.loads(last(req, "tool_calls").decode())
        assert call["id"].startswith("call_") and last(req, "content").decode() == ""
        if req is named:
            assert call["name"] == "get_weather"
            jsonschema.validate(json.loads(call["arguments"]), WEATHER["function"]["parameters"])  # type: ignore[index]
    assert last(auto, "finish_reason").decode() in ("stop", "length")  # the tiny model does not call


def test_tool_inputs_are_checked(llama: Any) -> None:
    messages = json.dumps([{"role": "user", "content": "hi"}])
    cases = {
        "needs chat=true": request("hi", tools=[TIME]),
        "no tools were sent": request(messages, chat=True, tool_choice="required"),
        "not among the tools": request(messages, chat=True, tools=[TIME], tool_choice="get_weather"),
        "cannot also call a tool": request(messages, chat=True, tools=[TIME], json_schema=ANSWER),
        "function.name": request(messages, chat=True, tools=[{"type": "function", "function": {}}]),
        # JSON carries a lone surrogate into a tool's reply; no tokenizer takes it
        "valid Unicode": request(json.dumps([{"role": "tool", "content": "\udc00"}]), chat=True, tools=[TIME]),
    }
    llama.execute(list(cases.values()))
    for message, req in cases.items():
        said = req.sender.responses[0].error().message()
        assert message in said and req.sender.closed
        # inside a stream a refusal has no status: the SDK tells it from a failure by "input '" (sdk/_errors.py)
        assert isinstance(error_for("", said, "pt", "grpc://x"), InvalidInputError), said


# ---------------------------------------------------------------------------------------------- the SDK's side


def test_the_sdk_takes_a_model_class_a_schema_or_openais_shapes() -> None:
    from pydantic import BaseModel

    from tritonhf.errors import InvalidInputError
    from tritonhf.sdk._generation import constraint, generation_inputs

    class Mood(BaseModel):
        ok: bool

    found = constraint(Mood)
    assert found is not None
    assert json.loads(found.schema or "")["properties"] == {"ok": {"title": "Ok", "type": "boolean"}}
    assert found.parse('{"ok": true}') == Mood(ok=True)
    assert constraint(ANSWER) == constraint({"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}})
    assert (constraint({"type": "json_object"}) or found).schema == '{"type": "object"}'
    assert constraint(None) is None and (constraint({"type": "text"}) or found).schema is None
    tools_only = constraint(None, [WEATHER], "get_weather")
    assert tools_only is not None and json.loads(tools_only.tools or "") == [WEATHER]
    inputs = generation_inputs("[]", True, {"max_tokens": 4}, tools_only)
    assert set(inputs) == {"text_input", "max_tokens", "chat", "tools", "tool_choice"}
    for bad, message in ((42, "response_format"), ("json", "response_format")):
        with pytest.raises(InvalidInputError, match=message):
            constraint(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="tools must be a list"):
        constraint(None, WEATHER)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="tool_choice"):
        constraint(None, [WEATHER], {"name": "get_weather"})  # type: ignore[arg-type]


def _entries(req: Any) -> list[Any]:
    return [entry for r in req.sender.responses if not r.has_error()
            for entry in json.loads(next((t.as_numpy()[0, 0] for t in r.output_tensors if t.name() == "logprobs"),
                                         b"[]"))]  # fmt: skip


def test_logprobs_come_with_the_tokens_they_made(llama: Any) -> None:
    """Each token's log-probability and its best alternatives, under the model's distribution."""
    asked = request("the movie", max_tokens=10, logprobs=3)
    plain = request("the movie", max_tokens=10)
    held = request("Answer in JSON:", json_schema=ANSWER, max_tokens=40, logprobs=0)
    llama.execute([asked, plain, held])
    run(llama)
    assert text_of(asked) == text_of(plain), "asking for logprobs changes no token"
    entries = _entries(asked)
    assert len(entries) == last(asked, "completion_tokens") and not _entries(plain)
    for token, logprob, top in entries:  # greedy: the token chosen is the best alternative
        assert logprob <= 0 and len(top) == 3 and top[0] == [token, pytest.approx(logprob)]
        assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
    assert "".join(token for token, _, _ in entries).strip() == text_of(asked).strip()
    assert all(top == [] for _, _, top in _entries(held)) and len(_entries(held)) == last(held, "completion_tokens")
    # held to a schema, a forbidden token is no alternative (its -inf would be JSON's null, no number)
    masked = request("Answer in JSON:", json_schema=ANSWER, max_tokens=40, logprobs=5)
    llama.execute([masked])
    run(llama)
    assert all(value > float("-inf") for _, _, top in _entries(masked) for _, value in top)
    assert any(len(top) < 5 for _, _, top in _entries(masked)), "where the grammar leaves fewer than 5, fewer come"
    too_many = request("x", logprobs=21)
    llama.execute([too_many])
    assert "logprobs" in too_many.sender.responses[0].error().message()
