"""The gateway's request bodies and the SDK's text checks, without a server.

OpenAI clients that serialise every field send explicit nulls; those mean "not given". Text
that cannot be encoded as UTF-8 (a lone surrogate from JSON's "\\ud800") is refused by the SDK
with the input's name, before anything is sent. A non-streamed answer's work is cancelled when
its client leaves, and when the gateway cancels the request itself (shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from starlette.requests import Request

from tritonhf import Client, InvalidInputError
from tritonhf._wire.aio_transport import all_or_none
from tritonhf.sdk.testing import FakeServer, MemoryTransport
from tritonhf.serve.schemas import ChatBody, CompletionBody, EmbeddingBody, TeiEmbedBody
from tritonhf.serve.shared import ClientGone, unless_disconnected


@contextlib.contextmanager
def _gateway(server: FakeServer) -> Iterator[tuple[Any, Any]]:
    """The gateway's app in-process over an in-memory Triton: (its test HTTP client, the real openai client on it)."""
    import openai
    from fastapi.testclient import TestClient

    from tritonhf.sdk import AsyncClient
    from tritonhf.sdk.testing import AsyncMemoryTransport
    from tritonhf.serve.app import create_app
    from tritonhf.serve.coalesce import Coalescer

    app = create_app("grpc://127.0.0.1:9")
    with TestClient(app) as http:
        app.state.client = AsyncClient(transport=AsyncMemoryTransport(server))
        app.state.coalescer = Coalescer(app.state.client)
        yield http, openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0)


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


def _request(messages: asyncio.Queue[dict[str, Any]]) -> Request:
    """A request whose body was read: its next ASGI message is whatever the test puts in ``messages``."""

    async def receive() -> dict[str, Any]:
        return await messages.get()

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)


async def _cancelled_when_ended(started: asyncio.Event, ended: list[str]) -> str:
    """Work that runs until cancelled, and records that it was."""
    started.set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        ended.append("cancelled")
        raise
    return "answer"


def test_a_client_that_leaves_cancels_the_work_and_is_told_apart() -> None:
    async def scenario() -> list[str]:
        messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        started, ended = asyncio.Event(), []
        waiting = asyncio.ensure_future(unless_disconnected(_request(messages), _cancelled_when_ended(started, ended)))
        await started.wait()
        messages.put_nowait({"type": "http.disconnect"})
        with pytest.raises(ClientGone):
            await waiting
        return list(ended)  # now: asyncio.run would cancel a task left running when it ends

    assert asyncio.run(scenario()) == ["cancelled"]


def test_a_handler_cancelled_by_the_gateway_cancels_its_work_too() -> None:
    """At shutdown (or any cancellation of the request's task) the work must not run on orphaned, and
    the cancellation must reach the caller, not turn into a ClientGone or a result."""

    async def scenario() -> list[str]:
        started, ended = asyncio.Event(), []
        waiting = asyncio.ensure_future(
            unless_disconnected(_request(asyncio.Queue()), _cancelled_when_ended(started, ended))
        )
        await started.wait()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return list(ended)  # now: asyncio.run would cancel a task left running when it ends

    assert asyncio.run(scenario()) == ["cancelled"]


def test_a_finished_work_answers_and_leaves_no_watcher() -> None:
    async def scenario() -> tuple[str, int]:
        async def work() -> str:
            return "answer"

        found = await unless_disconnected(_request(asyncio.Queue()), work())
        await asyncio.sleep(0)
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        return found, len(others)

    assert asyncio.run(scenario()) == ("answer", 0)


def test_one_failed_generation_cancels_its_siblings_before_the_error_is_raised() -> None:
    """``all_or_none``: the others are cancelled and have ended (their streams closed) when the failure is raised;
    ``asyncio.gather`` would have left them running."""

    async def scenario() -> list[str]:
        ended: list[str] = []

        async def long(name: str) -> str:
            try:
                await asyncio.sleep(60)
            finally:
                ended.append(name)
            return name

        async def refused() -> str:
            await asyncio.sleep(0.01)
            raise RuntimeError("the model's queue is full")

        with pytest.raises(RuntimeError, match="queue is full"):
            await all_or_none([long("a"), refused(), long("b")])
        return sorted(ended)

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == ["a", "b"]
    assert asyncio.run(all_or_none(asyncio.sleep(0, name) for name in ("x", "y"))) == ["x", "y"]


