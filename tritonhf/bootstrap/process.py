"""Start, watch and stop one ``tritonserver`` process of a workspace.

``Server`` is both the Python API (``with Server(workspace) as server: server.http_url``)
and what ``tritonhf up``/``down``/``status`` call. A started server records its pid and
endpoints in ``run/server.json`` so that a later command (another process) can find it.
Logs always go to ``logs/server.log``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tritonhf._files import load_dataclass, save_dataclass
from tritonhf.bootstrap.diagnose import Diagnosis, diagnose
from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.ports import ensure_free, free_port, parse_port
from tritonhf.bootstrap.stubs import kill_orphaned_stubs
from tritonhf.errors import (
    BootstrapError,
    ServerAlreadyRunningError,
    ServerNotRunningError,
    ServerStartError,
    StubEnvironmentError,
)

SHM_DIR = Path("/dev/shm")
SHM_BASE_PREFIX = "triton_python_backend_shm_region_"
MODEL_CONTROL_MODES = ("none", "explicit", "poll")
LOOPBACK = "127.0.0.1"
API_KEY_HEADER = "tritonhf-key"
# After a model is reported failed, wait this long for the server to exit by itself
# (it does with --exit-on-error) before stopping it ourselves.
_FAILURE_GRACE_S = 10.0


@dataclass(frozen=True)
class ModelStatus:
    """One model as the server's repository index reports it."""

    name: str
    version: str
    state: str
    reason: str = ""


@dataclass
class ServerState:
    """What a running server needs to be found again: written to ``run/server.json``."""

    pid: int
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    shm_prefix: str
    log: str
    repository: str
    model_control: str
    started_at: float
    command: list[str] = field(default_factory=list)

    @property
    def client_host(self) -> str:
        # A server bound to every interface is still reached on loopback from here.
        return LOOPBACK if self.host in ("0.0.0.0", "::", "") else self.host

    @property
    def http_url(self) -> str:
        return f"http://{self.client_host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://{self.client_host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.client_host}:{self.metrics_port}/metrics"

    def save(self, path: Path) -> None:
        save_dataclass(self, path)

    @classmethod
    def load(cls, path: Path) -> ServerState | None:
        return load_dataclass(cls, path)


def _pid_is_server(pid: int, binary: Path | None = None) -> bool:
    """True when ``pid`` is alive and is a tritonserver (of ``binary`` when given)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie has exited already
        return False
    executable = cmdline[0].decode(errors="replace") if cmdline else ""
    if binary is not None:
        return executable == str(binary)
    return executable.endswith("tritonserver")


def _set_parent_death_signal() -> None:
    """Runs in the child before exec: the server dies with the Python process that started it."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def shm_regions(prefix: str) -> list[Path]:
    """Shared-memory regions whose names start with ``prefix`` (one server's, when unique)."""
    if not SHM_DIR.is_dir():
        return []
    return sorted(path for path in SHM_DIR.iterdir() if path.name.startswith(prefix))


def remove_shm_regions(prefix: str) -> int:
    removed = 0
    for region in shm_regions(prefix):
        with contextlib.suppress(OSError):
            region.unlink()
            removed += 1
    return removed


