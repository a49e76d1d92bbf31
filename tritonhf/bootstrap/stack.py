"""What ``tritonhf up`` and the demo start: a server, the gateway beside it, a supervisor.

``Server`` runs one ``tritonserver`` and nothing else; this module composes it with the
OpenAI/TEI gateway (its own process, started by ``bootstrap/gateway.py``), the supervisor
(a thread in this process, or a detached daemon when the stack must outlive it) and the
S3 pre-check, and stops them in the reverse order. ``Stack`` is also the handle the
supervisor repairs through, so a restarted server gets its gateway back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tritonhf.bootstrap.admin import ModelStatus
from tritonhf.bootstrap.gateway import start_gateway
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import LOOPBACK, local_for
from tritonhf.bootstrap.ports import free_port, parse_port
from tritonhf.bootstrap.process import Server
from tritonhf.bootstrap.s3 import check as check_s3
from tritonhf.bootstrap.state import ServerState
from tritonhf.bootstrap.supervisor import Counters, Supervisor, supervisor_file
from tritonhf.bootstrap.teardown import stop_supervisor_process, stop_workspace
from tritonhf.errors import ServerStartError

__all__ = ["Gateway", "Stack", "stop_workspace"]


@dataclass(frozen=True)
class Gateway:
    """Where the gateway listens and its limits (``serve.limits.Limits.argv()``)."""

    host: str = LOOPBACK
    port: int | str = "auto"
    arguments: Sequence[str] = field(default_factory=tuple)


class Stack:
    """A ``Server`` plus, optionally, its gateway and a supervisor, started and stopped together."""

    def __init__(self, server: Server, *, gateway: Gateway | None = None, supervise: bool = True) -> None:
        self.server = server
        self.gateway = gateway
        self.supervise = supervise
        self._gateway_port = parse_port(gateway.port, "openai") if gateway is not None else None
        self._supervisor: Supervisor | None = None
        self._supervisor_thread: threading.Thread | None = None

    @classmethod
    def from_state(cls, workspace: Workspace | Path | str | None = None) -> Stack:
        """The stack of ``workspace`` as its state file records it, alive or not (for the daemon)."""
        server = Server.from_state(workspace)
        state = server.state
        gateway = None
        if state is not None and state.gateway_port:
            gateway = Gateway(state.gateway_host, state.gateway_port, tuple(state.gateway_args))
        return cls(server, gateway=gateway, supervise=False)

    # ----------------------------------------------------------------- the server's, for the callers' convenience

    @property
    def workspace(self) -> Workspace:
        return self.server.workspace

    @property
    def state(self) -> ServerState | None:
        return self.server.state

    # ----------------------------------------------------------------- starting and stopping

    def start(self, on_progress: Callable[[list[ModelStatus]], None] | None = None) -> ServerState:
        """Start the server, then the gateway and the supervisor; all stopped again on failure."""
        if self.server.repository.startswith("s3://"):
            check_s3(self.server.repository)  # Triton blames credentials for every S3 failure: name the cause
        state = self.server.start(on_progress)
        try:
            if self.gateway is not None:
                port = self._gateway_port or free_port(local_for(self.gateway.host))
                state.gateway_host, state.gateway_port = self.gateway.host, port
                state.gateway_args = list(self.gateway.arguments)  # kept, so a restart keeps the limits
                self.start_gateway()
            if self.supervise:
                self._start_supervisor()
        except BaseException:
            self.stop()
            raise
        return state

    def start_gateway(self) -> None:
        """The OpenAI/TEI gateway beside the server (its own process, recorded in the state file)."""
        state = self._state()
        identity = start_gateway(
            self.workspace, state.gateway_host, state.gateway_port, self.server.die_with_parent, dict(os.environ),
            state.gateway_args,
        )  # fmt: skip
        state.gateway_pid, state.gateway_started, state.gateway_executable = (
            identity.pid,
            identity.started,
            identity.executable,
        )
        state.save(self.workspace.state_file)

    def gateway_alive(self) -> bool | None:
        """None when no gateway was asked for; else whether it still runs."""
        gateway = self._state().gateway
        return None if gateway is None else gateway.alive()

    def _start_supervisor(self) -> None:
        if not self.server.die_with_parent:
            # `tritonhf up`: this process exits, so the supervisor is a detached process of its own.
            with (self.workspace.logs_dir / "supervisor.log").open("ab") as log:
                daemon = subprocess.Popen(
                    [sys.executable, "-m", "tritonhf.bootstrap.daemon", str(self.workspace.root)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            # Return only once it has registered: a `down` right after `up` must find it.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and daemon.poll() is None:
                counters = Counters.load(supervisor_file(self.workspace))
                if counters is not None and counters.pid == daemon.pid:
                    return
                time.sleep(0.05)
            raise ServerStartError(
                f"The supervisor did not start (see {self.workspace.logs_dir / 'supervisor.log'}); "
                "start with --no-supervise to run without it."
            )
        self._supervisor = Supervisor(self.server, gateway=self)
        self._supervisor_thread = threading.Thread(target=self._supervisor.run, name="tritonhf-supervisor", daemon=True)
        self._supervisor_thread.start()

    def stop(self, grace: float = 30.0) -> None:
        """Stop the supervisor (so nothing restarts behind us), the gateway, then the server."""
        if self._supervisor is not None:
            self._supervisor.stopped.set()
            if self._supervisor_thread is not None and self._supervisor_thread is not threading.current_thread():
                self._supervisor_thread.join(timeout=10)
            self._supervisor = None
        stop_supervisor_process(self.workspace)
        state = self.server.state
        if state is not None and state.gateway is not None:
            state.gateway.stop(10)
        self.server.stop(grace)

    def _state(self) -> ServerState:
        if self.server.state is None:
            raise ServerStartError("This stack was not started; call start() first.")
        return self.server.state

    # ----------------------------------------------------------------- addresses

    @property
    def gateway_url(self) -> str:
        """The OpenAI-compatible base URL (``http://HOST:PORT/v1``); empty without a gateway."""
        return self._state().gateway_url

    def __enter__(self) -> Stack:
        if self.server.state is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