def test_dimensions_cut_a_matryoshka_model_s_vectors_and_refuse_any_other() -> None:
    """OpenAI's ``dimensions`` on /v1/embeddings, through the real openai client over the app in-process
    (an in-memory Triton behind it): the first N components normalised again, where the model was added with
    --param matryoshka=true (and /v1/models says so); a 400 saying why elsewhere or past the model's size."""
    import openai
    from fastapi.testclient import TestClient

    from tritonhf.sdk import AsyncClient
    from tritonhf.sdk.testing import AsyncMemoryTransport
    from tritonhf.serve.app import create_app
    from tritonhf.serve.coalesce import Coalescer

    def vectors(inputs: dict[str, Any]) -> dict[str, Any]:
        rows = (len(inputs["TEXT"]), 1)
        vector = np.array([[3.0, 4.0, 12.0, 0.5]], np.float32)
        return {"EMBEDDING": np.tile(vector, rows), "TOKENS": np.ones(rows, int), "TRUNCATED": np.zeros(rows, bool)}

    server = FakeServer()
    for name, matryoshka in (("nested", "true"), ("plain", None)):
        model = server.add(name, "feature-extraction", vectors, output_dims={"EMBEDDING": 4})
        if matryoshka:
            model.config["parameters"]["matryoshka"] = {"string_value": matryoshka}
    app = create_app("grpc://127.0.0.1:9")
    with TestClient(app) as http:
        app.state.client = AsyncClient(transport=AsyncMemoryTransport(server))
        app.state.coalescer = Coalescer(app.state.client)
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0)
        cut = client.embeddings.create(model="nested", input=["a", "b"], dimensions=2).data
        assert [round(x, 6) for x in cut[0].embedding] == [0.6, 0.8] and len(cut) == 2, "3, 4 -> length 1"
        cards = {card.id: card for card in client.models.list().data}
        assert cards["nested"].matryoshka and not cards["plain"].matryoshka  # type: ignore[attr-defined]
        for model, dimensions, words in (("plain", 2, "Matryoshka"), ("nested", 5, "more than the model's 4")):
            with pytest.raises(openai.BadRequestError, match=words) as refused:
                client.embeddings.create(model=model, input="a", dimensions=dimensions)
            assert refused.value.body["param"] == "dimensions"  # type: ignore[index]


def test_the_page_and_its_files_are_open_and_the_state_it_polls_needs_the_key() -> None:
    """With a key: GET / (for a browser) and the page's two files answer without it (they hold no data); the state,
    and every API route (POST / included), need it. The state lists the models with their engine and Triton's
    figures per model; nothing else of the metrics text."""
    from fastapi.testclient import TestClient

    from tritonhf.sdk import AsyncClient
    from tritonhf.sdk.testing import AsyncMemoryTransport
    from tritonhf.serve.app import create_app
    from tritonhf.serve.page import _metrics, _statistics

    server = FakeServer()
    model = server.add("tagger", "token-classification")
    model.config["parameters"].update({"tritonhf.backend": {"string_value": "onnx"},
                                       "tritonhf.backend_reason": {"string_value": "measured faster"}})  # fmt: skip
    app = create_app("grpc://127.0.0.1:9", api_key="secret")
    with TestClient(app) as http:
        app.state.client = AsyncClient(transport=AsyncMemoryTransport(server))
        page = http.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "/ui/page.js" in page.text
        assert http.get("/").status_code == 404  # not a browser: told where the API is described
        assert http.get("/ui/page.js").headers["content-type"].startswith("text/javascript")
        assert http.get("/ui/page.css").headers["content-type"].startswith("text/css")
        assert http.get("/ui/state").status_code == 401
        assert http.post("/", json={"inputs": "x"}).status_code == 401
        assert http.get("/ui/../app.py").status_code in (401, 404)
        state = http.get("/ui/state", headers={"Authorization": "Bearer secret"}).json()
    assert state["models"][0] | {"engine": "onnx", "engine_reason": "measured faster"} == state["models"][0]
    assert state["figures"] is None  # no --metrics-url: the page says the generation figures are left out
    inference = {"success": {"count": "3", "ns": "9"}, "queue": {"count": "3", "ns": "6"},
                 "compute_infer": {"count": "2", "ns": "4"}}  # fmt: skip
    stats = {
        "name": "m",
        "inference_stats": inference,
        "batch_stats": [{"batch_size": "2", "compute_infer": {"count": "1"}}],
    }
    assert _statistics([stats])["m"] == {"success": 3, "fail": 0, "queued": 3, "queue_ns": 6, "computed": 2,
                                         "compute_ns": 4, "batches": {"2": 1}}  # fmt: skip
    assert _metrics("http://127.0.0.1:9/metrics") is None  # nothing there: left out, not an error


