"""A real tritonserver: installed once, started on free loopback ports, stopped without leftovers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tritonhf.bootstrap import Server, Workspace, bootstrap, process
from tritonhf.bootstrap.shm import shm_regions
from tritonhf.bootstrap.stubs import stubs_of
from tritonhf.errors import ServerStartError

pytestmark = pytest.mark.integration
DATA = Path(__file__).parent.parent / "data"


def _auto(workspace: Workspace, **options: object) -> Server:
    return Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", **options)  # type: ignore[arg-type]


def _listening_addresses(pid: int) -> set[str]:
    """host:port of every listening TCP socket of ``pid``, read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # a descriptor may close while we look
            target = os.readlink(fd)
            if target.startswith("socket:"):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:
                address, port = fields[1].rsplit(":", 1)
                found.add(f"{address}:{int(port, 16)}")
    return found


def test_second_bootstrap_reuses_the_install(installed_server: Workspace) -> None:
    started = time.monotonic()
    result = bootstrap(installed_server)
    assert result.reused
    assert time.monotonic() - started < 5
    assert result.manifest.triton_version == "2.51.0"


def test_server_serves_a_python_model_on_loopback_and_leaves_nothing(workspace: Workspace) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    with _auto(workspace) as server:
        pid = server.pid
        with urllib.request.urlopen(f"{server.http_url}/v2/health/ready") as response:
            assert response.status == 200
        body = json.dumps({"inputs": [{"name": "TEXT", "shape": [2, 1], "datatype": "BYTES", "data": ["a", "b"]}]})
        request = urllib.request.Request(f"{server.http_url}/v2/models/echo/infer", data=body.encode())
        with urllib.request.urlopen(request) as response:
            outputs = json.loads(response.read())["outputs"]
        assert outputs[0]["data"] == ["a", "b"]
        addresses = _listening_addresses(pid)
        assert len(addresses) == 3
        # 0100007F is 127.0.0.1 in /proc/net/tcp; the gRPC socket is IPv4-mapped IPv6.
        assert all(a.startswith(("0100007F:", "0000000000000000FFFF00000100007F:")) for a in addresses), addresses
        prefix = server.state.shm_prefix if server.state else ""
        assert shm_regions(prefix), "the model's stub should have a shared-memory region"
        assert [m.state for m in server.models()] == ["READY"]
        # its config is complete: no second stub per model at load for Triton's auto-complete
        assert b"--disable-auto-complete-config" in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert not Path(f"/proc/{pid}").exists()
    assert shm_regions(prefix) == []
    assert not workspace.state_file.exists()


def test_a_model_that_completes_its_own_config_is_loaded_with_auto_complete(workspace: Workspace) -> None:
    """Where a model needs Triton's auto-complete (here model.py declares the output its config lacks),
    the server keeps it on, and the model serves."""
    target = workspace.model_repository / "echo"
    shutil.copytree(DATA / "echo", target)
    config = target / "config.pbtxt"
    config.write_text("\n".join(line for line in config.read_text().splitlines() if not line.startswith("output")))
    model = target / "1" / "model.py"
    model.write_text(
        model.read_text()
        + """
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_output({"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]})
        return auto_complete_model_config
"""
    )
    with _auto(workspace) as server:
        assert b"--disable-auto-complete-config" not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["a"]}]})
        request = urllib.request.Request(f"{server.http_url}/v2/models/echo/infer", data=body.encode())
        with urllib.request.urlopen(request) as response:
            assert json.loads(response.read())["outputs"][0]["data"] == ["a"]


