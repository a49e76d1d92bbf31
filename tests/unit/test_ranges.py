"""Every numeric option's range, stated once (tritonhf/runtime/ranges.py) and held alike by the SDK, the gateway's
schema and the templates; no value a caller chooses escapes a public method as anything but a typed error.

The SDK side is a property test: any value hypothesis draws for an option either reaches the in-memory Triton
within its range (the seed as its int64 bit pattern) or is an ``InvalidInputError`` naming the option, before any
request is sent. The regression seed (2**63 and above: an ``OverflowError`` from numpy) fails on the old code.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritonhf import Client, InvalidInputError
from tritonhf.errors import TritonHFError
from tritonhf.runtime.ranges import ROLES, SEED_MAX, seed_from_wire, seed_to_wire
from tritonhf.sdk.testing import FakeServer, MemoryTransport, StatusError

NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from([2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1, 2**64, -1, 0, 1, 2**31 - 1, 2**31]),
)


SENT: list[dict[str, Any]] = []  # what reached the in-memory Triton's generation model
HEARD: list[dict[str, Any]] = []  # ... and its speech model


@pytest.fixture(scope="module")
def server() -> FakeServer:
    fake = FakeServer()

    def answer(inputs: dict[str, Any]) -> list[dict[str, Any]]:
        SENT.append(dict(inputs))
        return [{"text_output": np.array([b"ok"], dtype=object), "finish_reason": np.array([b"stop"], dtype=object)}]

    def transcribe(inputs: dict[str, Any]) -> dict[str, Any]:
        HEARD.append(dict(inputs))
        raise StatusError(500, "recorded")

    fake.add("writer", "text-generation", stream=answer)
    fake.add("asr", "automatic-speech-recognition", transcribe)
    return fake


def test_the_seed_travels_as_its_64_bits_and_comes_back_whole() -> None:
    for seed in (0, 1, 2**63 - 1, 2**63, 2**63 + 5, SEED_MAX):
        wire = seed_to_wire(seed)
        assert -(2**63) <= wire < 2**63 and seed_from_wire(np.int64(wire)) == seed
    assert len({seed_to_wire(s) for s in (2**63 - 1, 2**63, SEED_MAX, 0)}) == 4, "distinct seeds stay distinct"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(["max_tokens", "temperature", "top_p", "seed"]), value=NUMBERS)
def test_a_generation_option_reaches_triton_in_range_or_is_a_typed_error(
    server: FakeServer, option: str, value: Any
) -> None:
    before = len(SENT)
    with Client(transport=MemoryTransport(server), timeout=5) as client:
        try:
            "".join(client.generate("hi", model="writer", stream=True, **{option: value}))
        except TritonHFError as error:
            assert isinstance(error, InvalidInputError) and option in str(error), error
            assert len(SENT) == before, "a refused option sends nothing"
            return
    sent = np.asarray(SENT[-1][option]).reshape(-1)[0]
    if option == "seed":
        assert seed_from_wire(sent) == value and 0 <= value <= SEED_MAX
    elif option == "max_tokens":
        assert sent == value and 1 <= value <= 2**31 - 1
    else:
        assert np.isfinite(sent) and (0 <= sent <= 2 if option == "temperature" else 0 < sent <= 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(["temperature", "seed", "max_tokens"]), value=NUMBERS)
def test_a_transcription_option_is_in_range_or_a_typed_error(server: FakeServer, option: str, value: Any) -> None:
    before = len(HEARD)
    with Client(transport=MemoryTransport(server), timeout=5) as client:
        try:
            client.transcribe(b"RIFF....WAVE", model="asr", **{option: value})
        except InvalidInputError as error:
            assert option in str(error) and len(HEARD) == before, error
            return
        except TritonHFError:
            pass  # in range: the fake model records the call, then fails it (typed)
    if option.upper() not in HEARD[-1]:
        assert option == "temperature" and value == 0, "only greedy decoding is left unsent (the default)"
        return
    sent = np.asarray(HEARD[-1][option.upper()]).reshape(-1)[0]
    if option == "seed":
        assert seed_from_wire(sent) == value
    elif option == "temperature":
        assert 0 <= sent <= 1, "speech: OpenAI's 0 to 1"
    else:
        assert 1 <= sent <= 2**31 - 1


def test_the_gateway_schema_states_the_ranges_and_roles() -> None:
    from tritonhf.sdk import ModelInfo
    from tritonhf.serve.app import create_app, with_model_names

    schema = with_model_names(
        create_app("grpc://127.0.0.1:9").openapi(),
        [ModelInfo("smollm2", "1", "READY", "text-generation"), ModelInfo("e", "1", "READY", "feature-extraction")],
    )
    bodies = schema["components"]["schemas"]
    seed = bodies["ChatBody"]["properties"]["seed"]["anyOf"][0]
    assert (seed["minimum"], seed["maximum"]) == (0, SEED_MAX), "exact, not the float 2**64"
    assert tuple(bodies["ChatMessage"]["properties"]["role"]["enum"]) == ROLES
    assert bodies["ChatBody"]["properties"]["model"]["enum"] == ["smollm2"]
    temperature = bodies["ChatBody"]["properties"]["temperature"]["anyOf"][0]
    assert (temperature["minimum"], temperature["maximum"]) == (0, 2)
    assert "model" not in bodies["TeiEmbedBody"].get("required", []), "one embedding model: 'model' may be left out"
    several = with_model_names(
        create_app("grpc://127.0.0.1:9").openapi(),
        [ModelInfo(name, "1", "READY", "feature-extraction") for name in ("a", "b")],
    )
    assert "model" in several["components"]["schemas"]["TeiEmbedBody"]["required"], "several: it is required"
    info = next(p for p in several["paths"]["/info"]["get"]["parameters"] if p["name"] == "model")
    assert info["required"] and info["schema"]["anyOf"][0]["enum"] == ["a", "b"]
    responses = schema["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert responses["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/ChatCompletion")
    assert responses["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/OpenAIError")


def test_the_gateway_refuses_out_of_range_values_and_roles_by_name_before_triton() -> None:
    from fastapi.testclient import TestClient

    from tritonhf.serve.app import create_app

    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with TestClient(create_app("grpc://127.0.0.1:9")) as client:
        for extra, param in (
            ({"seed": 2**64}, "seed"),
            ({"seed": -1}, "seed"),
            ({"temperature": 2.5}, "temperature"),
            ({"top_p": 0}, "top_p"),
            ({"max_tokens": 2**31}, "max_tokens"),
            ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ):
            answer = client.post("/v1/chat/completions", json={**chat, **extra})
            assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
        cohere_shape = client.post("/v2/rerank", json={})
        assert cohere_shape.status_code == 400 and "message" in cohere_shape.json()["error"], "OpenAI's shape on /v2"
        assert client.get("/docs").status_code == 200 and "swagger" in client.get("/docs").text.lower()


def test_an_unforeseen_error_is_json_with_a_request_id_that_the_log_carries(caplog: pytest.LogCaptureFixture) -> None:
    from fastapi.testclient import TestClient

    from tritonhf.serve.app import create_app

    app = create_app("grpc://127.0.0.1:9")

    @app.get("/v1/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/v1/boom")
    ident = answer.headers["x-request-id"]
    assert answer.status_code == 500 and answer.json()["error"]["code"] == "internal_error"
    assert ident in answer.json()["error"]["message"]
    assert any(ident in record.getMessage() and record.exc_info for record in caplog.records)


CALLS = {  # an SDK method with a numeric option -> how to call it with that option's value
    "classify top_k": lambda client, v: client.classify("a text", model="m", top_k=v),
    "answer top_k": lambda client, v: client.answer("who?", "alice went home", model="m", top_k=v),
    "fill_mask top_k": lambda client, v: client.fill_mask("a [MASK] text", model="m", top_k=v),
    "rerank top_n": lambda client, v: client.rerank("q", ["a", "b"], model="m", top_n=v),
    "generate max_tokens": lambda client, v: client.generate("hi", model="m", max_tokens=v),
}


@settings(max_examples=200, deadline=None)
@given(call=st.sampled_from(sorted(CALLS)), value=NUMBERS)
def test_every_public_method_raises_only_tritonhf_errors_for_any_option_value(call: str, value: Any) -> None:
    """Whatever number (or NaN, or 2**70) an option gets, a public method raises a tritonhf error or answers; never
    an OverflowError, ValueError or numpy error. The in-memory server knows no model "m": a value the SDK lets
    through meets that typed error instead."""
    with Client(transport=MemoryTransport(FakeServer()), timeout=5) as client, contextlib.suppress(TritonHFError):
        CALLS[call](client, value)
