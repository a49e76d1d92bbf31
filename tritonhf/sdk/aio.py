"""``AsyncClient``: the same methods as ``Client``, awaitable.

A thin shell: each call runs the synchronous client's method in a worker thread (the
network waits release the GIL), and a stream is relayed chunk by chunk through a queue,
so both clients share one implementation of encoding, batching and error translation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from tritonhf.sdk.client import DEFAULT_TIMEOUT, Client
from tritonhf.sdk.results import ModelInfo

_DONE = object()


class AsyncClient:
    """Awaitable twin of ``Client``; ``async with AsyncClient(url) as client: ...``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        concurrency: int = 8,
        api_key: str | None = None,
    ) -> None:
        self._client = Client(url, timeout=timeout, concurrency=concurrency, api_key=api_key)
        self.url = self._client.url

    async def classify(
        self,
        texts: str | Sequence[str],
        model: str | None = None,
        top_k: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        return await asyncio.to_thread(lambda: self._client.classify(texts, model, top_k, timeout))  # type: ignore[arg-type]

    async def zero_shot(
        self,
        texts: str | Sequence[str],
        labels: Sequence[str] | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        return await asyncio.to_thread(lambda: self._client.zero_shot(texts, labels, model, timeout))

    async def ner(self, texts: str | Sequence[str], model: str | None = None, timeout: float | None = None) -> Any:
        return await asyncio.to_thread(lambda: self._client.ner(texts, model, timeout))

    async def embed(
        self,
        texts: str | Sequence[str],
        model: str | None = None,
        normalize: bool | None = None,
        timeout: float | None = None,
    ) -> np.ndarray[Any, np.dtype[np.float32]]:
        return await asyncio.to_thread(self._client.embed, texts, model, normalize, timeout)

    async def generate(self, prompt: str, model: str | None = None, *, stream: bool = False, **options: Any) -> Any:
        """The generated text; with ``stream=True`` an async iterator of chunks."""
        if stream:
            return self._relay(lambda: self._client.generate(prompt, model, stream=True, **options))
        return await asyncio.to_thread(lambda: self._client.generate(prompt, model, **options))

    async def chat(
        self, messages: Sequence[dict[str, str]], model: str | None = None, *, stream: bool = False, **options: Any
    ) -> Any:
        if stream:
            return self._relay(lambda: self._client.chat(messages, model, stream=True, **options))
        return await asyncio.to_thread(lambda: self._client.chat(messages, model, **options))

    async def _relay(self, start: Any) -> AsyncIterator[str]:
        """Run a sync stream in a thread; hand each chunk (or the error) to the event loop."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[Any] = asyncio.Queue()

        def pump() -> None:
            try:
                iterator: Iterator[str] = start()
                for chunk in iterator:
                    loop.call_soon_threadsafe(chunks.put_nowait, chunk)
            except BaseException as exc:  # delivered to the consumer, raised there
                loop.call_soon_threadsafe(chunks.put_nowait, exc)
            loop.call_soon_threadsafe(chunks.put_nowait, _DONE)

        threading.Thread(target=pump, name="tritonhf-stream", daemon=True).start()
        while True:
            item = await chunks.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def infer(self, model: str, timeout: float | None = None, **inputs: Any) -> dict[str, np.ndarray[Any, Any]]:
        return await asyncio.to_thread(lambda: self._client.infer(model, timeout, **inputs))

    async def models(self) -> list[ModelInfo]:
        return await asyncio.to_thread(self._client.models)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        await asyncio.to_thread(self._client.wait_ready, timeout)

    async def statistics(self, model: str = "") -> dict[str, Any]:
        return await asyncio.to_thread(self._client.statistics, model)

    async def close(self) -> None:
        self._client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()