def test_an_auto_port_taken_before_the_server_binds_it_is_chosen_again(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free port is chosen before tritonserver starts, and bound once its models are loaded; another
    process (a second notebook, a parallel test) may take it meanwhile. The start is made again on fresh
    ports, not failed."""
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real = process.free_port
    handed: list[int] = []

    def free_port(host: str = "127.0.0.1") -> int:
        handed.append(taken.getsockname()[1] if not handed else real(host))  # the first choice is lost
        return handed[-1]

    monkeypatch.setattr(process, "free_port", free_port)
    with taken, _auto(workspace) as server:
        assert server.state is not None and server.state.http_port != taken.getsockname()[1]
        assert [m.state for m in server.models()] == ["READY"]
        earlier = workspace.server_log.with_suffix(".log.prev").read_text()
        assert f":{taken.getsockname()[1]}' already in use" in earlier, "the first start met the taken port"


def _broken(workspace: Workspace, name: str, config: str | None = None, model_prelude: str = "") -> None:
    target = workspace.model_repository / name
    shutil.copytree(DATA / "echo", target)
    if config is not None:
        (target / "config.pbtxt").write_text(config)
    model = target / "1" / "model.py"
    model.write_text(model_prelude + model.read_text())


def test_config_typo_fails_fast_with_a_diagnosis(workspace: Workspace) -> None:
    config = (DATA / "echo" / "config.pbtxt").read_text().replace("max_batch_size", "max_batch_sise")
    _broken(workspace, "typo", config=config)
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        _auto(workspace).start()
    assert time.monotonic() - started < 60
    assert "typo" in str(info.value)
    assert "max_batch_sise" in str(info.value)
    assert str(workspace.server_log) in str(info.value)


def test_missing_module_fails_fast_naming_model_and_module(workspace: Workspace) -> None:
    _broken(workspace, "needs_module", model_prelude="import definitely_not_installed_xyz  # noqa\n")
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        _auto(workspace).start()
    assert time.monotonic() - started < 60
    assert "needs_module" in str(info.value)
    assert "definitely_not_installed_xyz" in str(info.value)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonhf", *args], capture_output=True, text=True, timeout=120, env=os.environ
    )


def test_cli_up_status_down(workspace: Workspace) -> None:
    ws = str(workspace.root)
    ports = ["--http-port", "auto", "--grpc-port", "auto", "--metrics-port", "auto"]
    up = _cli("up", "-w", ws, *ports)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "127.0.0.1" in up.stdout
        again = _cli("up", "-w", ws, *ports)
        assert again.returncode == 1
        assert "already running" in again.stderr
        assert "Traceback" not in again.stderr
        status = _cli("status", "-w", ws)
        assert status.returncode == 0 and "running" in status.stdout
    finally:
        down = _cli("down", "-w", ws)
    assert down.returncode == 0, down.stderr
    again = _cli("down", "-w", ws)
    assert again.returncode == 1
    assert "No tritonhf server is running" in again.stderr
    assert "Traceback" not in again.stderr


def test_stale_state_from_a_killed_server_is_cleaned_on_next_up(workspace: Workspace) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    first = _auto(workspace)  # a crashed earlier run, without a supervisor: nobody restarts it
    first.start()
    prefix = first.state.shm_prefix if first.state else ""
    # A stub leaves by itself once it notices its server is gone, sooner or later with the machine's load: one that
    # is stopped first stays, as a stub stuck in a model's code would, for the next start to find.
    stale = stubs_of(prefix)
    assert stale, "the server runs the model's stub"
    for stub in stale:
        os.kill(stub.pid, signal.SIGSTOP)
    os.kill(first.pid, 9)
    first._wait_exit(10)
    assert shm_regions(prefix), "a killed server leaves its region behind"
    assert [s for s in stubs_of(prefix) if s.alive], "a SIGKILLed server leaves its stub running"
    with _auto(workspace) as second:
        assert second.is_ready()
    assert shm_regions(prefix) == []
    assert [s for s in stubs_of(prefix) if s.alive] == [], "the next start kills the stubs a dead server left"


def test_doctor_reports_every_check(installed_server: Workspace) -> None:
    result = _cli("doctor", "-w", str(installed_server.root))
    for name in (
        "CPU architecture",
        "your environment",
        "glibc",
        "server installed",
        "Python stub",
        "libpython",
        "numpy < 2",
        "transformers",
        "/dev/shm",
        "GPU",
    ):
        assert name in result.stdout, name
    assert "Traceback" not in result.stderr


def test_up_supervisor_restarts_a_killed_server_and_down_stops_both(workspace: Workspace) -> None:
    from tritonhf.bootstrap.state import ServerState
    from tritonhf.bootstrap.supervisor import Counters, supervisor_file

    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    ws = str(workspace.root)
    up = _cli("up", "-w", ws, "--http-port", "auto", "--grpc-port", "auto", "--metrics-port", "auto")
    assert up.returncode == 0, up.stderr
    try:
        first = ServerState.load(workspace.state_file)
        assert first is not None
        os.kill(first.pid, 9)
        deadline = time.monotonic() + 60
        state = first
        while time.monotonic() < deadline:
            state = ServerState.load(workspace.state_file) or first
            if state.pid != first.pid and _cli("status", "-w", ws).returncode == 0:
                break
            time.sleep(0.5)
        assert state.pid != first.pid, "the detached supervisor restarts the server"
        counters = Counters.load(supervisor_file(workspace))
        assert counters is not None and counters.server_restarts == 1
        supervisor_pid = counters.pid
    finally:
        down = _cli("down", "-w", ws)
    assert down.returncode == 0, down.stderr
    assert not Path(f"/proc/{state.pid}").exists() or "zombie" in Path(f"/proc/{state.pid}/status").read_text()
    assert (
        not Path(f"/proc/{supervisor_pid}").exists() or "zombie" in Path(f"/proc/{supervisor_pid}/status").read_text()
    )
    assert "successfully unloaded 'echo'" in workspace.server_log.read_text(), "down stops it gracefully"
