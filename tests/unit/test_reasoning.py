"""Reasoning models: the split of an answer into its thinking and its content (runtime/reasoning.py), and the
generation template on a tiny model that thinks by script (harness/tiny_models.py's thinker): the thinking streamed
apart, turned off by the chat template's keywords, and a grammar that waits for the thinking to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from generation_helpers import last, request, run, text_of
from template_harness import instantiate

from harness.tiny_models import THINKER_SAYS, THINKER_THINKS
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.listing import parameters_of_folder
from tritonhf.runtime.reasoning import Split, opened_in_prompt, split, thinks

QUESTION = json.dumps([{"role": "user", "content": "tell me about this"}])


def test_an_answer_splits_into_its_thinking_and_its_content_as_it_grows() -> None:
    assert split("let me see</think>\n\nHello", True, False) == Split("let me see", "Hello", False)
    # a marker's start is held back until it is one or is not
    assert split("let me see</thi", True, False) == Split("let me see", "", True)
    assert split("let me see</thi", True, True) == Split("let me see</thi", "", True)
    # the answer decides: a block it opens first, or none
    assert split("  <thi", None, False) == Split("", "", True)
    assert split("<think>hmm</think>Yes", None, False) == Split("hmm", "Yes", False)
    assert split("Yes, <think> is a tag", None, False) == Split("", "Yes, <think> is a tag", False)
    assert split(" Yes", False, False) == Split("", "Yes", False)  # the prompt closed the thinking
    # every text given out stays given out: each split's parts extend the last one's
    text, last_split = "<think>a b</think> c d", Split("", "", True)
    for end in range(len(text) + 1):
        found = split(text[:end], None, end == len(text))
        assert found.reasoning.startswith(last_split.reasoning) and found.content.startswith(last_split.content)
        last_split = found
    assert last_split == Split("a b", "c d", False)
    assert opened_in_prompt("<|assistant|><think>\n") is True
    assert opened_in_prompt("<|assistant|><think>\n\n</think>\n\n") is False
    assert opened_in_prompt("<|assistant|>") is None
    assert thinks("{% if x %}<think>{% endif %}</think>") and not thinks("{{ messages }}")


@pytest.fixture(scope="module")
def thinker(tmp_path_factory: pytest.TempPathFactory, tiny: dict[str, Path]) -> Any:
    folder = add_model(AddRequest("text-generation", str(tiny["thinker"]), tmp_path_factory.mktemp("repo"),
                                  name="thinker", engine="transformers"))  # fmt: skip
    assert parameters_of_folder(folder)["reasoning"] == "think"  # read from its chat template at add
    assert "Reasoning: the chat template writes a <think> block" in (folder / "config.pbtxt").read_text()
    model = instantiate(folder)
    model.finalize()  # no background thread: the test steps the scheduler itself
    return model


def _answer(model: Any, **options: Any) -> Any:
    found = request(QUESTION, chat=True, **{"max_tokens": 24, **options})
    model.execute([found])
    run(model)
    return found


def test_the_thinking_streams_apart_and_the_template_keywords_turn_it_off(thinker: Any) -> None:
    for options in ({}, {"temperature": 1.0, "seed": 5}):  # the script is the same sampled
        answer = _answer(thinker, **options)
        assert text_of(answer, "reasoning_output") == THINKER_THINKS
        assert text_of(answer) == THINKER_SAYS.strip()
        thinking = len(thinker.tokenizer(THINKER_THINKS + "</think>", add_special_tokens=False)["input_ids"])
        assert last(answer, "reasoning_tokens") == thinking and last(answer, "finish_reason").decode() == "stop"
    plain = _answer(thinker, chat_template_kwargs={"enable_thinking": False})
    assert text_of(plain) == THINKER_SAYS.strip() and text_of(plain, "reasoning_output") == ""
    assert last(plain, "reasoning_tokens") == 0
    for bad, word in (({"tokenize": True}, "tokenize"), ("[1]", "JSON object")):
        refused = _answer(thinker, chat_template_kwargs=bad)
        assert refused.sender.responses[0].has_error() and word in refused.sender.responses[0].error().message()


def test_a_grammar_holds_the_answer_after_the_thinking(thinker: Any) -> None:
    schema = {"type": "object", "properties": {"mood": {"enum": ["calm", "sad"]}}, "required": ["mood"],
              "additionalProperties": False}  # fmt: skip
    answer = _answer(thinker, json_schema=schema)
    # the thinking as the model writes it, unconstrained; then the schema holds every token
    assert text_of(answer, "reasoning_output") == THINKER_THINKS
    assert json.loads(text_of(answer))["mood"] in ("calm", "sad")
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}}  # fmt: skip
    called = _answer(thinker, tools=[weather], tool_choice="required", max_tokens=80)
    assert text_of(called, "reasoning_output") == THINKER_THINKS
    (call,) = json.loads(last(called, "tool_calls").decode())
    assert call["name"] == "get_weather" and json.loads(call["arguments"])["city"] in ("Paris", "Rome")


def test_an_engine_that_cannot_hold_a_grammar_back_refuses_it_while_the_model_thinks(
    thinker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(thinker.engine, "holds_grammar_back", False)  # as the OpenVINO engine: from the first token
    schema = {"type": "object", "properties": {"mood": {"enum": ["calm"]}}, "required": ["mood"]}
    refused = _answer(thinker, json_schema=schema)
    (error,) = [response.error().message() for response in refused.sender.responses if response.has_error()]
    assert "thinks before it answers" in error and "enable_thinking" in error and "--engine transformers" in error
    served = _answer(thinker, json_schema=schema, chat_template_kwargs={"enable_thinking": False})
    assert json.loads(text_of(served)) == {"mood": "calm"} and text_of(served, "reasoning_output") == ""
