"""``server_view``: Triton's statistics turned into what one bench level did, on recorded snapshots."""

from __future__ import annotations

from typing import Any

from tritonhf.loadgen import server_view

MS = 1_000_000  # statistics are in nanoseconds


def snapshot(requests: int, queue_ms: int, executions: int, batches: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """A get_inference_statistics answer: ``batches`` maps batch size -> (executions, infer ms in all)."""
    stat = lambda count, ms: {"count": str(count), "ns": str(ms * MS)}  # noqa: E731
    return {
        "model_stats": [
            {
                "name": "embed",
                "execution_count": str(executions),
                "inference_stats": {
                    "success": stat(requests, 2 * queue_ms),
                    "queue": stat(requests, queue_ms),
                    # Triton adds a batch's compute once per request in it: these must not be used per execution.
                    "compute_infer": stat(requests, 10**6),
                },
                "batch_stats": [
                    {
                        "batch_size": str(size),
                        "compute_input": stat(count, 0),
                        "compute_infer": stat(count, ms),
                        "compute_output": stat(count, 0),
                    }
                    for size, (count, ms) in batches.items()
                ],
            }
        ]
    }


def test_server_view_is_the_difference_between_snapshots() -> None:
    before = snapshot(requests=2, queue_ms=2, executions=2, batches={1: (2, 20)})
    # Then one lone request (10 ms) and one batch of 4 (20 ms): 5 requests, 2 executions.
    after = snapshot(requests=7, queue_ms=12, executions=4, batches={1: (3, 30), 4: (1, 20)})
    view = server_view(before, after)
    assert view.requests == 5
    assert view.executions == 2
    assert view.batch_sizes == {1: 1, 4: 1}
    assert view.compute_ms == 15.0  # (10 + 20) / 2 executions
    assert view.queue_ms == 2.0  # 10 ms over 5 requests
    assert view.latency_ms == 4.0  # 20 ms over 5 requests


def test_server_view_of_an_idle_level_is_zero() -> None:
    same = snapshot(requests=3, queue_ms=3, executions=3, batches={1: (3, 30)})
    view = server_view(same, same)
    assert (view.requests, view.executions, view.compute_ms, view.batch_sizes) == (0, 0, 0.0, {})
    assert server_view({}, {}).batch_sizes == {}
