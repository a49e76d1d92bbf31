"""``AsyncClient``: the same methods as ``Client``, awaitable, on real async I/O.

The same thin shell over ``_core`` as ``Client``, with ``tritonclient.grpc.aio`` /
``tritonclient.http.aio`` underneath: no threads, so thousands of concurrent calls cost one
event loop. Chunks of a large input go out concurrently (at most ``concurrency`` at once).
Cancelling a task, leaving ``async with`` or ``aclose()`` on a stream, or a timeout,
cancels the request on the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import numpy as np

from tritonhf.errors import ClientError, RequestTimeoutError
from tritonhf.sdk import _core as core
from tritonhf.sdk._aio_transport import AsyncStreamHandle, AsyncTransport, connect_async
from tritonhf.sdk._errors import translate
from tritonhf.sdk._settings import DEFAULT_TIMEOUT, default_url, key_headers
from tritonhf.sdk._transport import Endpoint
from tritonhf.sdk.results import (
    Answer,
    Classification,
    Embeddings,
    Entity,
    FillMask,
    ModelInfo,
    Ranked,
    Usage,
    ZeroShotClassification,
)

T = TypeVar("T")
R = TypeVar("R")


class AsyncTextStream(AsyncIterator[str]):
    """Generated text, chunk by chunk: ``async for chunk in stream``. ``aclose()`` (or leaving
    ``async with``, or cancelling the task) cancels the request on the server."""

    def __init__(
        self,
        client: AsyncClient,
        model: str,
        inputs: core.Tensors,
        deadline: core.Deadline,
        idle_timeout: float | None,
    ) -> None:
        self._client, self.model, self._inputs = client, model, inputs
        self._deadline, self._idle = deadline, idle_timeout
        self._progress = core.StreamProgress()
        self._handle: AsyncStreamHandle | None = None
        self._closed = False

    async def _open(self) -> None:
        self._handle = await self._client._call(
            self.model,
            lambda: self._client._transport.open_stream(self.model, self._inputs, self._wait()),
            self._deadline,
        )

    def _wait(self) -> float:
        remaining = self._deadline.remaining()
        return min(remaining, self._idle) if self._idle is not None else remaining

    @property
    def usage(self) -> Usage | None:
        return self._progress.usage

    @property
    def finish_reason(self) -> str | None:
        return self._progress.finish_reason

    def __aiter__(self) -> AsyncTextStream:
        return self

    async def __anext__(self) -> str:
        attempt = 0
        while not self._closed and self._handle is not None:
            wait = self._wait()
            if wait <= 0:
                await self.aclose()
                raise core.never_answered(self.model, self._deadline)
            try:
                response = await self._handle.next(wait)
            except asyncio.CancelledError:
                await self.aclose()
                raise
            except Exception as exc:
                error = self._error(exc, wait)
                attempt += 1
                delay = core.retry_delay(error, attempt, self._deadline) if not self._progress.chunks else None
                await self._handle.close()
                if delay is None:
                    self._closed = True
                    raise error from exc
                await asyncio.sleep(delay)
                await self._open()
                continue
            if response is None:
                await self.aclose()
                break
            text = self._progress.read(response)
            if text:
                return text
        raise StopAsyncIteration

    def _error(self, exc: Exception, wait: float) -> ClientError:
        if isinstance(exc, TimeoutError) and self._idle is not None and wait >= self._idle:
            return RequestTimeoutError(
                f"Model '{self.model}' sent nothing for {self._idle:g} s (idle_timeout).", self.model
            )
        if isinstance(exc, TimeoutError):
            return core.never_answered(self.model, self._deadline)
        error = translate(exc, self.model, self._client.url)
        self._client._directory.forget(self.model, error)
        return self._progress.stream_error(error, self.model)

    async def aclose(self) -> None:
        """Stop the stream; the server stops generating for it."""
        if not self._closed:
            self._closed = True
            if self._handle is not None:
                await self._handle.close()

    async def __aenter__(self) -> AsyncTextStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class AsyncClient:
    """Awaitable twin of ``Client``; ``async with AsyncClient(url) as client: ...``.

    The arguments are ``Client``'s; ``unavailable_timeout`` (seconds) bounds how long a call keeps
    retrying a server it cannot reach (default: until ``timeout``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        concurrency: int = 8,
        api_key: str | None = None,
        ca_file: str | None = None,
        unavailable_timeout: float | None = None,
        transport: AsyncTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self.unavailable_timeout = unavailable_timeout
        if transport is None:
            transport = connect_async(Endpoint.parse(url or default_url()), key_headers(api_key), ca_file)
        self._transport = transport
        self.url = transport.endpoint.url
        self._concurrency = max(concurrency, 1)
        self._directory = core.Directory()

    # ---------------------------------------------------------------- plumbing

    async def _call(self, model: str | None, action: Callable[[], Awaitable[T]], deadline: core.Deadline) -> T:
        attempt = 0
        while True:
            try:
                return await action()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = translate(exc, model, self.url)
                self._directory.forget(model, error)
                attempt += 1
                delay = core.retry_delay(error, attempt, deadline)
                if delay is None:
                    raise error from exc
                await asyncio.sleep(delay)

    def _deadline(self, timeout: float | None) -> core.Deadline:
        return core.Deadline(timeout if timeout is not None else self.timeout, unreachable=self.unavailable_timeout)

    async def _config(self, name: str, deadline: core.Deadline) -> core.ModelConfig:
        config = self._directory.config(name)
        if config is None:
            raw = await self._call(name, lambda: self._transport.model_config(name, deadline.remaining()), deadline)
            config = core.ModelConfig.parse(raw)
            if not config.name:
                config = core.ModelConfig(name, config.max_batch_size, config.inputs, config.outputs, config.task)
            self._directory.store_config(config)
        return config

    async def _models(self, deadline: core.Deadline) -> list[ModelInfo]:
        models = self._directory.models()
        if models is None:
            index = await self._call(None, lambda: self._transport.repository_index(deadline.remaining()), deadline)
            ready = [str(entry.get("name", "")) for entry in index if entry.get("state") == "READY"]
            configs = {name: await self._config(name, deadline) for name in ready}
            models = core.model_infos(index, configs)
            self._directory.store_models(models)
        return models

    async def _resolve(self, tasks: Sequence[str], model: str | None, deadline: core.Deadline) -> str:
        return model if model is not None else core.choose_model(await self._models(deadline), tasks, self.url)

    async def _run(self, plan: core.Plan[R], timeout: float | None) -> R:
        deadline = self._deadline(timeout)
        if plan.rows == 0 and not plan.needs_model_for_empty:
            return plan.empty(None)
        name = await self._resolve(plan.tasks, plan.model, deadline)
        config = await self._config(name, deadline)
        if plan.rows == 0:
            return plan.empty(config)
        outputs = plan.outputs(config)
        gate = asyncio.Semaphore(self._concurrency)

        async def send(rows: slice) -> core.Tensors:
            async def attempt() -> core.Tensors:
                # Read again on a retry: a model re-added meanwhile may take smaller batches.
                current = await self._config(name, deadline)
                sent = [
                    await self._transport.infer(name, plan.build(current, piece), outputs, deadline.remaining())
                    for piece in core.split(rows, current.max_batch_size)
                ]
                return core.merge(sent, outputs)

            async with gate:
                return await self._call(name, attempt, deadline)

        slices = core.chunks(plan.rows, config.max_batch_size)
        if len(slices) == 1:
            parts = [await send(slices[0])]
        else:
            parts = list(await asyncio.gather(*(send(rows) for rows in slices)))
        return plan.decode(config, core.merge(parts, outputs))

    # ---------------------------------------------------------------- the server

    async def models(self, *, timeout: float | None = None) -> list[ModelInfo]:
        return await self._models(self._deadline(timeout))

    async def resolve_model(self, tasks: Sequence[str], model: str | None = None) -> str:
        return await self._resolve(tasks, core._check_model(model), self._deadline(None))

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = self._deadline(timeout)
        while True:
            try:
                if await self._transport.is_ready(min(deadline.remaining(), 2.0)):
                    return
                error: ClientError = translate(ConnectionError("the server is not ready yet"), None, self.url)
            except Exception as exc:
                error = translate(exc, None, self.url)
            if deadline.remaining() < 0.2:
                raise error
            await asyncio.sleep(0.2)

    async def statistics(self, model: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        deadline = self._deadline(timeout)
        return dict(
            await self._call(model or None, lambda: self._transport.statistics(model, deadline.remaining()), deadline)
        )

    # ---------------------------------------------------------------- tasks

    @overload
    async def classify(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self,
        texts: str,
        *,
        model: str | None = None,
        top_k: None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> Classification: ...
    @overload
    async def classify(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        top_k: None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[Classification]: ...
    @overload
    async def classify(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self, texts: str, *, model: str | None = None, top_k: int, truncate: bool = True, timeout: float | None = None
    ) -> list[Classification]: ...
    @overload
    async def classify(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        top_k: int,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[list[Classification]]: ...

    async def classify(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        top_k: int | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> Classification | list[Classification] | list[list[Classification]]:
        """See ``Client.classify``."""
        return await self._run(core.classify(texts, model, top_k, truncate), timeout)

    async def classify_pairs(
        self,
        pairs: Sequence[tuple[str, str]],
        *,
        model: str | None = None,
        top_k: int | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[list[Classification]]:
        """Each (text, text_pair) classified together, every label best first (or the ``top_k`` best):
        natural-language inference, cross-encoders. What TEI's /predict does with pairs."""
        return await self._run(core.classify_pairs(pairs, model, top_k, truncate), timeout)

    @overload
    async def zero_shot(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self,
        texts: str,
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> ZeroShotClassification: ...
    @overload
    async def zero_shot(
        self,
        texts: Sequence[str],
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[ZeroShotClassification]: ...

    async def zero_shot(
        self,
        texts: str | Sequence[str],
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> ZeroShotClassification | list[ZeroShotClassification]:
        """See ``Client.zero_shot``."""
        return await self._run(core.zero_shot(texts, labels, model, truncate), timeout)

    @overload
    async def ner(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self, texts: str, *, model: str | None = None, aggregation: str | None = None, timeout: float | None = None
    ) -> list[Entity]: ...
    @overload
    async def ner(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        aggregation: str | None = None,
        timeout: float | None = None,
    ) -> list[list[Entity]]: ...

    async def ner(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        aggregation: str | None = None,
        timeout: float | None = None,
    ) -> list[Entity] | list[list[Entity]]:
        """See ``Client.ner``."""
        return await self._run(core.ner(texts, model, aggregation), timeout)

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> np.ndarray[Any, np.dtype[np.float32]]:
        """See ``Client.embed``."""
        return await self._run(core.embed(texts, model, normalize, truncate), timeout)

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        model: str | None = None,
        top_n: int | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[Ranked]:
        """``documents`` ranked by relevance to ``query`` (a cross-encoder), best first; ``top_n`` keeps the best n.

        Any number of documents: they go out ``max_batch_size`` at a time, concurrently, and are merged in order.
        """
        return await self._run(core.rerank(query, documents, model, top_n, truncate), timeout)

    @overload
    async def answer(
        self, question: str, context: str, *, model: str | None = None, top_k: None = None, timeout: float | None = None
    ) -> Answer: ...
    @overload
    async def answer(
        self, question: str, context: str, *, model: str | None = None, top_k: int, timeout: float | None = None
    ) -> list[Answer]: ...

    async def answer(
        self,
        question: str,
        context: str,
        *,
        model: str | None = None,
        top_k: int | None = None,
        timeout: float | None = None,
    ) -> Answer | list[Answer]:
        """The span of ``context`` that answers ``question`` (extractive QA), or the ``top_k`` best.

        A context longer than the model reads is read in overlapping windows; offsets are into ``context``.
        """
        return await self._run(core.answer(question, context, model, top_k), timeout)

    @overload
    async def fill_mask(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self,
        texts: str,
        *,
        model: str | None = None,
        top_k: int = 5,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[FillMask]: ...
    @overload
    async def fill_mask(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        top_k: int = 5,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[list[FillMask]]: ...

    async def fill_mask(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        top_k: int = 5,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[FillMask] | list[list[FillMask]]:
        """The ``top_k`` candidates for the one mask token of each text (the model's, e.g. [MASK]), best first."""
        return await self._run(core.fill_mask(texts, model, top_k, truncate), timeout)

    @overload
    async def summarize(
        self,
        text: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[False] = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str: ...
    @overload
    async def summarize(
        self,
        text: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[True],
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> AsyncTextStream: ...

    async def summarize(
        self,
        text: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str | AsyncTextStream:
        """A summary of ``text`` from a text2text model (T5, BART; its ``prefix`` parameter is applied)."""
        inputs = core.generation_inputs(
            core.check_prompt(text), False, max_tokens, temperature, top_p, seed, stop, truncate
        )
        return await self._generation(inputs, model, stream, timeout, idle_timeout, ("text2text-generation",))

    @overload
    async def translate(
        self,
        text: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[False] = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str: ...
    @overload
    async def translate(
        self,
        text: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[True],
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> AsyncTextStream: ...

    async def translate(
        self,
        text: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str | AsyncTextStream:
        """``text`` translated by a text2text model (Marian, T5 with a ``prefix`` parameter)."""
        inputs = core.generation_inputs(
            core.check_prompt(text), False, max_tokens, temperature, top_p, seed, stop, truncate
        )
        return await self._generation(inputs, model, stream, timeout, idle_timeout, ("text2text-generation",))

    async def embeddings(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> Embeddings:
        """Like ``embed``, with how many tokens each text took and which were cut (OpenAI-style usage)."""
        return await self._run(core.embeddings(texts, model, normalize, truncate), timeout)

    async def infer(
        self, model: str, /, *, timeout: float | None = None, **inputs: Any
    ) -> dict[str, np.ndarray[Any, Any]]:
        """See ``Client.infer``."""
        return await self._run(core.infer(model, inputs), timeout)

    # ---------------------------------------------------------------- generation

    @overload
    async def generate(
        self,
        prompt: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[False] = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str: ...
    @overload
    async def generate(
        self,
        prompt: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[True],
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> AsyncTextStream: ...

    async def generate(
        self,
        prompt: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str | AsyncTextStream:
        """See ``Client.generate``; with ``stream=True`` an ``AsyncTextStream``."""
        inputs = core.generation_inputs(
            core.check_prompt(prompt), False, max_tokens, temperature, top_p, seed, stop, truncate
        )
        return await self._generation(inputs, model, stream, timeout, idle_timeout)

    @overload
    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[False] = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str: ...
    @overload
    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: Literal[True],
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> AsyncTextStream: ...

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        truncate: bool = False,
        stream: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> str | AsyncTextStream:
        """See ``Client.chat``."""
        inputs = core.generation_inputs(
            core.chat_text(messages), True, max_tokens, temperature, top_p, seed, stop, truncate
        )
        return await self._generation(inputs, model, stream, timeout, idle_timeout)

    async def _generation(
        self,
        inputs: core.Tensors,
        model: str | None,
        stream: bool,
        timeout: float | None,
        idle: float | None,
        tasks: Sequence[str] = ("text-generation", "text2text-generation"),
    ) -> str | AsyncTextStream:
        deadline = self._deadline(timeout)
        name = await self._resolve(tasks, core._check_model(model), deadline)
        chunks = AsyncTextStream(self, name, inputs, deadline, idle)
        await chunks._open()
        if stream:
            return chunks
        async with chunks:
            return "".join([chunk async for chunk in chunks])

    # ---------------------------------------------------------------- lifetime

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()
