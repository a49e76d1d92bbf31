"""The server layer's promises, on a real server: where it listens, what is closed, what is kept secret,
and that every process it starts also stops."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tritonhf import AsyncClient, Client
from tritonhf.bootstrap import Server, Workspace
from tritonhf.bootstrap.process import Tls
from tritonhf.bootstrap.state import ServerState, ensure_api_key
from tritonhf.bootstrap.stubs import stubs_of
from tritonhf.bootstrap.supervisor import Counters, supervisor_file
from tritonhf.errors import PermissionDeniedError

pytestmark = pytest.mark.integration
DATA = Path(__file__).parent.parent / "data"


def _auto(workspace: Workspace, **options: object) -> Server:
    return Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", **options)  # type: ignore[arg-type]


def _cmdlines() -> list[bytes]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                found.append(Path(f"/proc/{entry}/cmdline").read_bytes())
    return found


def _listening(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:"):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:
                found.add(fields[1].rsplit(":", 1)[0][-8:])  # IPv4, also when mapped into IPv6
    return found


def test_exposed_grpc_has_no_admin_and_nothing_secret_leaks(workspace: Workspace) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    key = ensure_api_key(workspace)  # the gateway's key: it must never reach a command line
    # 127.0.0.2 is still loopback (nothing leaves this machine) but counts as exposed.
    with _auto(workspace, host="127.0.0.2") as server:
        assert server.state is not None
        assert server.grpc_url.startswith("grpc://127.0.0.2:") and server.http_url.startswith("http://127.0.0.1:")
        assert server.metrics_url.startswith("http://127.0.0.1:")
        assert _listening(server.pid) >= {"0200007F", "0100007F"}  # gRPC on .2, HTTP and metrics on .1
        with Client(server.grpc_url) as remote:
            assert remote.infer("echo", TEXT=["hi"])["OUT"].reshape(-1).tolist() == ["hi"]
            with pytest.raises(PermissionDeniedError, match="restricted"):
                remote.models()
            with pytest.raises(PermissionDeniedError):
                remote.statistics("echo")
        with Client(server.local_url) as local:  # tritonhf's own path: loopback, unrestricted
            assert [m.name for m in local.models()] == ["echo"]
        assert [m.state for m in server.models()] == ["READY"]
        server_cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode()
        sealed = next(arg for arg in server_cmdline.split("\0") if "restricted" in arg).rsplit("=", 1)[1]
        assert all(key.encode() not in line for line in _cmdlines()), "the workspace key is on a command line"
        for path in workspace.run_dir.iterdir():
            assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
            assert sealed not in path.read_text(), f"{path} keeps the per-launch restriction"
        assert sealed not in workspace.server_log.read_text()


def test_exposed_http_keeps_grpc_local(workspace: Workspace) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    with _auto(workspace, host="127.0.0.2", expose="http") as server:
        assert server.http_url.startswith("http://127.0.0.2:") and server.grpc_url.startswith("grpc://127.0.0.1:")
        request = urllib.request.Request(f"{server.http_url}/v2/repository/index", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
        assert server.local_url == server.grpc_url
        assert [m.name for m in server.models()] == ["echo"]


def _self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_grpc_over_tls_with_a_self_signed_certificate(workspace: Workspace, tmp_path: Path) -> None:
    import asyncio

    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    cert, key = _self_signed(tmp_path)
    with _auto(workspace, host="127.0.0.2", tls=Tls(cert, key)) as server:
        assert server.grpc_url.startswith("grpcs://")
        with Client(server.grpc_url, ca_file=str(cert)) as client:
            assert client.infer("echo", TEXT=["secret"])["OUT"].reshape(-1).tolist() == ["secret"]

        async def main() -> list[str]:
            async with AsyncClient(server.grpc_url, ca_file=str(cert)) as client:
                return list((await client.infer("echo", TEXT=["also"]))["OUT"].reshape(-1))

        assert asyncio.run(main()) == ["also"]
        plain = server.grpc_url.replace("grpcs://", "grpc://")
        with Client(plain, timeout=3) as client, pytest.raises(Exception):  # noqa: B017 (any refusal will do)
            client.infer("echo", TEXT=["x"])


def test_ipv6_loopback_serves(workspace: Workspace) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    with _auto(workspace, host="::1") as server:
        assert server.http_url.startswith("http://[::1]:") and server.grpc_url.startswith("grpc://[::1]:")
        for url in (server.http_url, server.grpc_url):
            with Client(url) as client:
                assert client.infer("echo", TEXT=["v6"])["OUT"].reshape(-1).tolist() == ["v6"]


def test_loopback_traffic_ignores_proxies(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    for name in ("http_proxy", "https_proxy", "grpc_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    with _auto(workspace) as server:
        for url in (server.http_url, server.grpc_url):
            with Client(url, timeout=10) as client:
                assert client.infer("echo", TEXT=["direct"])["OUT"].reshape(-1).tolist() == ["direct"]


def test_a_server_started_from_a_short_lived_thread_keeps_running(workspace: Workspace) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    server = _auto(workspace)
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
    try:
        time.sleep(1.0)
        assert server.is_running() and server.is_ready(), "the server died with the thread that started it"
    finally:
        server.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tritonhf", *args], capture_output=True, text=True, timeout=180)


def test_down_after_the_server_was_killed_stops_everything(workspace: Workspace) -> None:
    shutil.copytree(DATA / "echo", workspace.model_repository / "echo")
    ws = str(workspace.root)
    up = _cli("up", "-w", ws, "--http-port", "auto", "--grpc-port", "auto", "--metrics-port", "auto")
    assert up.returncode == 0, up.stderr
    state = ServerState.load(workspace.state_file)
    counters = Counters.load(supervisor_file(workspace))
    assert state is not None and counters is not None
    os.kill(state.pid, signal.SIGKILL)  # the supervisor starts restarting it ...
    time.sleep(0.5)
    down = _cli("down", "-w", ws)  # ... and down must still stop everything
    assert down.returncode == 0, down.stderr
    time.sleep(1.0)
    assert not counters.identity.alive(), "the supervisor still runs"
    latest = ServerState.load(workspace.state_file)
    assert latest is None, "state left behind"
    for line in _cmdlines():
        assert str(workspace.root).encode() not in line or b"pytest" in line, f"left running: {line[:200]!r}"
    assert [s for s in stubs_of(state.shm_prefix) if s.alive] == []


def test_a_stale_pid_that_is_another_process_now_is_not_signalled(workspace: Workspace) -> None:
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        stale = ServerState(
            pid=bystander.pid, started=1, binary=str(workspace.binary), host="127.0.0.1", http_address="127.0.0.1",
            grpc_address="127.0.0.1", metrics_address="127.0.0.1", http_port=1, grpc_port=2, metrics_port=3,
            admin_protocol="http", tls=False, shm_prefix="triton_python_backend_shm_region_thfstale_", log="",
            repository="", model_control="explicit", started_at=0.0,
        )  # fmt: skip
        stale.save(workspace.state_file)
        Counters(pid=bystander.pid, started=1, executable="/bin/sleep").save(supervisor_file(workspace))
        down = _cli("down", "-w", str(workspace.root))
        assert down.returncode == 1 and "No tritonhf server is running" in down.stderr
        assert bystander.poll() is None, "a process that merely reused the pid was signalled"
        assert not workspace.state_file.exists() and not supervisor_file(workspace).exists()
    finally:
        bystander.kill()
        bystander.wait()
