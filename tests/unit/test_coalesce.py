"""The gateway's coalescer over the in-memory Triton: concurrent requests go together, each gets its own answer.

A lone request is sent at once; requests that arrive while the model's calls are in flight go in
one call; each takes back its own rows, tokens and cut flags; a bad request among them fails
alone; a request whose client left is not sent; a call whose every request left is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from tritonhf import AsyncClient, InvalidInputError
from tritonhf.sdk.testing import AsyncMemoryTransport, FakeServer, StatusError
from tritonhf.serve.coalesce import Coalescer


def texts_of(inputs: Mapping[str, np.ndarray]) -> list[str]:
    return [item.decode() for item in inputs["TEXT"].reshape(-1)]


def embedder(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """A vector, a token count and a cut flag that each depend on the text alone; "bad" is refused as Triton does."""
    texts = texts_of(inputs)
    if "bad" in texts:
        raise StatusError(400, "input 'TEXT' row 0 is longer than the model's context length of 8 tokens")
    return {
        "EMBEDDING": np.array([[len(t), sum(map(ord, t)) % 97, 1.0] for t in texts], dtype=np.float32),
        "TOKENS": np.array([[len(t.split())] for t in texts], dtype=np.int32),
        "TRUNCATED": np.array([[t.endswith("!")] for t in texts], dtype=bool),
    }


def fake(delay: float = 0.05) -> FakeServer:
    server = FakeServer()
    server.add("emb", "feature-extraction", embedder, max_batch_size=64, output_dims={"EMBEDDING": 3}, delay=delay)
    return server


def inputs(count: int) -> list[list[str]]:
    return [[f"text {i}", f"and {i} more words!"][: 1 + i % 2] for i in range(count)]


def test_concurrent_requests_go_together_and_each_gets_its_own_answer() -> None:
    server = fake()

    async def main() -> None:
        async with AsyncClient(transport=AsyncMemoryTransport(server)) as client:
            coalescer = Coalescer(client, calls=1)
            alone = [await client.embeddings(texts, model="emb", truncate=True) for texts in inputs(12)]
            server.calls.clear()
            together = await asyncio.gather(
                *(coalescer.embeddings(texts, model="emb", normalize=None, truncate=True) for texts in inputs(12))
            )
            for mine, solo in zip(together, alone, strict=True):
                np.testing.assert_array_equal(mine.vectors, solo.vectors)
                assert (mine.tokens, mine.truncated) == (solo.tokens, solo.truncated)
            assert [rows for _, rows in server.calls] == [1, 17], "the first at once, the other eleven in one call"

    asyncio.run(main())


def test_a_lone_request_is_sent_at_once_and_lanes_are_per_model_and_options() -> None:
    server = fake(delay=0.0)

    async def main() -> None:
        async with AsyncClient(transport=AsyncMemoryTransport(server)) as client:
            coalescer = Coalescer(client, calls=1)
            first = await coalescer.embeddings(["one"], model="emb", normalize=None, truncate=False)
            assert first.vectors.shape == (1, 3) and server.calls == [("emb", 1)]
            server.models["emb"].delay = 0.05
            server.calls.clear()
            await asyncio.gather(  # different options never share a call, and neither waits for the other
                coalescer.embeddings(["a"], model="emb", normalize=None, truncate=False),
                coalescer.embeddings(["b"], model="emb", normalize=None, truncate=True),
            )
            assert server.calls == [("emb", 1), ("emb", 1)]

    asyncio.run(main())


def test_a_bad_request_fails_alone_and_the_others_are_answered() -> None:
    server = fake()

    async def main() -> None:
        async with AsyncClient(transport=AsyncMemoryTransport(server)) as client:
            coalescer = Coalescer(client, calls=1)
            batches = [["first"], ["x"], ["bad"], ["y", "z"]]
            results = await asyncio.gather(
                *(coalescer.embeddings(texts, model="emb", normalize=None, truncate=False) for texts in batches),
                return_exceptions=True,
            )
            assert isinstance(results[2], InvalidInputError) and "context length" in str(results[2])
            for index in (0, 1, 3):
                answer = results[index]
                assert not isinstance(answer, BaseException)
                expected = embedder({"TEXT": np.array([t.encode() for t in batches[index]], dtype=object)})
                np.testing.assert_array_equal(answer.vectors, expected["EMBEDDING"])
            assert server.calls[:2] == [("emb", 1), ("emb", 4)], "the three waiting requests went together first"
            assert sorted(rows for _, rows in server.calls[2:]) == [1, 1, 2], "then each alone"

    asyncio.run(main())


def test_a_request_whose_client_left_is_not_sent_and_an_abandoned_call_is_cancelled() -> None:
    server = fake(delay=0.2)

    async def main() -> None:
        async with AsyncClient(transport=AsyncMemoryTransport(server)) as client:
            coalescer = Coalescer(client, calls=1)
            first = asyncio.ensure_future(coalescer.embeddings(["first"], model="emb", normalize=None, truncate=False))
            await asyncio.sleep(0.01)
            left = asyncio.ensure_future(coalescer.embeddings(["gone"], model="emb", normalize=None, truncate=False))
            stays = asyncio.ensure_future(coalescer.embeddings(["stays"], model="emb", normalize=None, truncate=False))
            await asyncio.sleep(0.01)
            left.cancel()
            await first
            answer = await stays
            assert answer.vectors[0, 0] == len("stays")
            assert server.calls == [("emb", 1), ("emb", 1)], "the request whose client left was never sent"
            with pytest.raises(asyncio.CancelledError):
                await left
            # A call whose every request leaves is cancelled: the lane frees and the next request goes at once.
            blocker = asyncio.ensure_future(coalescer.embeddings(["a"], model="emb", normalize=None, truncate=False))
            await asyncio.sleep(0.01)
            waiting = [
                asyncio.ensure_future(coalescer.embeddings([t], model="emb", normalize=None, truncate=False))
                for t in "bc"
            ]
            await blocker  # the two waiting ones now go together ...
            await asyncio.sleep(0.01)
            for task in waiting:
                task.cancel()  # ... and both leave: their call is cancelled
            await asyncio.sleep(0.01)
            assert coalescer._lanes[("emb", None, False, None)].running == 0
            assert ("emb", 2) not in server.calls, "the abandoned call never reached the model"

    asyncio.run(main())


def test_by_default_a_lane_takes_the_models_shape_one_call_per_instance_of_one_batch_at_most() -> None:
    server = fake()
    server.models["emb"].config["max_batch_size"] = 4
    server.models["emb"].config["instance_group"] = [{"count": 2, "kind": "KIND_CPU"}]

    async def main() -> None:
        async with AsyncClient(transport=AsyncMemoryTransport(server)) as client:
            coalescer = Coalescer(client)
            answers = await asyncio.gather(
                *(coalescer.embeddings([f"t{i}"], model="emb", normalize=None, truncate=False) for i in range(10))
            )
            assert [a.vectors[0, 0] for a in answers] == [len(f"t{i}") for i in range(10)]
            rows = [count for _, count in server.calls]
            assert rows[:2] == [1, 1], "one call per instance: the first two go at once"
            assert max(rows) == 4 and sum(rows) == 10, "the rest go together, one of the model's batches at most"
            # The model is re-added with one instance: an idle lane reads its shape again.
            server.models["emb"].config["instance_group"] = [{"count": 1, "kind": "KIND_CPU"}]
            client._directory.ttl = 0  # the SDK trusts its model list for a few seconds; no waiting here
            await coalescer.embeddings(["again"], model="emb", normalize=None, truncate=False)
            assert coalescer._lanes[("emb", None, False, None)].calls == 1

    asyncio.run(main())
