"""``--engine auto`` for a GGUF file more than one engine reads as it is (OpenVINO GenAI, llama.cpp): each measured here
as it will serve, the better kept.

Which engine is faster depends on the CPU (llama.cpp's generic AVX2 build against OpenVINO's kernels for this one),
on the file's quant type and on the load, so ``gallery add`` measures instead of guessing: greedy tokens for one
stream (what a lone client waits for) and for the instance's full batch of streams at once (what a loaded server
gets through), every engine in alternating rounds so that a noisy machine slows all alike, each answer exactly
``TOKENS`` tokens long. The rule: the engine with the larger geometric mean of its two rates (one stream, the full
batch) is kept, so neither a lone client nor a loaded server is traded away for the other. Both engines' figures go
into config.pbtxt with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tritonhf.gallery.timing import fastest_runs

TOKENS = 32  # greedy tokens per stream in a timed call
ROUNDS = 2  # alternating timed rounds per engine and load (after one warm-up call each)
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "The three primary colours",
    "Water boils at",
    "A haiku about the sea:",
    "The best way to learn a language is",
    "1, 2, 3, 4,",
)

# (each stream's prompt ids, tokens) -> the streams run at once to that many greedy tokens each, as the engine serves
Runner = Callable[[list[list[int]], int], object]


@dataclass(frozen=True)
class Measured:
    """Each engine's rates on this machine (tokens/s), and the one kept."""

    kept: str  # the label of the engine kept
    one: dict[str, float]  # label -> tokens/s for one stream
    full: dict[str, float]  # label -> aggregate tokens/s for ``streams`` at once
    streams: int

    @property
    def summary(self) -> str:
        def rates(found: dict[str, float]) -> str:
            return ", ".join(f"{label} {rate:.0f} tokens/s" for label, rate in found.items())

        return (
            f"{self.kept}, measured here on {TOKENS} greedy tokens a stream: one stream {rates(self.one)}; "
            f"{self.streams} streams at once {rates(self.full)} (the engine with the larger geometric mean of its "
            "one-stream and full-batch rates is kept)"
        )


def better(one: dict[str, float], full: dict[str, float]) -> str:
    """The label whose geometric mean of its one-stream and full-batch rates is the largest (the first on a tie)."""
    return max(one, key=lambda label: math.sqrt(one[label] * full[label]))


def measure(runners: dict[str, Runner], prompt_ids: Sequence[list[int]], streams: int) -> Measured:
    """The engines (label -> runner) at one stream and at ``streams`` at once, alternating rounds."""
    batch = [list(prompt_ids[index % len(prompt_ids)]) for index in range(streams)]

    def timed(run: Runner, prompts: list[list[int]]) -> Callable[[], object]:
        return lambda: run(prompts, TOKENS)

    runs: dict[str, Callable[[], object]] = {}
    for label, run in runners.items():
        runs[f"{label}/1"] = timed(run, batch[:1])
        runs[f"{label}/{streams}"] = timed(run, batch)
    best = fastest_runs(runs, ROUNDS)
    one = {label: TOKENS / best[f"{label}/1"] for label in runners}
    full = {label: streams * TOKENS / best[f"{label}/{streams}"] for label in runners}
    return Measured(better(one, full), one, full, streams)
