"""The SDK without a server: Client and AsyncClient over the in-memory transport, in milliseconds.

Each test builds a FakeServer whose models are small Python functions, so what is checked is
the SDK's own behaviour: chunking and order, option encoding, decoding per task, retries
within one deadline, stream relay and cancellation, model resolution and its cache.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from tritonhf import (
    AmbiguousModelError,
    AsyncClient,
    Client,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    RequestTimeoutError,
    ServerBusyError,
    ServerUnavailableError,
)
from tritonhf._wire.aio_transport import bounded
from tritonhf.sdk.testing import NEVER, AsyncMemoryTransport, FakeServer, MemoryTransport, StatusError

# Deadlines and retry waits are checked to tenths of a second: not beside another test worker.
pytestmark = pytest.mark.alone

LABELS = ["negative", "positive"]


def texts_of(inputs: Mapping[str, np.ndarray]) -> list[str]:
    return [item.decode() for item in inputs["TEXT"].reshape(-1)]


def classifier(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """'positive' when the text has an even length; scores from the length, so every row differs."""
    texts = texts_of(inputs)
    positive = np.array([len(t) % 2 == 0 for t in texts])
    score = np.array([[0.5 + len(t) / 1000] for t in texts], dtype=np.float32)
    top_k = inputs["TOP_K"].reshape(-1) if "TOP_K" in inputs else [2] * len(texts)
    labels = [[LABELS[int(p)], LABELS[1 - int(p)]][:k] + [""] * (2 - k) for p, k in zip(positive, top_k)]
    return {
        "LABEL": np.array([[LABELS[int(p)].encode()] for p in positive], dtype=object),
        "SCORE": score,
        "LABELS": np.array([[label.encode() for label in row] for row in labels], dtype=object),
        "SCORES": np.concatenate([score, 1 - score], axis=1),
        "TRUNCATED": np.array([[len(t) > 50] for t in texts]),
    }


def embedder(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    return {"EMBEDDING": np.array([[len(t), float(t[-1:] == "x"), 1.0] for t in texts_of(inputs)], dtype=np.float32)}


def words(inputs: Mapping[str, np.ndarray]) -> Iterator[dict[str, Any]]:
    prompt = inputs["text_input"].reshape(-1)[0].decode()
    count = int(inputs["max_tokens"].reshape(-1)[0]) if "max_tokens" in inputs else 3
    for index in range(count):
        yield {"text_output": np.array([f"{prompt}{index} ".encode()], dtype=object)}
    yield {
        "text_output": np.array([b""], dtype=object),
        "finish_reason": np.array([b"length"], dtype=object),
        "prompt_tokens": np.array([len(prompt.split())], dtype=np.int32),
        "completion_tokens": np.array([count], dtype=np.int32),
    }


@pytest.fixture
def server() -> FakeServer:
    fake = FakeServer()
    fake.add("clf", "text-classification", classifier, max_batch_size=4)
    fake.add("emb", "feature-extraction", embedder, max_batch_size=3, output_dims={"EMBEDDING": 3})
    fake.add("gen", "text-generation", stream=words)
    return fake


@pytest.fixture
def client(server: FakeServer) -> Iterator[Client]:
    with Client(transport=MemoryTransport(server), timeout=5) as made:
        yield made


def test_inputs_over_max_batch_size_are_split_and_come_back_in_order(client: Client, server: FakeServer) -> None:
    texts = [f"text {'x' * i}" for i in range(11)]
    got = client.classify(texts, model="clf")
    assert [c.label for c in got] == [LABELS[int(len(t) % 2 == 0)] for t in texts]
    assert [round(c.score, 3) for c in got] == [round(0.5 + len(t) / 1000, 3) for t in texts]
    assert sorted(rows for _, rows in server.calls) == [3, 4, 4]
    vectors = client.embed(texts, model="emb")
    assert vectors.shape == (11, 3) and vectors.dtype == np.float32
    assert vectors[:, 0].tolist() == [len(t) for t in texts]


def test_single_text_list_and_empty(client: Client, server: FakeServer) -> None:
    one = client.classify("ab", model="clf")
    assert one.label == "positive" and one.truncated is False
    assert client.classify([], model="clf") == []
    assert client.embed([], model="emb").shape == (0, 3)
    assert client.classify("x" * 60, model="clf").truncated is True
    assert len(server.calls) == 2  # empty inputs send nothing


def test_top_k_is_sent_per_row_and_padding_dropped(client: Client, server: FakeServer) -> None:
    ranked = client.classify(["ab", "abc"], model="clf", top_k=1)
    assert [[c.label for c in row] for row in ranked] == [["positive"], ["negative"]]
    assert [len(row) for row in client.classify(["ab", "abc"], model="clf", top_k=2)] == [2, 2]


def test_wrong_python_types_are_refused_before_sending(client: Client, server: FakeServer) -> None:
    for bad in (None, 3, [None], ["ok", 5], b"bytes"):
        with pytest.raises(InvalidInputError, match="texts"):
            client.classify(bad, model="clf")  # type: ignore[call-overload]
    with pytest.raises(InvalidInputError, match="top_k"):
        client.classify("x", model="clf", top_k=0)
    with pytest.raises(InvalidInputError, match="truncate"):
        client.embed("x", model="emb", truncate="no")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="max_tokens"):
        client.generate("x", model="gen", max_tokens=2.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"messages\[0\]"):
        client.chat([{"role": "user"}], model="gen")
    with pytest.raises(InvalidInputError, match="model"):
        client.classify("x", model="")
    assert server.calls == []


def test_truncate_false_needs_a_model_that_knows_it(server: FakeServer) -> None:
    server.models["clf"].config["input"] = [i for i in server.models["clf"].config["input"] if i["name"] != "TRUNCATE"]
    with Client(transport=MemoryTransport(server)) as client, pytest.raises(InvalidInputError, match="older tritonhf"):
        client.classify("x", model="clf", truncate=False)


def test_model_none_picks_the_only_model_of_the_task_and_caches_the_list(client: Client, server: FakeServer) -> None:
    for _ in range(5):
        client.embed("x")
    assert server.index_requests == 1, "the model list is cached, not asked for on every call"
    server.add("emb2", "feature-extraction", embedder)
    client._directory._models = None  # as after the TTL
    with pytest.raises(AmbiguousModelError, match="emb, emb2"):
        client.embed("x")


def test_a_re_added_model_is_read_again_after_not_found(client: Client, server: FakeServer) -> None:
    assert client.classify(["a", "b", "c", "d", "e"], model="clf")  # max batch 4: two calls
    server.models["clf"].config["max_batch_size"] = 2
    server.failures.append(StatusError(404, "Request for unknown model: 'clf' has no available versions"))
    client.classify(["a", "b", "c"], model="clf")
    assert [rows for _, rows in server.calls[-2:]] == [2, 1], "the config was refreshed after not-ready"


def test_transient_failures_are_retried_within_the_deadline(client: Client, server: FakeServer) -> None:
    server.failures.extend(
        [
            StatusError("StatusCode.UNAVAILABLE", "failed to connect to all addresses"),
            StatusError(500, "Stub process 'clf_0_0' is not healthy."),
        ]
    )
    assert client.classify("ab", model="clf").label == "positive"
    server.failures.extend([StatusError(500, "RuntimeError: boom")])
    with pytest.raises(InferenceError, match="boom"):
        client.classify("ab", model="clf")


def test_retries_stop_at_the_deadline(server: FakeServer) -> None:
    server.failures.extend([StatusError(404, "'clf' has no available versions")] * 1000)
    with Client(transport=MemoryTransport(server)) as client:
        started = time.monotonic()
        with pytest.raises(ModelNotReadyError):
            client.classify("ab", model="clf", timeout=0.6)
        assert time.monotonic() - started < 0.9


def test_one_deadline_for_the_whole_call(server: FakeServer) -> None:
    server.models["clf"].delay = 0.2
    with Client(transport=MemoryTransport(server), concurrency=1) as client:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            client.classify(["a"] * 16, model="clf", timeout=0.5)  # 4 chunks of 0.2 s, one at a time
        assert time.monotonic() - started < 0.8
        server.models["clf"].delay = NEVER
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            client.classify("a", model="clf", timeout=0.3)
        assert time.monotonic() - started < 0.6


def test_errors_by_status(client: Client, server: FakeServer) -> None:
    with pytest.raises(ModelNotFoundError, match="nope"):
        client.classify("x", model="nope")
    server.failures.append(StatusError("StatusCode.INVALID_ARGUMENT", "input 'TOP_K' is 0"))
    with pytest.raises(InvalidInputError, match="TOP_K"):
        client.classify("x", model="clf")


def test_stream_relays_chunks_usage_and_finish_reason(client: Client) -> None:
    with client.generate("hi", model="gen", max_tokens=3, stream=True) as stream:
        assert list(stream) == ["hi0 ", "hi1 ", "hi2 "]
        assert stream.finish_reason == "length"
        assert stream.usage is not None and (stream.usage.prompt_tokens, stream.usage.completion_tokens) == (1, 3)
    assert client.generate("hi", model="gen", max_tokens=2) == "hi0 hi1 "
    sent = json.loads(client.chat([{"role": "user", "content": "yo"}], model="gen", max_tokens=1)[:-2])
    assert sent == [{"role": "user", "content": "yo"}]


def test_breaking_out_of_a_stream_cancels_it(client: Client, server: FakeServer) -> None:
    for chunk in client.generate("hi", model="gen", max_tokens=50, stream=True):
        assert chunk == "hi0 "
        break
    assert server.cancelled == ["gen"]
    stream = client.generate("hi", model="gen", max_tokens=50, stream=True)
    next(stream)
    stream.close()
    assert server.cancelled == ["gen", "gen"]
    assert client.generate("hi", model="gen", max_tokens=2) == "hi0 hi1 "
    assert server.cancelled == ["gen", "gen"], "a stream read to its end is not cancelled"


def test_stream_deadline_and_idle_timeout(server: FakeServer) -> None:
    server.models["gen"].delay = 0.15
    with Client(transport=MemoryTransport(server)) as client:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="within the call's timeout"):
            list(client.generate("hi", model="gen", max_tokens=50, stream=True, timeout=0.5))
        assert time.monotonic() - started < 0.8
        with pytest.raises(RequestTimeoutError, match="idle_timeout"):
            list(client.generate("hi", model="gen", max_tokens=50, stream=True, idle_timeout=0.05))
    assert server.cancelled == ["gen", "gen"]


def test_an_error_after_the_first_chunk_is_the_model_failing(server: FakeServer) -> None:
    def breaks(inputs: Mapping[str, np.ndarray]) -> Iterator[dict[str, Any]]:
        yield {"text_output": np.array([b"one "], dtype=object)}
        raise StatusError("", "input 'x' looked odd mid-stream")

    server.add("flaky", "text-generation", stream=breaks)
    with Client(transport=MemoryTransport(server)) as client:
        stream = client.generate("hi", model="flaky", stream=True)
        assert next(stream) == "one "
        with pytest.raises(InferenceError, match="after 1 chunk"):
            next(stream)


def test_async_client_same_answers_and_concurrency(server: FakeServer) -> None:
    async def main() -> dict[str, Any]:
        async with AsyncClient(transport=AsyncMemoryTransport(server), timeout=5) as client:
            texts = [f"t{'x' * i}" for i in range(9)]
            labels, vectors, chunks = await asyncio.gather(
                client.classify(texts, model="clf"),
                client.embed(texts, model="emb"),
                client.generate("hi", model="gen", max_tokens=2, stream=True),
            )
            return {
                "labels": [c.label for c in labels],
                "vectors": vectors,
                "chunks": [chunk async for chunk in chunks],
                "whole": await client.generate("hi", model="gen", max_tokens=2),
                "models": [m.name for m in await client.models()],
            }

    got = asyncio.run(main())
    with Client(transport=MemoryTransport(server)) as sync:
        texts = [f"t{'x' * i}" for i in range(9)]
        assert got["labels"] == [c.label for c in sync.classify(texts, model="clf")]
        np.testing.assert_array_equal(got["vectors"], sync.embed(texts, model="emb"))
    assert got["chunks"] == ["hi0 ", "hi1 "] and got["whole"] == "hi0 hi1 "
    assert got["models"] == ["clf", "emb", "gen"]


def test_an_async_call_whose_chunk_fails_cancels_its_other_chunks_before_raising() -> None:
    """A call split into chunks: the first failure cancels the chunks still in flight, which have ended (their
    requests closed) when the error reaches the caller; gathered, they would have run on for an answer no one
    reads."""
    from tritonhf.sdk._aio_flavour import FanOut

    async def scenario() -> list[int]:
        ended: list[int] = []

        async def send(rows: slice) -> int:
            try:
                if rows.start == 4:
                    await asyncio.sleep(0.01)
                    raise ServerBusyError("the model's queue is full")
                await asyncio.sleep(60)
                return rows.start
            finally:
                ended.append(rows.start)

        with pytest.raises(ServerBusyError, match="queue is full"):
            await FanOut(concurrency=4).send_all(send, [slice(0, 4), slice(4, 8), slice(8, 12)])
        return sorted(ended)

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == [0, 4, 8]


def test_async_cancellation_and_timeouts(server: FakeServer) -> None:
    server.models["gen"].delay = 0.05

    async def main() -> None:
        async with AsyncClient(transport=AsyncMemoryTransport(server)) as client:
            stream = await client.generate("hi", model="gen", max_tokens=100, stream=True)
            assert await stream.__anext__() == "hi0 "
            await stream.aclose()

            async def consume() -> None:
                async for _ in await client.generate("hi", model="gen", max_tokens=100, stream=True):
                    pass

            task = asyncio.create_task(consume())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            server.models["emb"].delay = NEVER
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError):
                await client.embed("x", model="emb", timeout=0.3)
            assert time.monotonic() - started < 0.6

    asyncio.run(main())
    assert server.cancelled == ["gen", "gen"]


def test_a_cancellation_that_meets_a_finished_read_is_not_lost() -> None:
    """The gateway cancels its stream reads when the client leaves. ``asyncio.wait_for`` (before Python 3.12)
    returned a read that finished at that moment and dropped the cancellation, so a generation sometimes
    ran to its end for nobody. A stream that always has a chunk ready meets that moment on every try."""

    async def main() -> None:
        chunks: asyncio.Queue[int] = asyncio.Queue()
        reads, lost = 0, 0

        async def read(limit: int) -> None:
            nonlocal reads
            for _ in range(limit):  # a lost cancellation reads on to the end
                chunks.put_nowait(1)
                await bounded(chunks.get(), 10)
                reads += 1

        for attempt in range(20):
            task = asyncio.create_task(read(2000))
            for _ in range(attempt % 4 + 1):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.wait({task})
            lost += not task.cancelled()
        assert reads > 0 and lost == 0, f"{lost} of 20 cancellations were lost"

        inner: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"no answer within 0\.1 s"):
            await bounded(inner, 0.1)
        assert inner.cancelled() and time.monotonic() - started < 1, "a timeout cancels what it waited for"

    asyncio.run(main())


def test_server_down_is_unavailable_after_the_deadline(server: FakeServer) -> None:
    server.ready = False
    with Client(transport=MemoryTransport(server)) as client, pytest.raises(ServerUnavailableError):
        client.wait_ready(timeout=0.5)


def test_unavailable_timeout_gives_up_on_an_unreachable_server_early(server: FakeServer) -> None:
    server.failures.extend(ConnectionRefusedError("connection refused") for _ in range(1000))
    with Client(transport=MemoryTransport(server), unavailable_timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(ServerUnavailableError):
            client.models(timeout=30)
        assert time.monotonic() - started < 1.0, "not retried until the 30 s deadline"
    assert len(server.failures) <= 998, "it was retried (once at least) while the budget lasted"


def test_a_busy_model_is_retried_within_the_deadline_unless_the_caller_must_answer_fast(server: FakeServer) -> None:
    busy = "Exceeds maximum queue size"
    server.models["emb"]  # the config is read (and cached) before the failures start
    with Client(transport=MemoryTransport(server)) as client:
        client.embed("warm", model="emb")
        server.failures.extend(StatusError(503, busy) for _ in range(2))
        assert client.embed("x", model="emb").shape == (1, 3), "retried after a short wait, then answered"
        assert not server.failures
    with Client(transport=MemoryTransport(server), unavailable_timeout=1.5) as gateway:
        gateway.embed("warm", model="emb")
        server.failures.append(StatusError(503, busy))
        started = time.monotonic()
        with pytest.raises(ServerBusyError, match="busy"):
            gateway.embed("x", model="emb", timeout=30)
        assert time.monotonic() - started < 0.1, "passed on at once (the gateway answers 429 with Retry-After)"


def test_sampling_options_are_one_typed_set_and_a_typo_is_refused(client: Client) -> None:
    from tritonhf import Sampling

    options: Sampling = {"max_tokens": 3, "temperature": 0.0, "stop": ["zzz"]}
    assert client.generate("hi", model="gen", **options) == client.generate("hi", model="gen", max_tokens=3)
    with pytest.raises(InvalidInputError, match=r"unknown generation option.*max_token\b"):
        client.generate("hi", model="gen", max_token=3)  # type: ignore[call-arg]


def test_bad_urls_are_invalid_input() -> None:
    for url in ("ftp://x:1", "http://x:notaport", "grpc://host:1/path"):
        with pytest.raises(InvalidInputError, match="URL"):
            Client(url)


def test_an_optional_output_a_model_did_not_send_is_left_out() -> None:
    """``infer`` asks for every output of the config; one the model sends only when asked (a feature-extraction
    model's TOKEN_EMBEDDINGS) comes back as None from the transport: left out, not a crash."""
    import numpy as np

    from tritonhf._wire.config import ModelConfig
    from tritonhf.sdk import _plans, _policy

    vectors = np.ones((1, 4), dtype=np.float32)
    parts = [{"EMBEDDING": vectors, "TOKEN_EMBEDDINGS": None}, {"EMBEDDING": vectors, "TOKEN_EMBEDDINGS": None}]
    merged = _policy.merge(parts, ["EMBEDDING", "TOKEN_EMBEDDINGS"])  # type: ignore[list-item]
    assert set(merged) == {"EMBEDDING"} and merged["EMBEDDING"].shape == (2, 4)
    plan = _plans.infer("embed", {"TEXT": ["x"]})
    config = ModelConfig("embed", 8, {"TEXT": ("BYTES", (1,))}, {"EMBEDDING": ("FP32", (4,))}, "feature-extraction")
    assert set(plan.decode(config, {"EMBEDDING": vectors, "TOKEN_EMBEDDINGS": None})) == {"EMBEDDING"}  # type: ignore[dict-item]