def test_every_route_is_metered_under_its_own_path() -> None:
    """Routing and metrics read one tuple of routers: a route the app serves is never counted as "other"."""
    from fastapi.testclient import TestClient

    from tritonhf.serve.app import create_app

    app = create_app("grpc://127.0.0.1:9")
    with TestClient(app) as http:
        http.post("/v1/audio/transcriptions")  # refused (no file): counted all the same
        text = http.get("/metrics").text
    assert 'route="/v1/audio/transcriptions"' in text and 'route="other"' not in text


def test_post_root_with_several_models_names_each_model_s_url() -> None:
    """TEI's root route needs one model; with several, its 400 names each model's own URL (what a Hugging Face
    client is given), besides the routes that take 'model'."""

    def vectors(inputs: dict[str, Any]) -> dict[str, Any]:
        rows = (len(inputs["TEXT"]), 1)
        return {"EMBEDDING": np.ones((rows[0], 4), np.float32), "TOKENS": np.ones(rows, int)}

    server = FakeServer()
    for name in ("first", "second"):
        server.add(name, "feature-extraction", vectors, output_dims={"EMBEDDING": 4})
    with _gateway(server) as (http, _):
        refused = http.post("/", json={"inputs": "a text"})
    assert refused.status_code == 400
    assert "/models/first" in refused.text and "/models/second" in refused.text


def test_chat_full_and_streamed_answers_say_the_same() -> None:
    """Chat's full answer and its streamed chunks (two functions over one opened generation), through the real
    openai client over the app in-process: the same text, finish reason and usage."""

    def words(inputs: dict[str, Any]) -> Any:
        for index, word in enumerate(["Hello", " there", "!"]):
            last = index == 2
            found: dict[str, Any] = {"text_output": np.array([[word.encode()]], dtype=object)}
            if last:
                found["finish_reason"] = np.array([[b"stop"]], dtype=object)
                found["prompt_tokens"] = np.array([[4]], np.int32)
                found["completion_tokens"] = np.array([[3]], np.int32)
            yield found

    server = FakeServer()
    server.add("writer", "text-generation", stream=words)
    with _gateway(server) as (_, client):
        messages = [{"role": "user", "content": "hi"}]
        full = client.chat.completions.create(model="writer", messages=messages)  # type: ignore[arg-type]
        chunks = list(client.chat.completions.create(model="writer", messages=messages, stream=True,  # type: ignore[arg-type]
                                                     stream_options={"include_usage": True}))  # fmt: skip
    assert full.choices[0].message.content == "Hello there!" and full.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == "Hello there!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and full.usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens == 3


