"""What ``AsyncClient`` does differently from the blocking ``Client``: its side of the few real differences.

The generated ``aio.py`` imports this module where ``client.py`` imports ``_flavour``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from tritonhf._wire.aio_transport import all_or_none

T = TypeVar("T")

# A call the SDK makes and retries: a coroutine function of no arguments.
Action = Callable[[], Awaitable[T]]

# A cancelled task cancels its request on the server: never retried, never translated.
CANCELLED: tuple[type[BaseException], ...] = (asyncio.CancelledError,)


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class FanOut:
    """The chunks of one call sent at once on the event loop, at most ``concurrency`` at a time."""

    def __init__(self, concurrency: int) -> None:
        self._concurrency = max(concurrency, 1)

    async def send_all(self, send: Callable[[slice], Awaitable[T]], slices: Sequence[slice]) -> list[T]:
        """``send`` of every slice, in order; at the first failure the others are cancelled (their requests too) and
        have ended when it is raised."""
        if len(slices) == 1:
            return [await send(slices[0])]
        gate = asyncio.Semaphore(self._concurrency)

        async def gated(rows: slice) -> T:
            async with gate:
                return await send(rows)

        return await all_or_none(gated(rows) for rows in slices)

    def close(self) -> None:
        """Nothing to release: no threads."""
