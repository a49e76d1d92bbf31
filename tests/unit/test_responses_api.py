"""The Responses API's pure parts: its store's bounds, and how input items become chat messages."""

from __future__ import annotations

import asyncio
import time

import pytest

from tritonhf.serve.errors import GatewayError
from tritonhf.serve.limits import Limits
from tritonhf.serve.responses import ResponseStore, _input_messages
from tritonhf.serve.schemas import ResponsesBody


def test_the_store_keeps_the_newest_for_a_while_and_names_what_it_no_longer_has() -> None:
    store = ResponseStore(size=2, seconds=3600)
    for ident in ("resp_a", "resp_b", "resp_c"):
        store.put({"id": ident}, [{"role": "user", "content": ident}])
    assert store.get("resp_c").conversation == [{"role": "user", "content": "resp_c"}]
    with pytest.raises(GatewayError, match="resp_a") as evicted:  # past the size bound: the oldest went first
        store.get("resp_a", "previous_response_id")
    assert evicted.value.status == 404 and evicted.value.param == "previous_response_id"
    store.delete("resp_b")
    with pytest.raises(GatewayError, match="resp_b"):
        store.delete("resp_b")
    brief = ResponseStore(size=10, seconds=0.05)
    brief.put({"id": "resp_x"}, [])
    time.sleep(0.1)
    with pytest.raises(GatewayError, match=r"resp_x.*expired"):
        brief.get("resp_x")


def test_input_items_become_the_chat_messages_a_template_renders() -> None:
    body = ResponsesBody.model_validate({"model": "m", "input": [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                        {"type": "input_text", "text": "in Paris?"}]},
        {"type": "reasoning", "summary": []},  # sent back by clients that keep the whole output: not shown again
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
    ]})  # fmt: skip
    assert asyncio.run(_input_messages(body, Limits())) == ([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [  # calls made together: one assistant message
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
    ], 0)  # fmt: skip
    assert asyncio.run(_input_messages(ResponsesBody.model_validate({"model": "m", "input": "Hi"}), Limits())) == (
        [{"role": "user", "content": "Hi"}],
        0,
    )