def test_penalties_top_k_and_min_p_reach_the_model_or_are_refused_by_name() -> None:
    """OpenAI's penalties and vLLM's extra fields, sent by the openai client, arrive as the template's inputs; a value
    out of range is a 400 naming the field (none is accepted and dropped)."""
    import openai

    seen: list[dict[str, Any]] = []

    def answer(inputs: dict[str, Any]) -> Any:
        seen.append({key: np.asarray(value).reshape(-1)[0] for key, value in inputs.items()})
        yield {"text_output": np.array([[b"ok"]], dtype=object), "finish_reason": np.array([[b"stop"]], dtype=object)}

    server = FakeServer()
    server.add("writer", "text-generation", stream=answer)
    with _gateway(server) as (_, client):
        messages = [{"role": "user", "content": "hi"}]
        client.chat.completions.create(
            model="writer", messages=messages, presence_penalty=1.5, frequency_penalty=-1.0,  # type: ignore[arg-type]
            logit_bias={"5": 100, "7": -2.5},
            extra_body={"top_k": 1, "min_p": 0.25, "repetition_penalty": 1.25},
        )  # fmt: skip
        for field, value in (("presence_penalty", 2.5), ("top_k", -2), ("min_p", 2), ("repetition_penalty", 0),
                             ("logit_bias", {"5": 101}), ("logit_bias", {"a token": 1})):  # fmt: skip
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(model="writer", messages=messages, extra_body={field: value})  # type: ignore[arg-type]
            assert field in str(refused.value)
    (sent,) = seen
    assert sent["presence_penalty"] == 1.5 and sent["frequency_penalty"] == -1.0 and sent["top_k"] == 1
    assert abs(sent["min_p"] - 0.25) < 1e-6 and abs(sent["repetition_penalty"] - 1.25) < 1e-6
    assert json.loads(sent["logit_bias"]) == {"5": 100.0, "7": -2.5}


def test_n_choices_each_their_own_generation_reproducible_with_a_seed() -> None:
    """OpenAI's n: one generation per choice, seeded seed, seed + 1 ...; the full answer and the streamed one give
    the same choices by index, the usage counts the prompt once and every choice's tokens; n past the bound is a
    400 naming it."""
    import openai

    from tritonhf.tasks import CHOICES_MAX

    def by_seed(inputs: dict[str, Any]) -> Any:
        seed = int(np.asarray(inputs["seed"]).reshape(-1)[0]) if "seed" in inputs else -1
        for word in (f"seed {seed}", " done"):
            yield {"text_output": np.array([[word.encode()]], dtype=object)}
        yield {"text_output": np.array([[b""]], dtype=object), "finish_reason": np.array([[b"stop"]], dtype=object),
               "prompt_tokens": np.array([[5]], np.int32), "completion_tokens": np.array([[2]], np.int32)}  # fmt: skip

    server = FakeServer()
    server.add("writer", "text-generation", stream=by_seed)
    messages = [{"role": "user", "content": "hi"}]
    with _gateway(server) as (_, client):
        full = client.chat.completions.create(model="writer", messages=messages, n=3, seed=7, temperature=1)  # type: ignore[arg-type]
        again = client.chat.completions.create(model="writer", messages=messages, n=3, seed=7, temperature=1)  # type: ignore[arg-type]
        chunks = list(client.chat.completions.create(model="writer", messages=messages, n=3, seed=7, temperature=1,  # type: ignore[arg-type]
                                                     stream=True, stream_options={"include_usage": True}))  # fmt: skip
        with pytest.raises(openai.BadRequestError, match="n"):
            client.chat.completions.create(model="writer", messages=messages, n=CHOICES_MAX + 1)  # type: ignore[arg-type]
        # the legacy completions: each prompt's n choices together, in OpenAI's order; streamed by index
        completed = client.completions.create(model="writer", prompt=["a", "b"], n=2, seed=7, temperature=1)
        pieces = list(client.completions.create(model="writer", prompt="a", n=3, seed=7, temperature=1, stream=True,
                                                stream_options={"include_usage": True}))  # fmt: skip
    assert [choice.text for choice in completed.choices] == ["seed 7 done", "seed 8 done"] * 2
    assert completed.usage is not None and (completed.usage.prompt_tokens, completed.usage.completion_tokens) == (10, 8)
    pieced: dict[int, str] = {}
    for piece in pieces:
        for part in piece.choices:
            pieced[part.index] = pieced.get(part.index, "") + part.text
    assert pieced == {0: "seed 7 done", 1: "seed 8 done", 2: "seed 9 done"}
    assert pieces[-1].usage is not None and (pieces[-1].usage.prompt_tokens, pieces[-1].usage.completion_tokens) == (
        5,
        6,
    )
    texts = {choice.index: choice.message.content for choice in full.choices}
    assert texts == {0: "seed 7 done", 1: "seed 8 done", 2: "seed 9 done"}
    assert texts == {choice.index: choice.message.content for choice in again.choices}
    streamed: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
    assert streamed == texts
    assert full.usage is not None and (full.usage.prompt_tokens, full.usage.completion_tokens) == (5, 6)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
