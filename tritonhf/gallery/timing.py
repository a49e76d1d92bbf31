"""Alternating timed rounds, the way every family measures its engines at ``gallery add``.

Engines are timed as they will serve (an instance's share of the cores), one call each to warm up, then in rounds
whose order is reversed every other round, so that a noisy machine's drift falls on all of them alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def threads(instances: int = 1) -> int:
    """The intra-op threads one instance gets when served (the runtime's rule: its share of the cores)."""
    return max(1, (os.cpu_count() or 1) // max(instances, 1))


def fastest_runs(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Each run's best time in seconds: one warm-up call each, then ``rounds`` rounds, the order reversed every
    other round, so the machine's drift falls on all alike."""
    timings: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm-up
    for index in range(rounds):
        order = list(runs.items())
        for name, run in order if index % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            run()
            timings[name].append(time.perf_counter() - started)
    return {name: min(values) for name, values in timings.items()}