def ensure_api_key(workspace: Workspace) -> str:
    """The workspace's key for the model-repository API, created (mode 0600) if missing."""
    path = workspace.api_key_file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def _http(
    url: str, body: bytes | None = None, timeout: float = 2.0, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """(status, body) of a GET, or of a JSON POST when ``body`` is given; status 0 when nothing answers."""
    request = urllib.request.Request(url, data=body, method="GET" if body is None else "POST", headers=headers or {})
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def _http_get(url: str, timeout: float = 2.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    return _http(url, None, timeout, headers)


def _http_post(
    url: str, body: bytes = b"{}", timeout: float = 5.0, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    return _http(url, body, timeout, headers)


class Server:
    """A ``tritonserver`` for one workspace, started in the background.

    Every service binds to 127.0.0.1 unless ``host`` says otherwise. Ports are numbers or
    ``"auto"`` (a free port). ``die_with_parent`` (the default for the Python API) makes
    the server exit when this Python process does; ``tritonhf up`` turns it off.

    Models load in ``explicit`` model-control mode by default (all of them at start), which
    lets the supervisor (``supervise=True``) unload and load a model whose stub died.
    Bound beyond loopback, the model-repository API (index, load, unload) requires the key
    in ``run/api-key`` (file mode 0600), sent as the ``tritonhf-key`` header.
    """

    def __init__(
        self,
        workspace: Workspace | Path | str | None = None,
        *,
        host: str = LOOPBACK,
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
        supervise: bool = True,
    ) -> None:
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace.at(workspace)
        if model_control not in MODEL_CONTROL_MODES:
            raise ValueError(f"model_control must be one of {', '.join(MODEL_CONTROL_MODES)}, not {model_control!r}.")
        self.host = host
        self._ports = {
            "http": parse_port(http_port, "http"),
            "grpc": parse_port(grpc_port, "grpc"),
            "metrics": parse_port(metrics_port, "metrics"),
        }
        self.model_control = model_control
        self.log_verbose = log_verbose
        self.repository = Path(repository).absolute() if repository else self.workspace.model_repository
        self.startup_timeout = startup_timeout
        self.exit_timeout = exit_timeout
        self.die_with_parent = die_with_parent
        self.environment = environment
        self.supervise = supervise
        self.state: ServerState | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._configs: dict[str, dict[str, Any]] = {}
        self._supervisor_thread: threading.Thread | None = None
        self._supervisor: Any = None

    # ----------------------------------------------------------------- finding a server

    @classmethod
    def attach(cls, workspace: Workspace | Path | str | None = None) -> Server:
        """The server of ``workspace`` that an earlier command started."""
        server = cls(workspace)
        state = ServerState.load(server.workspace.state_file)
        if state is None or not _pid_is_server(state.pid, server.workspace.binary):
            raise ServerNotRunningError(
                f"No tritonhf server is running for workspace {server.workspace.root}. Start one with `tritonhf up`."
            )
        server.state = state
        return server

    @classmethod
    def from_state(cls, workspace: Workspace | Path | str | None = None) -> Server:
        """The server of ``workspace`` as its state file records it, alive or not (for the supervisor)."""
        server = cls(workspace)
        state = ServerState.load(server.workspace.state_file)
        if state is None:
            raise ServerNotRunningError(f"No server state in {server.workspace.state_file}; nothing to supervise.")
        server.state = state
        return server

    def _refuse_if_running(self) -> None:
        state = ServerState.load(self.workspace.state_file)
        if state is None:
            return
        if _pid_is_server(state.pid, self.workspace.binary):
            raise ServerAlreadyRunningError(
                f"A server for workspace {self.workspace.root} is already running (pid {state.pid}, "
                f"{state.http_url}). Use it, or stop it first with `tritonhf down`."
            )
        # The state of a server that died without `down`: clean up what it left behind.
        kill_orphaned_stubs(state.pid)
        remove_shm_regions(state.shm_prefix)
        self.workspace.state_file.unlink(missing_ok=True)

    # ----------------------------------------------------------------- starting

    def command(self, ports: dict[str, int], shm_prefix: str) -> list[str]:
        workspace = self.workspace
        command = [
            str(workspace.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={workspace.backends_dir}",
            f"--cache-directory={workspace.server_dir / 'caches'}",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--metrics-address={self.host}",
            f"--http-port={ports['http']}",
            f"--grpc-port={ports['grpc']}",
            f"--metrics-port={ports['metrics']}",
            f"--model-control-mode={self.model_control}",
            f"--log-verbose={self.log_verbose}",
            f"--exit-timeout-secs={self.exit_timeout}",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        ]
        key = self.api_key()
        if key:
            command.append(f"--http-restricted-api=model-repository:{API_KEY_HEADER}={key}")
            command.append(f"--grpc-restricted-protocol=model-repository:{API_KEY_HEADER}={key}")
        if self.model_control == "explicit":
            command.append("--load-model=*")
        if self.model_control == "poll":
            command.append("--repository-poll-secs=5")
        return command

    def _resolve_ports(self) -> dict[str, int]:
        ports: dict[str, int] = {}
        bind = LOOPBACK if self.host in ("0.0.0.0", "::") else self.host
        for service, port in self._ports.items():
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
        self._refuse_if_running()
        environment = self.environment or StubEnvironment.current()
        problems = environment.problems()
        if problems:
            raise StubEnvironmentError("The Python backend cannot run here:\n- " + "\n- ".join(problems))
        workspace.create_folders()
        self.repository.mkdir(parents=True, exist_ok=True)
        if self.host not in (LOOPBACK, "localhost", "::1"):
            ensure_api_key(workspace)
        else:
            workspace.api_key_file.unlink(missing_ok=True)
        ports = self._resolve_ports()
        shm_prefix = f"{SHM_BASE_PREFIX}thf{uuid.uuid4().hex[:10]}_"
        command = self.command(ports, shm_prefix)
        log_path = workspace.server_log
        if log_path.exists():
            log_path.replace(log_path.with_suffix(".log.prev"))
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment.server_env(workspace.lib_dir),
                cwd=workspace.root,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal if self.die_with_parent else None,
            )
        self.state = ServerState(
            pid=self._process.pid,
            host=self.host,
            http_port=ports["http"],
            grpc_port=ports["grpc"],
            metrics_port=ports["metrics"],
            shm_prefix=shm_prefix,
            log=str(log_path),
            repository=str(self.repository),
            model_control=self.model_control,
            started_at=time.time(),
            command=command,
        )
        self.state.save(workspace.state_file)
        try:
            self._wait_ready(on_progress)
        except BaseException:
            self.stop()
            raise
        if self.supervise:
            self._start_supervisor()
        return self.state

    def _wait_ready(self, on_progress: Callable[[list[ModelStatus]], None] | None) -> None:
        state = self._require_state()
        deadline = time.monotonic() + self.startup_timeout
        failure_seen_at: float | None = None
        while True:
            exit_code = self._exit_code()
            if exit_code is not None:
                raise self._start_failure(f"tritonserver exited with code {exit_code} while starting")
            status, _ = _http_get(f"{state.http_url}/v2/health/ready", timeout=1.0)
            if status == 200:
                return
            if on_progress is not None and status:
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
        remove_shm_regions(state.shm_prefix)  # what the dead server left behind
        with self.workspace.server_log.open("ab") as log:
            self._process = subprocess.Popen(
                state.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=(self.environment or StubEnvironment.current()).server_env(self.workspace.lib_dir),
                cwd=self.workspace.root,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal if self.die_with_parent else None,
            )
        state.pid = self._process.pid
        state.started_at = time.time()
        state.save(self.workspace.state_file)
        self._configs.clear()
        self._wait_ready(None)
        return state

    # ----------------------------------------------------------------- supervision

    def _start_supervisor(self) -> None:
        if not self.die_with_parent:
            # `tritonhf up`: this process exits, so the supervisor is a detached process of its own.
            log = (self.workspace.logs_dir / "supervisor.log").open("ab")
            subprocess.Popen(
                [sys.executable, "-m", "tritonhf.bootstrap.supervisor", str(self.workspace.root)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            return
        from tritonhf.bootstrap.supervisor import Supervisor

        self._supervisor = Supervisor(self)
        self._supervisor_thread = threading.Thread(target=self._supervisor.run, name="tritonhf-supervisor", daemon=True)
        self._supervisor_thread.start()

    def _stop_supervisor(self) -> None:
        from tritonhf.bootstrap.supervisor import Counters, supervisor_file

        if self._supervisor is not None:
            self._supervisor.stopped.set()
            if self._supervisor_thread is not None and self._supervisor_thread is not threading.current_thread():
                self._supervisor_thread.join(timeout=10)
            self._supervisor = None
        counters = Counters.load(supervisor_file(self.workspace))
        if counters is not None and counters.pid not in (0, os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(counters.pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and Path(f"/proc/{counters.pid}").exists():
                time.sleep(0.05)
        supervisor_file(self.workspace).unlink(missing_ok=True)

    # ----------------------------------------------------------------- observing

    def api_key(self) -> str | None:
        try:
            return self.workspace.api_key_file.read_text().strip() or None
        except OSError:
            return None

    def _headers(self) -> dict[str, str]:
        key = self.api_key()
        return {API_KEY_HEADER: key} if key else {}

    def model_config(self, name: str) -> dict[str, Any]:
        if name not in self._configs:
            status, body = _http_get(f"{self._require_state().http_url}/v2/models/{name}/config", timeout=5)
            if status != 200:
                return {}
            self._configs[name] = dict(json.loads(body))
        return self._configs[name]

    def instance_count(self, name: str) -> int:
        """How many stub processes the model's config asks for (its instance groups)."""
        groups = self.model_config(name).get("instance_group", [{"count": 1}])
        return sum(int(group.get("count", 1)) for group in groups)

    def reload_model(self, name: str, timeout: float = 120.0) -> bool:
        """Unload then load ``name`` (explicit model control); True once it is ready again."""
        base = f"{self._require_state().http_url}/v2/repository/models/{name}"
        _http_post(f"{base}/unload", headers=self._headers(), timeout=timeout)
        status, _ = _http_post(f"{base}/load", headers=self._headers(), timeout=timeout)
        self._configs.pop(name, None)
        return status == 200 and _http_get(f"{self.http_url}/v2/models/{name}/ready")[0] == 200

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

    def _exit_code(self) -> int | None:
        if self._process is not None:
            return self._process.poll()
        state = self._require_state()
        return None if _pid_is_server(state.pid) else -1

    def is_running(self) -> bool:
        return self.state is not None and self._exit_code() is None

    def is_ready(self) -> bool:
        state = self._require_state()
        return _http_get(f"{state.http_url}/v2/health/ready")[0] == 200

    def metadata(self) -> dict[str, Any]:
        status, body = _http_get(f"{self._require_state().http_url}/v2")
        return dict(json.loads(body)) if status == 200 else {}

    def models(self) -> list[ModelStatus]:
        """Every model in the repository with its state (READY, LOADING, UNAVAILABLE ...)."""
        status, body = _http_post(f"{self._require_state().http_url}/v2/repository/index", headers=self._headers())
        if status != 200:
            return []
        return [
            ModelStatus(
                name=str(entry.get("name", "")),
                version=str(entry.get("version", "")),
                state=str(entry.get("state", "UNKNOWN")),
                reason=str(entry.get("reason", "")),
            )
            for entry in json.loads(body)
        ]

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
    def pid(self) -> int:
        return self._require_state().pid

    # ----------------------------------------------------------------- stopping

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; then remove its shm regions."""
        state = self.state
        if state is None:
            return
        self._stop_supervisor()
        if self._exit_code() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(state.pid, signal.SIGTERM)
            if not self._wait_exit(grace):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(state.pid, signal.SIGKILL)
                self._wait_exit(10.0)
        kill_orphaned_stubs(state.pid)  # left running when the server was killed rather than stopped
        remove_shm_regions(state.shm_prefix)
        current = ServerState.load(self.workspace.state_file)
        if current is not None and current.pid == state.pid:
            self.workspace.state_file.unlink(missing_ok=True)

    def _wait_exit(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._exit_code() is not None:
                return True
            time.sleep(0.05)
        return self._exit_code() is not None

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
