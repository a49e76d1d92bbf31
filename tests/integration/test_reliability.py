"""Faults a user meets: a stub killed under load, a killed server, bad input in a batch with good input."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonhf import Client, ClientError
from tritonhf.bootstrap import Server, Stack, Workspace
from tritonhf.bootstrap.stubs import stubs_of
from tritonhf.bootstrap.supervisor import Counters, supervisor_file
from tritonhf.gallery import AddRequest, ModelOptions, add_model

pytestmark = [pytest.mark.integration, pytest.mark.alone]  # a repair within 30 s, calls within their deadline


@pytest.fixture
def supervised(workspace: Workspace, tiny: dict[str, Path]) -> Iterator[Server]:
    add_model(
        AddRequest(
            "text-classification",
            str(tiny["classifier"]),
            workspace.model_repository,
            name="clf",
            options=ModelOptions(max_batch_size=8),
        )
    )
    # A batch a killed stub was computing is never completed by Triton (2.51): at stop, Triton would wait its
    # whole exit timeout (10 s by default) for it; 2 s is enough for the requests that do end.
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", exit_timeout=2)
    with Stack(server) as stack:
        yield stack.server


def _stub_pid(server: Server) -> int:
    (stub,) = [s for s in stubs_of(server.state.shm_prefix) if s.alive and s.instance.startswith("clf_")]
    return stub.pid


def test_killed_stub_is_repaired_while_requests_keep_coming(supervised: Server) -> None:
    """Requests keep coming while the stub is SIGKILLed: every call ends within its deadline, the model
    answers again without anyone acting, and every call sent after the kill gets an answer or a typed
    error by the end of the repair (the SDK retries a model being repaired within the deadline).

    The one exception is Triton's (2.51): a batch the stub was computing when it died, answered
    through its requests' response senders (``runtime.Pipeline``), is never completed by Triton,
    not even after the repair; its callers learn at their deadline. With one caller that is at
    most the one call in flight at the kill (docs/guarantees.md says so). That caller is then held
    until its deadline, past the repair, so the test also sends calls of its own after the kill
    (every 0.2 s until the model answers again) and holds them to the same rules."""
    timeout = 20.0
    with Client(supervised.grpc_url, timeout=timeout) as client:
        expected = client.classify("a wonderful movie").label
        stop = threading.Event()
        calls: list[tuple[float, float, str]] = []  # (started, ended, outcome)

        def call() -> str:
            started = time.monotonic()
            try:
                label = client.classify("a wonderful movie", model="clf").label
                outcome = "ok" if label == expected else "mismatch"
            except ClientError as exc:
                outcome = type(exc).__name__
            calls.append((started, time.monotonic(), outcome))
            return outcome

        def load() -> None:
            while not stop.is_set():
                call()

        worker = threading.Thread(target=load)
        worker.start()
        time.sleep(0.5)
        old = _stub_pid(supervised)
        region = next(s.shm_region for s in stubs_of(supervised.state.shm_prefix) if s.pid == old)
        os.kill(old, signal.SIGKILL)
        killed_at = time.monotonic()
        recovered = None
        while time.monotonic() - killed_at < 30:
            outcome = call()  # sent after the kill, whatever the load thread is waiting for
            stubs = [s for s in stubs_of(supervised.state.shm_prefix) if s.alive and s.instance.startswith("clf_")]
            if outcome == "ok" and stubs and stubs[0].pid != old:
                recovered = time.monotonic() - killed_at
                break
            time.sleep(0.2)
        time.sleep(1)
        stop.set()
        worker.join(timeout=timeout + 10)
    assert not worker.is_alive()
    assert recovered is not None, "the model should answer again within 30 s without anyone acting"
    outcomes = [outcome for _, _, outcome in calls]
    assert all(ended - started < timeout + 1 for started, ended, _ in calls), "a call must stay within its deadline"
    lost = [(started, ended) for started, ended, outcome in calls if outcome == "RequestTimeoutError"]
    assert len(lost) <= 1 and all(started < killed_at for started, _ in lost), (
        f"only the call in flight at the kill may be lost to its deadline: {lost} (kill at {killed_at})"
    )
    after = [ended for started, ended, _ in calls if started > killed_at]
    assert after and max(after) < killed_at + recovered + 5, "calls sent after the kill end with the repair"
    assert "mismatch" not in outcomes
    assert outcomes.count("ok") > 10
    assert set(outcomes) <= {
        "ok",
        "ModelNotReadyError",
        "InferenceError",
        "ServerUnavailableError",
        "ModelNotFoundError",
        "RequestTimeoutError",
    }
    counters = Counters.load(supervisor_file(supervised.workspace))
    assert counters is not None
    server_log = (supervised.workspace.logs_dir / "server.log").read_text(errors="replace")
    if "boost::interprocess::lock_exception" in server_log:
        # Triton 2.51's Python backend aborts the whole server when a stub dies holding the lock on the memory
        # they share (once in several runs here): the repair is then the server's restart, and every check on
        # the calls above held all the same.
        assert counters.server_restarts == 1 and not counters.model_repairs, counters
    else:
        assert counters.model_repairs.get("clf") == 1, counters
        log = (supervised.workspace.logs_dir / "supervisor.log").read_text()
        assert "model clf" in log and "died" in log
        assert not Path("/dev/shm", region).exists(), "the dead stub's shared memory is removed"
    print(
        f"recovered {recovered:.1f} s after kill -9 of the stub; outcomes: "
        f"{ {k: outcomes.count(k) for k in set(outcomes)} }"
    )


def test_killed_server_is_restarted_with_the_same_models(supervised: Server) -> None:
    with Client(supervised.http_url, timeout=60) as client:
        expected = client.classify("a wonderful movie", model="clf").label
        old_pid = supervised.pid
        os.kill(old_pid, signal.SIGKILL)
        started = time.monotonic()
        # The sdk retries while the server is away, within the call's timeout.
        assert client.classify("a wonderful movie", model="clf").label == expected
        took = time.monotonic() - started
    assert supervised.pid != old_pid
    assert [m.state for m in supervised.models()] == ["READY"]
    lingering = [s for s in stubs_of(supervised.state.shm_prefix) if s.alive and s.server_pid == old_pid]
    assert not lingering, "the killed server's stubs must not keep running"
    counters = Counters.load(supervisor_file(supervised.workspace))
    assert counters is not None and counters.server_restarts == 1
    print(f"server back and answering {took:.1f} s after kill -9")
