"""Starting and stopping processes, and knowing that a pid is still the process we started.

Two things go wrong with the obvious code, and this module exists for them:

* ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the process.
  A server started from a short-lived thread (or restarted by a supervisor thread) would be
  killed when that thread returns. So every child that must die with this process is forked
  by one process-wide spawner thread that lives exactly as long as the process does.
* A pid read from a state file may belong to another program by now (pids are reused).
  ``Identity`` records the pid's start time and executable; nothing is signalled unless both
  still match.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1
try:  # looked up before any fork: the child only calls it
    _PRCTL: Callable[..., int] | None = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


@dataclass(frozen=True)
class Identity:
    """A process as it was when we started it: pid, start time (clock ticks since boot), executable."""

    pid: int
    started: int
    executable: str

    @classmethod
    def of(cls, pid: int) -> Identity | None:
        """The identity of the running process ``pid``, or None when there is none (or a zombie)."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] == "Z":  # exited, not yet reaped
            return None
        return cls(pid, int(fields[19]), argv0)

    def alive(self) -> bool:
        """Is this very process still running (not just some process with the same pid)?"""
        return Identity.of(self.pid) == self

    def signal(self, number: int) -> bool:
        """Send ``number`` if this is still the process we started; False when it is gone or not ours."""
        if not self.alive():
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, number)
            return True
        return False

    def wait_gone(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.alive():
                return True
            time.sleep(0.05)
        return not self.alive()

    def stop(self, grace: float, kill_after: float = 10.0) -> bool:
        """SIGTERM, then SIGKILL after ``grace`` seconds; True once it is gone."""
        if not self.signal(signal.SIGTERM):
            return not self.alive()
        if self.wait_gone(grace):
            return True
        self.signal(signal.SIGKILL)
        return self.wait_gone(kill_after)


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the spawner thread (this process) ends."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Spawner:
    """One daemon thread that forks every child that must die with this process."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]] = (
            queue.Queue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, make: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tritonhf-spawner", daemon=True)
                self._thread.start()
        future: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((make, future))
        return future.result()

    def _loop(self) -> None:
        while True:
            make, future = self._jobs.get()
            try:
                future.set_result(make())
            except BaseException as exc:  # handed to the caller, raised there
                future.set_exception(exc)


_SPAWNER = _Spawner()


def spawn(
    command: list[str], log: Path, env: dict[str, str], cwd: Path, die_with_parent: bool, append: bool = False
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session, output to ``log``.

    ``die_with_parent``: killed when this process ends (however it ends), but not when the
    calling thread does. Otherwise it outlives this process (`tritonhf up`).
    """

    def make() -> subprocess.Popen[bytes]:
        with log.open("ab" if append else "wb") as sink:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if die_with_parent else None,
            )

    return _SPAWNER.run(make) if die_with_parent else make()


def identity_of(process: subprocess.Popen[bytes], wait: float = 5.0) -> Identity:
    """The identity of a child just started, read once its exec has completed.

    For a moment after fork the child's command line is empty (or still Python's), so wait
    until it names the program it runs.
    """
    program = str(process.args[0]) if isinstance(process.args, (list, tuple)) else str(process.args).split()[0]
    deadline = time.monotonic() + wait
    while True:
        found = Identity.of(process.pid)
        if found is None:  # it already exited: an identity nothing will ever match again
            return Identity(process.pid, -1, "")
        if found.executable == program or time.monotonic() > deadline:
            return found
        time.sleep(0.001)
