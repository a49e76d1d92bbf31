"""Leaving one machine, rehearsed here with real parts: an S3 API (moto's server), two Triton replicas
reading the repository from it, haproxy in front of both (HTTP and gRPC/h2), a soak through haproxy
while one replica is SIGKILLed and restarted; a fresh venv with only `gallery requirements` serving a
repository; the pod probe against a live server. Everything listens on loopback only."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tritonhf import Client, ClientError
from tritonhf.bootstrap import Server, Stack, Workspace
from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.ports import free_port
from tritonhf.bootstrap.stubs import stubs_of
from tritonhf.deploy import probe
from tritonhf.deploy.requirements import serving_requirements
from tritonhf.deploy.storage import check, client, pull, push
from tritonhf.errors import StorageError
from tritonhf.gallery import AddRequest, ModelOptions, add_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TEXTS = [f"the movie number {i} was {word}" for i, word in enumerate(["great", "awful", "good", "bad"] * 2)]


def _wait_port(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A real S3 API on loopback (moto's server), a bucket, and credentials in the environment."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=(tmp_path / "moto.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        _wait_port(port)
        url = f"s3://http://127.0.0.1:{port}/models/repo"
        from tritonhf.deploy.storage import S3Location

        client(S3Location.parse(url)).create_bucket(Bucket="models")
        yield url
    finally:
        server.terminate()
        server.wait(10)


def _haproxy(tmp_path: Path, replicas: list[Server]) -> tuple[subprocess.Popen[bytes], int, int]:
    """haproxy on loopback: HTTP/1.1 and gRPC (h2) frontends, each replica checked on /v2/health/ready."""
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (`make packages` installs Debian's package as root)")
    http_port, grpc_port = free_port(), free_port()
    servers_http = "\n".join(
        f"    server r{i} 127.0.0.1:{r.state.http_port} check inter 500 fall 1 rise 2"  # type: ignore[union-attr]
        for i, r in enumerate(replicas)
    )
    servers_grpc = "\n".join(
        f"    server r{i} 127.0.0.1:{r.state.grpc_port} proto h2 check port {r.state.http_port} "  # type: ignore[union-attr]
        "check-proto h1 inter 500 fall 1 rise 2"
        for i, r in enumerate(replicas)
    )
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        f"""global
    log stdout format raw local0
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch
    option httpchk GET /v2/health/ready
frontend http_in
    bind 127.0.0.1:{http_port}
    default_backend triton_http
frontend grpc_in
    bind 127.0.0.1:{grpc_port} proto h2
    default_backend triton_grpc
