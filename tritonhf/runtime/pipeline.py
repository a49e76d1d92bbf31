"""Overlap inside one model instance: the forward pass of one batch runs on a worker thread
while the stub's thread reads and tokenizes the next one.

Triton hands a Python-backend instance one batch at a time and waits for ``execute`` to
return before it forms the next. When ``execute`` does everything (read inputs, tokenize,
run the model, build answers), the cores sit idle during the Python parts, and a loaded model
falls well short of its own engine's batch speed. Since Triton 24.x a model that is not
decoupled may also answer through each request's response sender after ``execute`` returns
(exactly one response, with the final flag). ``Pipeline`` uses that: ``execute`` prepares a
batch and ``submit``s its forward pass; the worker runs it (ONNX Runtime and PyTorch release
the GIL), answers every request, and takes the next. ``submit`` waits while the worker is
busy with an earlier batch (``depth``), so requests keep queueing in Triton, where the
dynamic batcher merges them, never in here. Every batch is computed exactly as ``execute``
would compute it alone: what a row gets does not depend on the pipeline.

It also avoids a stall of Triton 2.51: a one-instance model that answers from ``execute``
while its config bounds the queue (``default_queue_policy.max_queue_size``) sees some
executions start exactly 0.5 s late, even one request at a time (docs/guide.md has the figures).

The price, Triton's: when the stub is killed (the OOM killer) while the worker computes a batch,
Triton 2.51 never completes those requests' response senders, not even after the supervisor
reloads the model; their callers learn at their deadline, where an answer from ``execute``
would have been an error within a second. At most one batch, since ``depth`` is 1.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .common import BadRequest, pb_utils
from .replies import busy_response, error_response

# The work of one batch, run on the worker: one response per request, in order.
Work = Callable[[], Sequence[Any]]


class Pipeline:
    """One worker thread that computes submitted batches in order and answers their requests."""

    def __init__(self, depth: int = 1) -> None:
        self._slots = threading.Semaphore(depth)  # batches handed over and not yet answered
        self._work: queue.Queue[tuple[list[Any], Work] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="tritonhf-pipeline", daemon=True)
        self._thread.start()

    def submit(self, requests: Sequence[Any], work: Work) -> None:
        """Hand over a batch: ``execute`` then returns None (the answers go out from the worker)."""
        senders = [request.get_response_sender() for request in requests]
        self._slots.acquire()
        self._work.put((senders, work))

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            senders, work = item
            try:
                _answer(senders, work)
            finally:
                self._slots.release()

    def close(self, timeout: float = 30.0) -> None:
        """Answer what was submitted, then stop the worker (``finalize``)."""
        self._work.put(None)
        self._thread.join(timeout)


def _answer(senders: Sequence[Any], work: Work) -> None:
    """Compute one batch and send each request its answer; nothing here may stop the worker.

    A worker that died would leave every later ``submit`` waiting for ever (the model hangs),
    so a failed forward pass, a wrong number of answers or a send the server refuses each
    become that batch's (or that request's) error, and the worker takes the next batch.
    """
    final = pb_utils().TRITONSERVER_RESPONSE_COMPLETE_FINAL
    try:
        responses = list(work())
        if len(responses) != len(senders):
            raise RuntimeError(f"it returned {len(responses)} answers for {len(senders)} requests")
    except Exception as exc:  # the model failed: every request of this batch says so, the next batch runs
        responses = [error_response(f"the model failed: {exc}", invalid_input=False) for _ in senders]
    for sender, response in zip(senders, responses):
        try:
            sender.send(response, flags=final)
        except Exception as exc:  # the stub refused this answer: the request gets an error, the others their answers
            with contextlib.suppress(Exception):  # a sender that refuses even that is closed: its caller has left
                sender.send(error_response(f"the answer could not be sent: {exc}", invalid_input=False), flags=final)


class PipelinedModel:
    """A template whose batches go through ``self.pipeline`` (a ``Pipeline``, made in its ``initialize``): each
    ``execute`` submits ``self.answer_batch(requests)``, and ``finalize`` closes the pipeline."""

    pipeline: Pipeline

    def answer_batch(self, requests: Sequence[Any]) -> Sequence[Any]:
        raise NotImplementedError

    def execute(self, requests: Sequence[Any]) -> None:
        self.pipeline.submit(requests, lambda: self.answer_batch(requests))

    def finalize(self) -> None:
        self.pipeline.close()


class DecoupledModel:
    """A decoupled template whose loop thread runs sequences: ``execute`` turns each request into one
    (``self.sequence(request)``, a ``BadRequest`` answered at once) and queues it in ``self.waiting`` for the loop
    (woken by ``self.wake``), refusing one past ``self.max_waiting`` at once (busy: the client, or the gateway's
    429, comes back later) rather than queueing without end; ``finalize`` stops the loop (``self.thread``)."""

    waiting: Any
    lock: threading.Lock
    wake: threading.Event
    max_waiting: int
    stopping: bool
    thread: threading.Thread

    def sequence(self, request: Any) -> Any:
        raise NotImplementedError

    def execute(self, requests: Sequence[Any]) -> None:
        final = pb_utils().TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            try:
                sequence = self.sequence(request)
            except BadRequest as error:
                request.get_response_sender().send(error_response(str(error)), flags=final)
                continue
            with self.lock:
                full = len(self.waiting) >= self.max_waiting
                if not full:
                    self.waiting.append(sequence)
            if full:
                request.get_response_sender().send(busy_response(self.max_waiting), flags=final)
        self.wake.set()
        return None  # decoupled: every answer goes through a response sender

    def finalize(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=10)
