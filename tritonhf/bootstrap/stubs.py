"""The Python backend's stub processes of a server, found in /proc.

Each model instance runs in a stub whose argv names everything we need:
``stub, model.py, shm region, shm sizes..., server pid, backend dir, ?, instance name, ...``.
Matching on the server pid in argv (not on the parent pid) also finds the stubs a
SIGKILLed server left running, re-parented to init (~350 MiB each).
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from tritonhf.bootstrap.sources import STUB_NAME

_SERVER_PID_ARG = 5
_SHM_REGION_ARG = 2
_INSTANCE_ARG = 8


@dataclass(frozen=True)
class Stub:
    pid: int
    instance: str  # e.g. clf_0_0
    shm_region: str
    alive: bool


def stubs_of(server_pid: int) -> list[Stub]:
    """The stubs started by ``server_pid``, whether that server still runs or not."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
            if len(argv) <= _INSTANCE_ARG or not argv[0].endswith(STUB_NAME):
                continue
            if argv[_SERVER_PID_ARG] != str(server_pid):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        found.append(Stub(int(entry), argv[_INSTANCE_ARG], argv[_SHM_REGION_ARG], alive=state != "Z"))
    return found


def orphaned_stubs(server_pid: int) -> list[int]:
    """Pids of the stubs of ``server_pid``; after that server died, the ones it left running."""
    return [stub.pid for stub in stubs_of(server_pid) if stub.alive]


def kill_orphaned_stubs(server_pid: int) -> int:
    killed = 0
    for pid in orphaned_stubs(server_pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def alive_per_model(stubs: list[Stub]) -> dict[str, int]:
    """How many of ``stubs`` are alive, per model."""
    alive: dict[str, int] = {}
    for stub in stubs:
        if stub.alive:
            model = instance_model(stub.instance)
            alive[model] = alive.get(model, 0) + 1
    return alive


def instance_model(instance: str) -> str:
    """``clf_0_0`` -> ``clf`` (instance names are model name, group index, instance index)."""
    return instance.rsplit("_", 2)[0]
