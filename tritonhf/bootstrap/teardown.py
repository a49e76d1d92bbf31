"""Stopping what a workspace runs, from its files alone (``tritonhf down``, a stale start).

Both ``Server`` (cleaning what a dead server left before it starts a new one) and ``Stack``
(stopping everything it started) need this, and neither may depend on the other for it.
"""

from __future__ import annotations

import os

from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.shm import remove_shm_regions
from tritonhf.bootstrap.spawn import Identity
from tritonhf.bootstrap.state import ServerState
from tritonhf.bootstrap.stubs import kill_stubs
from tritonhf.bootstrap.supervisor import Counters, supervisor_file


def stop_supervisor_process(workspace: Workspace, grace: float = 10.0) -> bool:
    """Stop the detached supervisor of ``workspace`` (if it is still the process that wrote its file)."""
    counters = Counters.load(supervisor_file(workspace))
    stopped = False
    if counters is not None and counters.pid != os.getpid():
        identity = counters.identity
        if identity.alive():
            identity.stop(grace)
            stopped = True
    supervisor_file(workspace).unlink(missing_ok=True)
    return stopped


def stop_workspace(workspace: Workspace, grace: float = 30.0) -> bool:
    """Stop everything ``tritonhf up`` started in ``workspace``, whatever state it is in.

    The supervisor goes first (so nothing is relaunched behind our back), then the gateway and
    the server the state file names *now* (the supervisor may have just restarted it), its
    stubs (found by their shm prefix, even when the server was SIGKILLed) and its shared
    memory. A pid whose start time or executable no longer match is another process now and
    is not signalled. Returns whether anything was found to stop.
    """
    found = stop_supervisor_process(workspace)
    state = ServerState.load(workspace.state_file)
    if state is not None:
        if state.gateway is not None and state.gateway.alive():
            found = True
            state.gateway.stop(10)
        identity: Identity = state.identity
        if identity.alive():
            found = True
            identity.stop(grace)
        found = kill_stubs(state.shm_prefix) > 0 or found
        remove_shm_regions(state.shm_prefix)
        workspace.state_file.unlink(missing_ok=True)
    return found
