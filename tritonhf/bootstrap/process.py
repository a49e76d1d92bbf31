"""Start, watch and stop one ``tritonserver`` of a workspace.

``Server`` is both the Python API (``with Server(workspace) as server: server.http_url``)
and what ``tritonhf up``/``status`` call; ``stop_workspace`` is ``tritonhf down``. A started
server records itself in ``run/server.json`` (owner-only) so that a later command finds it.
Logs always go to ``logs/server.log``.

Where the services listen (the security model, docs/operations.md "Security"):

* By default every service binds to 127.0.0.1: only this machine reaches it, and every
  local user can use every API, as with any loopback service.
* With ``host`` beyond loopback, ONE protocol binds there (``expose``: gRPC by default,
  which can use TLS; or HTTP), and every admin API on it (model repository, shared memory,
  statistics, trace, logging) is restricted by a value made anew at each launch and kept
  nowhere: no client holds a key, so remote clients get inference, health, metadata and
  model configs, never admin. The other protocol stays on loopback, unrestricted: that is
  tritonhf's own admin path (supervisor repairs, ``status``). Triton only takes that value on
  its command line, where local users can read it, but they gain nothing by it that the
  loopback listener does not already give them; remote users cannot read it.
* Metrics stay on loopback unless ``expose_metrics``.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from tritonhf.bootstrap.admin import Admin, ModelStatus
from tritonhf.bootstrap.autocomplete import needs_auto_complete
from tritonhf.bootstrap.command import (
    EXPOSABLE,
    MODEL_CONTROL_MODES,
    Installation,
    ServerConfig,
    Tls,
    restriction,
)
from tritonhf.bootstrap.diagnose import Diagnosis, diagnose
from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import LOOPBACK, local_for
from tritonhf.bootstrap.ports import ensure_free, free_port, parse_port
from tritonhf.bootstrap.shm import new_prefix, remove_shm_regions
from tritonhf.bootstrap.spawn import identity_of, spawn
from tritonhf.bootstrap.state import ServerState
from tritonhf.bootstrap.stubs import kill_stubs
from tritonhf.bootstrap.teardown import stop_workspace
from tritonhf.errors import (
    BootstrapError,
    ServerAlreadyRunningError,
    ServerNotRunningError,
    ServerStartError,
    StubEnvironmentError,
)

# After a model is reported failed, wait this long for the server to exit by itself
# (it does with --exit-on-error) before stopping it ourselves.
_FAILURE_GRACE_S = 10.0
# An ``auto`` port is free when chosen, and bound by tritonserver only once its models are loaded: another
# process may take it meanwhile. The start is then made again on fresh ports, at most this many times in all.
_PORT_ATTEMPTS = 3

__all__ = ["EXPOSABLE", "MODEL_CONTROL_MODES", "ModelStatus", "Server", "ServerState", "Tls"]


class Server:
    """A ``tritonserver`` for one workspace, started in the background.

    Ports are numbers or ``"auto"`` (a free port). ``die_with_parent`` (the default for the
    Python API) makes the server exit when this Python process does, whichever thread
    started it; ``tritonhf up`` turns it off. Models load in ``explicit`` model-control mode
    by default (all of them at start), which lets a supervisor unload and load a model whose
    stub died. The process only: ``Stack`` adds the gateway, the supervisor and the S3 check.
    """

    def __init__(
        self,
        workspace: Workspace | Path | str | None = None,
        config: ServerConfig | None = None,
        *,
        host: str = LOOPBACK,
        expose: str = "grpc",
        expose_metrics: bool = False,
        http_port: int | str = 8000,
        grpc_port: int | str = 8001,
        metrics_port: int | str = 8002,
        model_control: str = "explicit",
        log_verbose: int = 0,
        repository: Path | str | None = None,
        startup_timeout: float = 60.0,
        exit_timeout: int = 10,
        die_with_parent: bool = True,
        environment: StubEnvironment | None = None,
        tls: Tls | None = None,
    ) -> None:
        """``config``: what the server runs as (pytriton's ``TritonServer(path, config)``); without it, one is made
        from the keywords (``host`` ... ``tls``, and ``repository``, the workspace's by default). The ports, the
        timeouts and the environment are this process's, not the config's."""
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace.at(workspace)
        beside = [
            name
            for name, value, default in (
                ("host", host, LOOPBACK),
                ("expose", expose, "grpc"),
                ("expose_metrics", expose_metrics, False),
                ("model_control", model_control, "explicit"),
                ("log_verbose", log_verbose, 0),
                ("repository", repository, None),
                ("exit_timeout", exit_timeout, 10),
                ("tls", tls, None),
            )
            if value != default
        ]
        if config is not None and beside:
            raise ValueError(
                f"Server(config=...) runs as its config says; {', '.join(beside)} given beside it would be dropped: "
                "set them in the ServerConfig (dataclasses.replace(config, ...))."
            )
        self.config = config or ServerConfig(
            str(repository) if repository else str(self.workspace.model_repository), host, expose, expose_metrics,
            model_control, log_verbose, exit_timeout, tls,
        )  # fmt: skip
        self._ports = {
            "http": parse_port(http_port, "http"),
            "grpc": parse_port(grpc_port, "grpc"),
            "metrics": parse_port(metrics_port, "metrics"),
        }
        self.startup_timeout = startup_timeout
        self.die_with_parent = die_with_parent
        self.environment = environment
        self.state: ServerState | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._configs: dict[str, dict[str, Any]] = {}
        self._admin: Admin | None = None

    # ----------------------------------------------------------------- finding a server

    @classmethod
    def attach(cls, workspace: Workspace | Path | str | None = None) -> Server:
        """The server of ``workspace`` that an earlier command started, if it still runs."""
        server = cls.from_state(workspace)
        if server.state is None or not server.state.identity.alive():
            raise ServerNotRunningError(
                f"No tritonhf server is running for workspace {server.workspace.root}. Start one with `tritonhf up`."
            )
        return server

    @classmethod
    def from_state(cls, workspace: Workspace | Path | str | None = None) -> Server:
        """The server of ``workspace`` as its state file records it, alive or not (for the supervisor)."""
        server = cls(workspace)
        state = ServerState.load(server.workspace.state_file)
        if state is None:
            raise ServerNotRunningError(
                f"No tritonhf server is running for workspace {server.workspace.root}. Start one with `tritonhf up`."
            )
        server.state = state
        server.config = replace(server.config, repository=state.repository)
        return server

    @property
    def repository(self) -> str:
        """The model repository it serves (a folder, or an s3:// URL)."""
        return self.config.repository

    @property
    def exposed(self) -> bool:
        return self.config.exposed

    def _refuse_if_running(self) -> None:
        state = ServerState.load(self.workspace.state_file)
        if state is None:
            return
        if state.identity.alive():
            raise ServerAlreadyRunningError(
                f"A server for workspace {self.workspace.root} is already running (pid {state.pid}, "
                f"{state.local_url}). Use it, or stop it first with `tritonhf down`."
            )
        stop_workspace(self.workspace)  # what a server that died without `down` left behind

    # ----------------------------------------------------------------- starting

    def addresses(self) -> dict[str, str]:
        """Where each service listens (``ServerConfig.addresses``)."""
        return self.config.addresses()

    @property
    def admin_protocol(self) -> str:
        return self.config.admin_protocol

    def command(self, ports: dict[str, int], shm_prefix: str) -> list[str]:
        """The tritonserver command line, without the per-launch restriction (added by ``_launch``)."""
        workspace = self.workspace
        installation = Installation(workspace.binary, workspace.backends_dir, workspace.server_dir / "caches")
        config = replace(self.config, auto_complete=needs_auto_complete(self.repository))
        return config.argv(installation, ports, shm_prefix)

    def _launch(self, state: ServerState, append_log: bool) -> None:
        environment = self.environment or StubEnvironment.for_workspace(self.workspace)
        self._process = spawn(
            state.command + restriction(state.host, state.admin_protocol, secrets.token_urlsafe(32)),
            Path(state.log),
            environment.server_env(self.workspace.lib_dir),
            self.workspace.root,
            self.die_with_parent,
            append=append_log,
        )
        identity = identity_of(self._process)
        state.pid, state.started, state.binary = identity.pid, identity.started, identity.executable
        state.started_at = time.time()
        state.save(self.workspace.state_file)
        self._admin = None
        self._configs.clear()

    def _resolve_ports(self, addresses: dict[str, str]) -> dict[str, int]:
        ports: dict[str, int] = {}
        for service, port in self._ports.items():
            bind = addresses[service] if addresses[service] not in ("0.0.0.0", "::") else local_for(addresses[service])
            if port is None:
                port = free_port(bind)
                while port in ports.values():
                    port = free_port(bind)
            else:
                ensure_free(port, service, bind)
            ports[service] = port
        return ports

    def start(self, on_progress: Callable[[list[ModelStatus]], None] | None = None) -> ServerState:
        """Start the server and wait until it and all its models are ready.

        Raises ``ServerStartError`` (with diagnoses and the log path) when the server exits
        or a model fails, within ``startup_timeout`` seconds; the process is stopped then.
        """
        workspace = self.workspace
        if not workspace.binary.is_file():
            raise BootstrapError(
                f"No server is installed in {workspace.root}. Run `tritonhf bootstrap "
                f"--workspace {workspace.root}` first."
            )
        if self.config.tls is not None:
            self.config.tls.check()
        self._refuse_if_running()
        environment = self.environment or StubEnvironment.for_workspace(workspace)
        problems = environment.problems()
        if problems:
            raise StubEnvironmentError("The Python backend cannot run here:\n- " + "\n- ".join(problems))
        self.environment = environment
        workspace.create_folders()
        if "://" not in self.repository:
            Path(self.repository).mkdir(parents=True, exist_ok=True)
        addresses = self.addresses()
        attempt = 0
        while True:
            attempt += 1
            ports = self._resolve_ports(addresses)
            shm_prefix = new_prefix()
            log_path = workspace.server_log
            if log_path.exists():
                log_path.replace(log_path.with_suffix(".log.prev"))
            self.state = ServerState(
                pid=0,
                started=0,
                binary=str(workspace.binary),
                host=self.config.host,
                http_address=addresses["http"],
                grpc_address=addresses["grpc"],
                metrics_address=addresses["metrics"],
                http_port=ports["http"],
                grpc_port=ports["grpc"],
                metrics_port=ports["metrics"],
                admin_protocol=self.admin_protocol,
                tls=self.config.tls is not None,
                shm_prefix=shm_prefix,
                log=str(log_path),
                repository=self.repository,
                model_control=self.config.model_control,
                started_at=time.time(),
                command=self.command(ports, shm_prefix),
            )
            self._launch(self.state, append_log=False)
            try:
                self._wait_ready(on_progress)
                return self.state
            except BaseException as error:
                self.stop()
                # another process bound a free port between our choice and the server's bind: again
                lost_port = isinstance(error, ServerStartError) and self._lost_an_auto_port(ports)
                if not (lost_port and attempt < _PORT_ATTEMPTS):
                    raise

    def _lost_an_auto_port(self, ports: dict[str, int]) -> bool:
        """Whether the server failed because a port tritonhf chose (``auto``) was taken meanwhile."""
        chosen = {ports[service] for service, port in self._ports.items() if port is None}
        return any(diagnosis.port in chosen for diagnosis in self.diagnoses())

    def _wait_ready(self, on_progress: Callable[[list[ModelStatus]], None] | None) -> None:
        deadline = time.monotonic() + self.startup_timeout
        failure_seen_at: float | None = None
        while True:
            exit_code = self.exit_code()
            if exit_code is not None:
                raise self._start_failure(f"tritonserver exited with code {exit_code} while starting")
            if self.admin().ready():
                return
            if on_progress is not None:
                with contextlib.suppress(OSError, ValueError):
                    on_progress(self.models())
            now = time.monotonic()
            if failure_seen_at is None and any(d.model for d in self.diagnoses()):
                failure_seen_at = now
            if failure_seen_at is not None and now - failure_seen_at > _FAILURE_GRACE_S:
                raise self._start_failure("a model failed to load")
            if now > deadline:
                raise self._start_failure(
                    f"the server was not ready after {self.startup_timeout:.0f} s{self._stuck_models()}"
                )
            time.sleep(0.1)

    def _stuck_models(self) -> str:
        loading, loaded = set(), set()
        for line in self.log_lines():
            if '"loading: ' in line:
                loading.add(line.split('"loading: ', 1)[1].split(":")[0])
            if "successfully loaded '" in line:
                loaded.add(line.split("successfully loaded '", 1)[1].split("'")[0])
        stuck = sorted(loading - loaded)
        return f" (still loading: {', '.join(stuck)})" if stuck else ""

    def _start_failure(self, what: str) -> ServerStartError:
        diagnoses = self.diagnoses()
        log = str(self.workspace.server_log)
        lines = [f"The server did not start: {what}."]
        lines += [f"- {diagnosis}" for diagnosis in diagnoses]
        if not diagnoses:
            lines.append("No known failure was found in the log; read it for details.")
        lines.append(f"Server log: {log}")
        return ServerStartError("\n".join(lines), diagnoses=[str(d) for d in diagnoses], log_path=log)

    def relaunch(self) -> ServerState:
        """Start the server again with the same command and ports (after it died)."""
        state = self._require_state()
        kill_stubs(state.shm_prefix)  # what the dead server left running
        remove_shm_regions(state.shm_prefix)
        self._launch(state, append_log=True)
        self._wait_ready(None)
        return state

    # ----------------------------------------------------------------- observing

    def admin(self) -> Admin:
        """The client on this server's loopback admin endpoint."""
        if self._admin is None:
            self._admin = Admin(self._require_state().admin_url)
        return self._admin

    def model_config(self, name: str) -> dict[str, Any]:
        if name not in self._configs:
            config = dict(self.admin().raw_config(name))
            if not config:
                return {}
            self._configs[name] = config
        return self._configs[name]

    def instance_count(self, name: str) -> int:
        """How many stub processes the model's config asks for (its instance groups)."""
        groups = self.model_config(name).get("instance_group", [{"count": 1}])
        return sum(int(group.get("count", 1)) for group in groups)

    def backend(self, name: str) -> str:
        """The model's backend ("python", "onnxruntime" ...); "" when unknown."""
        return str(self.model_config(name).get("backend", ""))

    def reload_model(self, name: str, timeout: float = 120.0) -> bool:
        """Unload then load ``name`` (explicit model control); True once it is ready again."""
        self._configs.pop(name, None)
        return self.admin().reload(name, timeout)

    def probe(self, name: str) -> str | None:
        """One row of zeros through ``name``; None when it answers, else the error."""
        return self.admin().probe(name)

    def log_lines(self) -> list[str]:
        path = Path(self.state.log) if self.state else self.workspace.server_log
        try:
            return path.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def diagnoses(self) -> list[Diagnosis]:
        return diagnose(self.log_lines())

    def _require_state(self) -> ServerState:
        if self.state is None:
            raise ServerNotRunningError("This server was not started; call start() first.")
        return self.state

    def exit_code(self) -> int | None:
        """None while the server runs; its exit code (or -1 when not our child) once it stopped."""
        if self._process is not None:
            return self._process.poll()
        return None if self._require_state().identity.alive() else -1

    def is_running(self) -> bool:
        return self.state is not None and self.exit_code() is None

    def is_ready(self) -> bool:
        return self.admin().ready()

    def metadata(self) -> dict[str, Any]:
        return dict(self.admin().metadata())

    def models(self) -> list[ModelStatus]:
        """Every model in the repository with its state (READY, LOADING, UNAVAILABLE ...)."""
        return self.admin().models()

    @property
    def http_url(self) -> str:
        return self._require_state().http_url

    @property
    def grpc_url(self) -> str:
        return self._require_state().grpc_url

    @property
    def metrics_url(self) -> str:
        return self._require_state().metrics_url

    @property
    def local_url(self) -> str:
        """Where tools on this machine reach the server: its unrestricted loopback endpoint."""
        return self._require_state().admin_url

    @property
    def pid(self) -> int:
        return self._require_state().pid

    # ----------------------------------------------------------------- stopping

    def stop(self, grace: float = 30.0) -> None:
        """Stop the server (SIGTERM, SIGKILL after ``grace`` s), its stubs and shm."""
        state = self.state
        if state is None:
            return
        if self._admin is not None:  # an open keep-alive connection holds Triton's exit for its exit timeout
            self._admin.close()
            self._admin = None
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(grace)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        else:
            state.identity.stop(grace)
        kill_stubs(state.shm_prefix)  # left running when the server was killed rather than stopped
        remove_shm_regions(state.shm_prefix)
        current = ServerState.load(self.workspace.state_file)
        if current is not None and current.pid == state.pid:
            self.workspace.state_file.unlink(missing_ok=True)

    def _wait_exit(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                return True
            time.sleep(0.05)
        return self.exit_code() is not None

    def __enter__(self) -> Server:
        if self.state is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
