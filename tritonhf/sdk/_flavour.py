"""What the blocking ``Client`` does differently from ``AsyncClient``: its side of the few real differences.

``client.py`` is the one hand-written source; ``tools/generate_aio.py`` writes ``aio.py`` from it
by plain substitution, importing ``_aio_flavour`` where this module is imported. Everything
that cannot be a substitution lives here, once per flavour: how a call sleeps between retries,
what cancels it from outside, and how the chunks of a large input go out at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# A call the SDK makes and retries: a function of no arguments.
Action = Callable[[], T]

# Nothing cancels a blocking call from outside (the async flavour lets asyncio.CancelledError through).
CANCELLED: tuple[type[BaseException], ...] = ()


def sleep(seconds: float) -> None:
    time.sleep(seconds)


class FanOut:
    """The chunks of one call sent at once, on a pool of ``concurrency`` threads."""

    def __init__(self, concurrency: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(concurrency, 1), thread_name_prefix="tritonhf")

    def send_all(self, send: Callable[[slice], T], slices: Sequence[slice]) -> list[T]:
        """``send`` of every slice, in order; the first failure is raised, and the slices not yet sent are not sent
        (a thread's request already in flight runs to its end: a thread cannot be cancelled)."""
        if len(slices) == 1:
            return [send(slices[0])]  # one chunk: sent from this thread, no hand-over
        futures = [self._pool.submit(send, rows) for rows in slices]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
