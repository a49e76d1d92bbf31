"""Split -> merge for every task's output tensors, as properties over counts, chunk sizes and uneven tails.

The SDK sends more rows than a model's max_batch_size in chunks and joins the answers. Each chunk is
padded to its own widest row (as the templates pad a batch), so chunks come back in different widths;
joined, they must read exactly as one unsplit answer would. A reranker's ORDER is padded with -1
(its reader counts entries >= 0): padding it with 0 once made 33 documents in chunks of 32 an IndexError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonhf import Client
from tritonhf.sdk import _policy as policy
from tritonhf.sdk.testing import FakeServer, MemoryTransport
from tritonhf.tasks import TASKS, TensorSpec

OUTPUTS = [(task.name, spec) for task in TASKS.values() for spec in task.outputs]


def _pad_value(spec: TensorSpec) -> Any:
    if spec.data_type == "TYPE_STRING":
        return b""
    return spec.pad if spec.pad is not None else 0


def _rows(spec: TensorSpec, widths: list[int], seed: int) -> list[list[Any]]:
    rng = np.random.default_rng(seed)
    if spec.data_type == "TYPE_STRING":
        return [[f"v{rng.integers(1000)}".encode() for _ in range(w)] for w in widths]
    if spec.pad is not None and spec.pad < 0:  # an index list: values >= 0
        return [list(rng.permutation(w)) for w in widths]
    return [list(rng.integers(1, 100, w)) for w in widths]


def _batch(spec: TensorSpec, rows: list[list[Any]]) -> np.ndarray[Any, Any]:
    """Rows padded to the widest, as a template answers one batch."""
    width = max(len(row) for row in rows)
    dtype = np.object_ if spec.data_type == "TYPE_STRING" else np.int64
    return np.array([row + [_pad_value(spec)] * (width - len(row)) for row in rows], dtype=dtype)


@pytest.mark.parametrize(("task", "spec"), OUTPUTS, ids=[f"{t}:{s.name}" for t, s in OUTPUTS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_chunks_merge_as_one_answer(task: str, spec: TensorSpec, data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 70), label="rows")
    chunk = data.draw(st.integers(1, 33), label="max_batch_size")
    ragged = spec.dims and spec.dims[-1] == -1
    widths = data.draw(st.lists(st.integers(1, 9), min_size=count, max_size=count)) if ragged else [1] * count
    rows = _rows(spec, widths, seed=count * 100 + chunk)
    parts = [{spec.name: _batch(spec, rows[s])} for s in policy.chunks(count, chunk)]
    merged = policy.merge(parts, [spec.name])[spec.name]
    np.testing.assert_array_equal(merged, _batch(spec, rows))


def _reranker(inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    """One request row per query, its documents scored by length, ORDER padded with -1 (as the template)."""
    documents = [[d for d in row if d] for row in inputs["DOCUMENTS"]]
    width = max(len(row) for row in documents)
    scores = np.zeros((len(documents), width), np.float32)
    order = np.full((len(documents), width), -1, np.int32)
    for index, row in enumerate(documents):
        scores[index, : len(row)] = [len(d) for d in row]
        order[index, : len(row)] = np.argsort([-len(d) for d in row], kind="stable")
    return {"SCORES": scores, "ORDER": order, "TRUNCATED": np.zeros(order.shape, bool)}


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 140), chunk=st.integers(1, 40))
def test_rerank_any_split_ranks_every_document_once(count: int, chunk: int) -> None:
    server = FakeServer()
    server.add("ranker", "text-ranking", _reranker, max_batch_size=chunk)
    documents = ["x" * (1 + (i * 7) % 23) for i in range(count)]
    with Client(transport=MemoryTransport(server)) as client:
        ranked = client.rerank("query", documents, model="ranker")
    assert sorted(r.index for r in ranked) == list(range(count))
    assert [r.index for r in ranked] == sorted(range(count), key=lambda i: (-len(documents[i]), i))
    assert all(r.document == documents[r.index] and r.score == len(documents[r.index]) for r in ranked)
