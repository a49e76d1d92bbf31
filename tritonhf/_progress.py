"""How library code reports long work without printing: the CLI passes a reporter in."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives the steps and the advance of long work (downloads, extraction, loading)."""

    def step(self, message: str) -> None:
        """A new phase starts; ``message`` says what it is."""

    def advance(self, done: int, total: int) -> None:
        """``done`` of ``total`` units of the current phase are finished."""


class SilentProgress:
    """The default reporter: says nothing."""

    def step(self, message: str) -> None:
        pass

    def advance(self, done: int, total: int) -> None:
        pass
