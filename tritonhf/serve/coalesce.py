"""Concurrent embedding requests for one model sent to Triton as one call: the gateway's own batching.

Why: every Triton request costs the gateway a gRPC call, Triton its bookkeeping and the model's
Python stub its tensors and its response, whatever the number of texts in it. Sixteen clients
posting one text each paid that sixteen times; Infinity and TEI batch inside their own process
and do not. Here a request goes to Triton at once while fewer than ``calls`` of its model's calls
are in flight (a lone request waits for nothing: no timer); one that arrives while they are all
in flight waits, and what waited goes together in the next call (up to one of the model's
batches), as soon as one returns. Triton's dynamic batcher still merges the calls of several gateways.

Each answer is what the text gets alone: the gallery's encoders answer every row independently
of its batch (the batch-invariance harness checks it), and each request takes back its own
rows, tokens and cut flags. A call refused for its input (or failing inside the model) is sent
again request by request, so a bad request fails alone and the others are answered. A request
whose client left is dropped before its call is sent; a call whose every request is gone is
cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from tritonhf.errors import ClientError, InferenceError, InvalidInputError
from tritonhf.sdk import AsyncClient, Embeddings

# At most this many texts per call when the model's batch size is unknown (the SDK splits a call by it).
MAX_TEXTS = 256


@dataclass
class _Waiting:
    texts: Sequence[str]
    answer: asyncio.Future[Embeddings]


@dataclass
class _Lane:
    """The requests of one (model, normalize, truncate): the calls in flight and who waits for the next."""

    calls: int
    max_texts: int
    running: int = 0
    waiting: list[_Waiting] = field(default_factory=list)


class Coalescer:
    """``embeddings`` as the SDK's, with concurrent requests of the same model and options sent together.

    ``calls`` and ``max_texts`` default to the model's own shape: one call per instance, each at
    most one of its batches. Nothing is queued in Triton behind them: a call formed as late as
    possible (when one returns) holds everything that waited, and bigger batches compute faster per
    text than a small one queued early (measured in `make bench`); a call bigger than a batch would
    go to Triton as several requests at once, and the model would run dry while their answers go
    back.
    """

    def __init__(self, client: AsyncClient, calls: int | None = None, max_texts: int | None = None) -> None:
        self.client, self.calls, self.max_texts = client, calls, max_texts
        self._lanes: dict[tuple[str, bool | None, bool, str | None], _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def embeddings(
        self,
        texts: Sequence[str],
        *,
        model: str,
        normalize: bool | None,
        truncate: bool,
        prompt_name: str | None = None,
    ) -> Embeddings:
        key = (model, normalize, truncate, prompt_name)
        lane = self._lanes.get(key)
        if lane is None or (lane.running == 0 and not lane.waiting):
            lane = await self._lane(key)  # an idle lane reads the model's shape again: it may have been re-added
        if lane.running < lane.calls and not lane.waiting:
            lane.running += 1
            try:  # nobody waits: sent at once, from the caller's own task (its cancellation cancels the call)
                return await self.client.embeddings(
                    texts, model=model, normalize=normalize, truncate=truncate, prompt_name=prompt_name
                )
            finally:
                lane.running -= 1
                self._drain(key, lane)
        waiting = _Waiting(texts, asyncio.get_running_loop().create_future())
        lane.waiting.append(waiting)
        try:
            return await waiting.answer
        finally:
            waiting.answer.cancel()  # no-op once answered; a caller that left is skipped when its call is made

    async def _lane(self, key: tuple[str, bool | None, bool, str | None]) -> _Lane:
        instances, batch = 1, 0
        with contextlib.suppress(ClientError):  # the model's shape when known (cached by the SDK)
            info = {found.name: found for found in await self.client.models()}.get(key[0])
            if info is not None:
                instances, batch = info.instances, info.max_batch_size
        calls = max(self.calls if self.calls is not None else instances, 1)
        texts = max(self.max_texts if self.max_texts is not None else (batch or MAX_TEXTS), 1)
        lane = self._lanes.setdefault(key, _Lane(calls, texts))
        lane.calls, lane.max_texts = calls, texts
        return lane

    def _drain(self, key: tuple[str, bool | None, bool, str | None], lane: _Lane) -> None:
        """Send what waits, as one call per free slot."""
        while lane.running < lane.calls and lane.waiting:
            group: list[_Waiting] = []
            size = 0
            while lane.waiting and (not group or size + len(lane.waiting[0].texts) <= lane.max_texts):
                waiting = lane.waiting.pop(0)
                if not waiting.answer.done():  # its client left meanwhile
                    group.append(waiting)
                    size += len(waiting.texts)
            if not group:
                continue
            lane.running += 1
            task = asyncio.ensure_future(self._send(key, lane, group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, key: tuple[str, bool | None, bool, str | None], lane: _Lane, group: list[_Waiting]) -> None:
        model, normalize, truncate, prompt_name = key
        texts = [text for waiting in group for text in waiting.texts]
        call = asyncio.ensure_future(
            self.client.embeddings(texts, model=model, normalize=normalize, truncate=truncate, prompt_name=prompt_name)
        )
        try:
            while not call.done():  # cancel the call once every request in it is gone
                await asyncio.wait([call, *(w.answer for w in group)], return_when=asyncio.FIRST_COMPLETED)
                if all(w.answer.done() for w in group):
                    call.cancel()
                    with contextlib.suppress(BaseException):
                        await call
                    return
            try:
                result = call.result()
            except (InvalidInputError, InferenceError) as error:
                if len(group) == 1:
                    _settle(group[0], error=error)
                    return
                await asyncio.gather(*(self._alone(key, waiting) for waiting in group))
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the server's state, the same for every request in the call
                for waiting in group:
                    _settle(waiting, error=error)
                return
            start = 0
            for waiting in group:
                end = start + len(waiting.texts)
                part = Embeddings(result.vectors[start:end], result.tokens[start:end], result.truncated[start:end])
                _settle(waiting, part)
                start = end
        finally:
            if not call.done():
                call.cancel()
            lane.running -= 1
            self._drain(key, lane)

    async def _alone(self, key: tuple[str, bool | None, bool, str | None], waiting: _Waiting) -> None:
        """One request of a failed call, sent by itself: its own answer or its own error."""
        if waiting.answer.done():
            return
        model, normalize, truncate, prompt_name = key
        try:
            result = await self.client.embeddings(
                waiting.texts, model=model, normalize=normalize, truncate=truncate, prompt_name=prompt_name
            )
        except Exception as error:
            _settle(waiting, error=error)
        else:
            _settle(waiting, result)


def _settle(waiting: _Waiting, result: Embeddings | None = None, error: BaseException | None = None) -> None:
    if waiting.answer.done():
        return
    if error is not None:
        waiting.answer.set_exception(error)
    else:
        assert result is not None
        waiting.answer.set_result(result)
