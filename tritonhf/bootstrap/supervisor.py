"""Watch a running server and repair what Triton does not repair by itself.

Triton does not restart a model's stub process when it dies (an OOM kill, a crash in a
native library): every request to that model then fails with "Stub process ... is not
healthy", forever, while ``/v2/health/ready`` keeps answering 200. Reloading the
unchanged model is a no-op; only unload then load revives it. And nothing restarts a
killed ``tritonserver``. The supervisor checks, every ``interval`` seconds:

* the server process: dead -> restart it with the same command (capped, with backoff);
* each ready model's stub processes (children of the server named by instance, e.g.
  ``clf_0_0``): fewer alive than the config's instance count, or a "Stub process ... is
  not healthy" line in the server log -> unload + load the model (capped per model, with
  backoff), and remove the dead stubs' shared memory.

Every event goes to ``logs/supervisor.log`` with its cause; counts go to
``run/supervisor.json`` for ``tritonhf status``. ``tritonhf up`` runs it as a detached
process (``python -m tritonhf.bootstrap.supervisor WORKSPACE``); the ``Server`` API runs
it in a thread. It stops when the server's state file is removed (``down``) and never
outlives the server it watches.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tritonhf._files import load_dataclass, save_dataclass
from tritonhf.bootstrap.admin import ModelStatus
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.spawn import Identity
from tritonhf.bootstrap.state import ServerState
from tritonhf.bootstrap.stubs import Stub, alive_per_model, instance_model, kill_stubs, stubs_of

_UNHEALTHY = re.compile(r"Stub process '([^']+)' is not healthy")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class ServerHandle(Protocol):
    """What the supervisor needs of the server it watches (a ``Server``)."""

    @property
    def workspace(self) -> Workspace: ...

    @property
    def state(self) -> ServerState | None: ...

    def exit_code(self) -> int | None: ...

    def models(self) -> list[ModelStatus]: ...

    def instance_count(self, name: str) -> int: ...

    def backend(self, name: str) -> str: ...

    def reload_model(self, name: str, timeout: float = 120.0) -> bool: ...

    def probe(self, name: str) -> str | None: ...

    def relaunch(self) -> ServerState: ...


class GatewayHandle(Protocol):
    """What the supervisor needs of the gateway beside the server (a ``Stack``)."""

    def gateway_alive(self) -> bool | None: ...

    def start_gateway(self) -> None: ...


@dataclass(frozen=True)
class Policy:
    """How hard the supervisor tries."""

    interval: float = 1.0
    probe_interval: float = 10.0  # models without a stub to count (native backends)
    max_model_repairs: int = 5
    max_server_restarts: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 30.0

    def backoff(self, attempt: int) -> float:
        return float(min(self.backoff_max, self.backoff_base * 2 ** max(attempt - 1, 0)))


@dataclass
class Counters:
    """What the supervisor did; written to run/supervisor.json for `tritonhf status`."""

    pid: int = 0
    started: int = 0  # with executable: the identity of the supervisor process (pids get reused)
    executable: str = ""
    server_restarts: int = 0
    gateway_restarts: int = 0
    model_repairs: dict[str, int] = field(default_factory=dict)
    unhealthy: dict[str, str] = field(default_factory=dict)
    gave_up: list[str] = field(default_factory=list)
    updated_at: float = 0.0

    @property
    def identity(self) -> Identity:
        return Identity(self.pid, self.started, self.executable)

    def save(self, path: Path) -> None:
        self.updated_at = time.time()
        save_dataclass(self, path, mode=0o600)

    @classmethod
    def load(cls, path: Path) -> Counters | None:
        return load_dataclass(cls, path)


def supervisor_file(workspace: Workspace) -> Path:
    return workspace.run_dir / "supervisor.json"


class Supervisor:
    """Checks one server and repairs it; ``run`` loops until stopped or the server is gone for good."""

    def __init__(
        self,
        server: ServerHandle,
        policy: Policy | None = None,
        log: logging.Logger | None = None,
        gateway: GatewayHandle | None = None,
    ) -> None:
        """``gateway``: the gateway to restart when it dies (None: the server runs without one)."""
        self.server, self.gateway = server, gateway
        self.policy = policy or Policy()
        self.workspace = server.workspace
        self.log = log or _file_logger(self.workspace)
        me = Identity.of(os.getpid())
        self.counters = Counters(
            pid=os.getpid(), started=me.started if me else 0, executable=me.executable if me else ""
        )
        self._next_probe: dict[str, float] = {}
        self._known_regions: dict[str, str] = {}  # instance -> shm region, learnt while alive
        self._next_try: dict[str, float] = {}
        self._log_offset = _size(self.workspace.server_log)  # only what is logged from now on
        self.stopped = threading.Event()

    # ---------------------------------------------------------------- one check

    def check_once(self) -> None:
        state = self.server.state
        if state is None:
            return
        if self.server.exit_code() is not None:
            self._restart_server(f"tritonserver (pid {state.pid}) is not running")
            return
        if self.gateway is not None and self.gateway.gateway_alive() is False:
            self._restart_gateway()
        ready = [m.name for m in self.server.models() if m.state == "READY"]
        native = [name for name in ready if self.server.backend(name) not in ("python", "")]
        expected = {name: self.server.instance_count(name) for name in ready if name not in native}
        stubs = stubs_of(state.shm_prefix)
        self.learn_regions(stubs)
        alive = alive_per_model(stubs)
        reported = self._reported_unhealthy()
        for model in native:
            self._probe(model)
        for model, count in expected.items():
            if alive.get(model, 0) < count:
                self._repair(model, f"{count - alive.get(model, 0)} of its {count} stub process(es) died")
            elif model in reported:
                self._repair(model, "the server reported its stub not healthy")
            else:
                self.counters.unhealthy.pop(model, None)
        self._save()

    def _probe(self, model: str) -> None:
        """A model with no stub to count is checked by answering one row, now and then."""
        now = time.monotonic()
        if now < self._next_probe.get(model, 0.0):
            return
        self._next_probe[model] = now + self.policy.probe_interval
        error = self.server.probe(model)
        if error is None:
            self.counters.unhealthy.pop(model, None)
        else:
            self._repair(model, f"it did not answer a one-row inference ({error[:120]})")

    def _reported_unhealthy(self) -> set[str]:
        """Models named in "Stub process '...' is not healthy" lines logged since the last check."""
        log = self.workspace.server_log
        try:
            with log.open("rb") as handle:
                handle.seek(0, 2)
                size = handle.tell()
                if size < self._log_offset:  # a new log (restart): read from its start
                    self._log_offset = 0
                handle.seek(self._log_offset)
                fresh = handle.read(size - self._log_offset).decode(errors="replace")
                self._log_offset = size
        except OSError:
            return set()
        return {instance_model(name) for name in _UNHEALTHY.findall(fresh)}

    # ---------------------------------------------------------------- repairs

    def _repair(self, model: str, cause: str) -> None:
        self.counters.unhealthy[model] = cause
        now = time.monotonic()
        if model in self.counters.gave_up or now < self._next_try.get(model, 0.0):
            return
        attempt = self.counters.model_repairs.get(model, 0) + 1
        if attempt > self.policy.max_model_repairs:
            self.counters.gave_up.append(model)
            self.log.error("model %s: %s; gave up after %d repairs", model, cause, attempt - 1)
            return
        self.counters.model_repairs[model] = attempt
        self._save()
        self._next_try[model] = now + self.policy.backoff(attempt)
        self.log.warning("model %s: %s; repairing (unload + load, attempt %d)", model, cause, attempt)
        started = time.monotonic()
        ok = self.server.reload_model(model)
        # What was logged until now is about the stub just replaced: do not repair twice for it.
        self._log_offset = _size(self.workspace.server_log)
        removed = self._remove_dead_regions(model)
        if ok:
            self.counters.unhealthy.pop(model, None)
            self.log.info(
                "model %s: ready again in %.1f s (removed %d dead shm region(s))",
                model,
                time.monotonic() - started,
                removed,
            )
        else:
            self.log.error("model %s: reload failed; will retry in %.0f s", model, self.policy.backoff(attempt))

    def _remove_dead_regions(self, model: str) -> int:
        state = self.server.state
        living = {stub.shm_region for stub in stubs_of(state.shm_prefix)} if state else set()
        removed = 0
        for instance, region in list(self._known_regions.items()):
            if instance_model(instance) == model and region not in living:
                with contextlib.suppress(OSError):
                    Path("/dev/shm", region).unlink()
                    removed += 1
                del self._known_regions[instance]
        return removed

    def _restart_server(self, cause: str) -> None:
        attempt = self.counters.server_restarts + 1
        if attempt > self.policy.max_server_restarts:
            self.log.error("%s; gave up after %d restarts", cause, attempt - 1)
            self.stopped.set()
            return
        self.counters.server_restarts = attempt
        self._save()
        delay = self.policy.backoff(attempt)
        self.log.warning("%s; restarting it with the same options in %.0f s (attempt %d)", cause, delay, attempt)
        if self.stopped.wait(delay):
            return
        if self.stopped.is_set():
            return
        if self.server.state is not None:
            killed = kill_stubs(self.server.state.shm_prefix)
            if killed:
                self.log.info("killed %d stub process(es) the dead server left running", killed)
        started = time.monotonic()
        try:
            self.server.relaunch()
        except Exception as exc:  # logged, then retried on the next check
            self.log.error("restart failed: %s", exc)
            return
        self._known_regions.clear()
        self.learn_regions()
        pid = self.server.state.pid if self.server.state else 0
        self.log.info("tritonserver restarted (pid %d) in %.1f s", pid, time.monotonic() - started)
        self._save()

    def _restart_gateway(self) -> None:
        self.counters.gateway_restarts += 1
        self.log.warning(
            "the OpenAI gateway is not running; restarting it (restart %d)", self.counters.gateway_restarts
        )
        try:
            if self.gateway is not None:
                self.gateway.start_gateway()
        except Exception as exc:  # logged, then retried on the next check
            self.log.error("gateway restart failed: %s", exc)

    # ---------------------------------------------------------------- the loop

    def _save(self) -> None:
        with contextlib.suppress(OSError):
            self.counters.save(supervisor_file(self.workspace))

    def learn_regions(self, stubs: list[Stub] | None = None) -> None:
        """Remember each living stub's shm region, to remove it if that stub dies."""
        if stubs is None:
            stubs = stubs_of(self.server.state.shm_prefix) if self.server.state is not None else []
        for stub in stubs:
            if stub.alive:
                self._known_regions[stub.instance] = stub.shm_region

    def run(self) -> None:
        self.log.info("supervising tritonserver pid %s", self.server.state.pid if self.server.state else "?")
        self.learn_regions()
        self._save()
        while not self.stopped.wait(self.policy.interval):
            if not self.workspace.state_file.exists():
                self.log.info("server state removed (tritonhf down): supervisor stops")
                break
            try:
                self.check_once()
            except Exception as exc:  # a failed check must not end supervision
                self.log.error("check failed: %s", exc)
        self._save()


def _file_logger(workspace: Workspace) -> logging.Logger:
    logger = logging.getLogger(f"tritonhf.supervisor.{workspace.root}")
    if not logger.handlers:
        workspace.logs_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(workspace.logs_dir / "supervisor.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