backend triton_http
{servers_http}
backend triton_grpc
{servers_grpc}
"""
    )
    process = subprocess.Popen(
        ["haproxy", "-f", str(config), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    _wait_port(http_port)
    _wait_port(grpc_port)
    return process, http_port, grpc_port


def _repository(root: Path, tiny: dict[str, Path], *models: str) -> Path:
    repo = root / "local-repo"
    sources = {"clf": ("text-classification", "classifier"), "emb": ("feature-extraction", "encoder")}
    for name in models:
        task, source = sources[name]
        add_model(AddRequest(task, str(tiny[source]), repo, name=name, options=ModelOptions(max_batch_size=8)))
    return repo


def test_two_replicas_from_s3_behind_haproxy_survive_a_kill(
    s3: str, tmp_path: Path, tiny: dict[str, Path], make_workspace: Callable[[str], Workspace]
) -> None:
    repo = _repository(tmp_path, tiny, "clf")
    assert push(repo, s3) == ["clf"] and check(s3) == ["clf"]
    replicas = [
        Server(make_workspace(f"replica{i}"), repository=s3, http_port="auto", grpc_port="auto",
               metrics_port="auto", startup_timeout=120)
        for i in range(2)
    ]  # fmt: skip
    for replica in replicas:
        replica.start()
    proxy, http_port, grpc_port = _haproxy(tmp_path, replicas)
    try:
        with Client(replicas[0].http_url) as direct:
            expected = {
                text: (c.label, round(c.score, 4)) for text, c in zip(TEXTS, direct.classify(TEXTS, model="clf"))
            }
        clients = [
            Client(f"http://127.0.0.1:{http_port}", timeout=30),
            Client(f"grpc://127.0.0.1:{grpc_port}", timeout=30),
        ]
        tally = {"sent": 0, "correct": 0, "typed errors": 0, "lost": 0, "mismatched": 0}
        lock = threading.Lock()
        total = 1200

        def one(index: int) -> None:
            text = TEXTS[index % len(TEXTS)]
            try:
                got = clients[index % 2].classify(text, model="clf")
                outcome = "correct" if (got.label, round(got.score, 4)) == expected[text] else "mismatched"
            except ClientError:
                outcome = "typed errors"
            except Exception:
                outcome = "lost"
            with lock:
                tally["sent"] += 1
                tally[outcome] += 1

        victim = replicas[1]
        old_pid = victim.pid

        def chaos() -> None:
            while tally["sent"] < total // 4:
                time.sleep(0.01)
            os.kill(old_pid, signal.SIGKILL)  # one replica dies under load ...
            while tally["sent"] < total * 3 // 5:
                time.sleep(0.01)
            victim.relaunch()  # ... and comes back, same ports, same S3 repository

        started = time.monotonic()
        killer = threading.Thread(target=chaos)
        killer.start()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(total)))
        killer.join(120)
        seconds = time.monotonic() - started
        print(
            f"\n| two replicas from S3 behind haproxy, one SIGKILLed and restarted, concurrency 16 | {tally['sent']} "
            f"| {tally['correct']} | {tally['typed errors']} | {tally['lost']} | {tally['mismatched']} "
            f"| {tally['sent'] / seconds:.0f} req/s |"
        )
        assert tally["sent"] == total and tally["lost"] == 0 and tally["mismatched"] == 0, tally
        assert tally["correct"] >= total * 0.95, tally
        assert victim.pid != old_pid and victim.is_ready()
        assert not [s for s in stubs_of(victim.state.shm_prefix) if s.alive and s.server_pid == old_pid]  # type: ignore[union-attr]

        # A model pushed later is loaded on both replicas through their repository API.
        repo = _repository(tmp_path, tiny, "emb")
        push(repo, s3)
        cli = [sys.executable, "-m", "tritonhf", "load", "emb"]
        for replica in replicas:
            cli += ["--url", replica.local_url]
        loaded = subprocess.run(cli, capture_output=True, text=True, timeout=300)
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
        for replica in replicas:
            with Client(replica.http_url) as direct:
                assert direct.embed("the cat", model="emb").shape == (1, 32)
        for client_ in clients:
            assert client_.embed("the cat", model="emb").shape == (1, 32)
            client_.close()
    finally:
        proxy.terminate()
        proxy.wait(10)
        for replica in replicas:
            replica.stop()


def test_pull_and_clear_errors_for_bad_locations(
    s3: str, tmp_path: Path, tiny: dict[str, Path], make_workspace: Callable[[str], Workspace]
) -> None:
    repo = _repository(tmp_path, tiny, "clf")
    push(repo, s3)
    assert pull(s3, tmp_path / "pulled") == ["clf"]
    assert (tmp_path / "pulled" / "clf" / "1" / "tritonhf_runtime" / "batching.py").read_text() == (
        repo / "clf" / "1" / "tritonhf_runtime" / "batching.py"
    ).read_text()
    endpoint = s3.rsplit("/models/", 1)[0]
    for url, cause in (
        (f"{endpoint}/nobucket/repo", "does not exist"),
        (f"{endpoint}/models/empty", "holds no model"),
        ("s3://http://127.0.0.1:1/models/repo", "Nothing answers"),
        ("s3://127.0.0.1:9000/models/repo", "not an S3 repository URL"),
    ):
        with pytest.raises(StorageError, match=cause):
            Stack(Server(make_workspace("bad-s3"), repository=url, http_port="auto", grpc_port="auto",
                         metrics_port="auto")).start()  # fmt: skip


def test_the_pod_probe_passes_on_a_healthy_server_and_fails_on_a_dead_stub(
    tmp_path: Path, tiny: dict[str, Path], make_workspace: Callable[[str], Workspace]
) -> None:
    workspace = make_workspace("probed")
    add_model(AddRequest("text-classification", str(tiny["classifier"]), workspace.model_repository, name="clf"))
    add_model(
        AddRequest(
            "text-generation", str(tiny["generator"]), workspace.model_repository, name="gen", engine="transformers"
        )
    )
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto") as server:
        assert probe.main(["probe", server.http_url]) == 0, "every model answers one row"
        assert server.is_ready()
        (stub,) = [s for s in stubs_of(server.state.shm_prefix) if s.instance.startswith("clf_")]  # type: ignore[union-attr]
        os.kill(stub.pid, signal.SIGKILL)
        time.sleep(0.5)
        assert server.is_ready(), "Triton's own readiness does not notice"
        assert probe.main(["probe", server.http_url]) == 1, "the probe does"


def test_a_fresh_venv_with_only_the_serving_requirements_serves_the_repository(
    tmp_path: Path, tiny: dict[str, Path], installed_server: Workspace, make_workspace: Callable[[str], Workspace]
) -> None:
    """The repository carries its code: a Python with only the pinned requirements (no tritonhf) serves it."""
    workspace = make_workspace("self-contained")
    repo = workspace.model_repository
    add_model(AddRequest("text-classification", str(tiny["classifier"]), repo, name="clf"))
    add_model(AddRequest("text-generation", str(tiny["generator"]), repo, name="gen", engine="transformers"))
    requirements = serving_requirements(repo, StubEnvironment.for_workspace(installed_server))
    venv = tmp_path / "serving"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    subprocess.run([*pip, *requirements], check=True, capture_output=True, timeout=900)
    freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True)
    assert "tritonhf" not in freeze.stdout.lower()
    environment = StubEnvironment.of(venv / "bin" / "python")
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", environment=environment) as server:
        with Client(server.grpc_url) as client_:
            assert client_.classify("a great film", model="clf").label in ("negative", "neutral", "positive")
            assert isinstance(client_.generate("the movie", model="gen", max_tokens=4), str)
        stub = stubs_of(server.state.shm_prefix)[0]  # type: ignore[union-attr]
        environ = Path(f"/proc/{stub.pid}/environ").read_bytes()
        assert str(venv / "bin").encode() in environ, "the stubs run in the fresh venv"
        with urllib.request.urlopen(f"{server.http_url}/v2/health/ready") as response:
            assert response.status == 200
