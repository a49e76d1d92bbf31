"""The pipeline worker (``runtime/pipeline.py``) outside Triton: whatever one batch does, the next runs.

The worker answers every request of a batch through its response sender. If anything in there
stopped the worker, every later ``submit`` would wait for ever and the model would hang; these
tests submit the later batches from a thread they wait on for a bounded time, so such a hang
fails the test instead of stalling the suite.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import fake_pb_utils
import numpy as np
import pytest

from tritonhf.runtime.pipeline import Pipeline


@pytest.fixture(autouse=True)
def stub_utils(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_pb_utils)


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    worker = Pipeline()
    yield worker
    worker.close(timeout=5)


def request(refusals: int = 0) -> fake_pb_utils.InferenceRequest:
    made = fake_pb_utils.InferenceRequest()
    made.sender.refusals = refusals
    return made


def echo(count: int, value: float) -> Callable[[], Sequence[Any]]:
    """The work of a batch of ``count`` requests: one answer each, the value ``value``."""

    def work() -> list[Any]:
        array = np.array([value], dtype=np.float32)
        return [fake_pb_utils.InferenceResponse([fake_pb_utils.Tensor("OUT", array)]) for _ in range(count)]

    return work


def submit_all(pipeline: Pipeline, batches: list[tuple[list[Any], Callable[[], Sequence[Any]]]]) -> None:
    """Submit the batches in order, as ``execute`` does, failing (not hanging) if a submit never returns."""

    def run() -> None:
        for requests, work in batches:
            pipeline.submit(requests, work)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "a submit never returned: the worker stopped taking batches"
    last, _ = batches[-1]  # the worker takes batches in order: once the last is answered, all were handled
    deadline = time.monotonic() + 10
    while not all(item.sender.closed for item in last):
        assert time.monotonic() < deadline, "the last batch was never answered"
        time.sleep(0.001)


def answer_of(item: fake_pb_utils.InferenceRequest) -> float | str:
    """The value a request got, or its error message."""
    (response,) = item.sender.responses
    if response.has_error():
        return str(response.error().message())
    return float(response.output("OUT")[0])


def test_an_answer_the_server_refuses_becomes_that_requests_error_and_the_next_batches_run(
    pipeline: Pipeline,
) -> None:
    first = [request(), request(refusals=1), request()]
    later = [[request(), request()], [request()], [request()]]
    submit_all(pipeline, [(first, echo(3, 1.0))] + [(batch, echo(len(batch), 2.0)) for batch in later])
    assert answer_of(first[0]) == answer_of(first[2]) == 1.0
    assert answer_of(first[1]) == "the answer could not be sent: Unable to send response"
    assert [answer_of(item) for batch in later for item in batch] == [2.0] * 4


def test_a_sender_that_refuses_everything_leaves_the_others_and_later_batches_answered(
    pipeline: Pipeline,
) -> None:
    gone = request(refusals=10)  # a closed sender: even the error cannot go out
    first = [request(), gone, request()]
    later = [request()], [request()]
    submit_all(pipeline, [(first, echo(3, 1.0)), *((batch, echo(1, 2.0)) for batch in later)])
    assert gone.sender.responses == [] and gone.sender.refusals == 8, "sent once, then the error once"
    assert [answer_of(first[0]), answer_of(first[2])] == [1.0, 1.0]
    assert [answer_of(batch[0]) for batch in later] == [2.0, 2.0]


def test_a_wrong_number_of_answers_or_a_failed_batch_is_an_error_for_each_of_its_requests(
    pipeline: Pipeline,
) -> None:
    short = [request(), request()]

    def fails() -> list[Any]:
        raise ValueError("out of memory")

    failed = [request()]
    after = [request()]
    submit_all(pipeline, [(short, echo(1, 1.0)), (failed, fails), (after, echo(1, 3.0))])
    assert [answer_of(item) for item in short] == ["the model failed: it returned 1 answers for 2 requests"] * 2
    assert answer_of(failed[0]) == "the model failed: out of memory"
    assert answer_of(after[0]) == 3.0
