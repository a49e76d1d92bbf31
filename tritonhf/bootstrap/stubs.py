"""The Python backend's stub processes of a server, found in /proc.

Each model instance runs in a stub whose argv names everything we need:
``stub, model.py, shm region, shm sizes..., server pid, backend dir, ?, instance name, ...``.
A server's stubs are the ones whose shm region starts with that server's unique prefix
(``shm.new_prefix``): that also finds the stubs a SIGKILLed server left running (re-parented
to init, ~350 MiB each), and never another workspace's stubs, or a process that reused a pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from tritonhf.bootstrap.layout import STUB_NAME

_SHM_REGION_ARG = 2
_SERVER_PID_ARG = 5
_INSTANCE_ARG = 8


@dataclass(frozen=True)
class Stub:
    pid: int
    instance: str  # e.g. clf_0_0
    shm_region: str
    alive: bool
    server_pid: int = 0  # the server that started it (after a relaunch, an older server's stubs may linger)


def stubs_of(shm_prefix: str) -> list[Stub]:
    """The stubs of the server whose shm prefix is ``shm_prefix``, whether that server still runs or not."""
    found: list[Stub] = []
    if not shm_prefix:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
            if len(argv) <= _INSTANCE_ARG or not argv[0].endswith(STUB_NAME):
                continue
            if not argv[_SHM_REGION_ARG].startswith(shm_prefix):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        server = int(argv[_SERVER_PID_ARG]) if argv[_SERVER_PID_ARG].isdigit() else 0
        found.append(Stub(int(entry), argv[_INSTANCE_ARG], argv[_SHM_REGION_ARG], state != "Z", server))
    return found


def kill_stubs(shm_prefix: str) -> int:
    """SIGKILL the living stubs of that server (after it died, the ones it left running)."""
    killed = 0
    for stub in stubs_of(shm_prefix):
        if stub.alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stub.pid, signal.SIGKILL)
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
