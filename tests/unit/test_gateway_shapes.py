"""The gateway's request bodies and the SDK's text checks, without a server.

OpenAI clients that serialise every field send explicit nulls; those mean "not given". Text
that cannot be encoded as UTF-8 (a lone surrogate from JSON's "\\ud800") is refused by the SDK
with the input's name, before anything is sent.
"""

from __future__ import annotations

import pytest

from tritonhf import Client, InvalidInputError
from tritonhf.sdk.testing import FakeServer, MemoryTransport
from tritonhf.serve.schemas import ChatBody, CompletionBody, EmbeddingBody, TeiEmbedBody


def test_explicit_nulls_are_unset() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi", "name": None}], "stream": None, "n": None,
            "temperature": None, "presence_penalty": None, "stream_options": {"include_usage": None}}  # fmt: skip
    chat = ChatBody.model_validate(body)
    assert chat.stream is False and chat.n == 1 and chat.temperature is None and chat.presence_penalty == 0.0
    assert chat.stream_options is not None and chat.stream_options.include_usage is False
    assert CompletionBody.model_validate({"model": "m", "prompt": "x", "echo": None}).echo is False
    embedding = EmbeddingBody.model_validate({"model": "m", "input": "x", "encoding_format": None})
    assert embedding.encoding_format == "float"
    tei = TeiEmbedBody.model_validate({"inputs": "x", "normalize": None, "truncate": None})
    assert tei.normalize is True and tei.truncate is False, "TEI's defaults: normalized, never cut unasked"
    with pytest.raises(ValueError, match="model"):
        ChatBody.model_validate({"model": None, "messages": []})  # a required field stays required


def test_text_that_is_not_unicode_is_refused_by_name() -> None:
    server = FakeServer()
    server.add("emb", "feature-extraction", lambda inputs: {}, output_dims={"EMBEDDING": 3})
    server.add("gen", "text-generation", stream=lambda inputs: [])
    with Client(transport=MemoryTransport(server)) as client:
        with pytest.raises(InvalidInputError, match=r"texts\[1\] is not valid Unicode"):
            client.embed(["fine", "bad \ud800 text"], model="emb")
        with pytest.raises(InvalidInputError, match="prompt is not valid Unicode"):
            client.generate("\udcff", model="gen")
        with pytest.raises(InvalidInputError, match=r"messages\[0\]\.content is not valid Unicode"):
            client.chat([{"role": "user", "content": "\ud83d"}], model="gen")
    assert not server.calls, "nothing was sent"


def test_a_busy_model_is_a_429_with_retry_after_and_a_context_overflow_a_400_or_413() -> None:
    from tritonhf.errors import ContextLengthError, ServerBusyError
    from tritonhf.serve.app import _error_for_path
    from tritonhf.serve.errors import GatewayError

    busy = GatewayError.of(ServerBusyError("Exceeds maximum queue size", "m"))
    assert (busy.status, busy.kind, busy.code) == (429, "rate_limit_error", "model_overloaded")
    response = _error_for_path("/v1/embeddings", busy)
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    assert _error_for_path("/embed", busy).headers["Retry-After"] == "1"
    too_long = ContextLengthError("input 'TEXT' is longer than the model's context length of 512 tokens", "m")
    assert (GatewayError.of(too_long).status, GatewayError.of(too_long).code) == (400, "context_length_exceeded")
    assert GatewayError.of_tei(too_long).status == 413 and GatewayError.of_tei(too_long).tei_body()["error_type"] == (
        "Validation"
    )
