"""The stub environment's problems and wiring."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.ports import ensure_free, parse_port
from tritonhf.errors import PortInUseError


@pytest.mark.integration  # bootstraps a real server (the stub environment): not in make test-fast
def test_the_stub_environment_bootstrap_prepared_is_fit(installed_server: Workspace) -> None:
    stub = StubEnvironment.for_workspace(installed_server)
    assert stub.prefix == installed_server.stub_env_dir, "bootstrap made one"
    assert stub.problems() == []
    assert (stub.numpy_major() or 0) < 2, "numpy of its own"
    assert stub.torch == StubEnvironment.current().torch, "torch shared"


def test_probing_another_python_reads_the_same_facts() -> None:
    current = StubEnvironment.current()
    probed = StubEnvironment.of(current.python)
    assert probed.numpy == current.numpy
    assert probed.libdir == current.libdir


def test_numpy_2_is_named_with_its_fix() -> None:
    environment = replace(StubEnvironment.current(), numpy="2.1.0")
    (problem,) = environment.problems()
    assert "numpy 2.1.0" in problem
    assert "tritonhf bootstrap" in problem and "stub_env" in problem


def test_missing_transformers_is_named() -> None:
    environment = replace(StubEnvironment.current(), transformers=None)
    assert any("transformers not installed" in problem for problem in environment.problems())


def test_static_python_is_refused_with_a_fix(tmp_path: Path) -> None:
    environment = replace(StubEnvironment.current(), libdir=tmp_path)
    assert any("--enable-shared" in problem for problem in environment.problems())


def test_server_env_puts_libpython_then_server_lib_first() -> None:
    environment = StubEnvironment.current()
    env = environment.server_env(Path("/srv/lib"), base={"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/x"})
    assert env["LD_LIBRARY_PATH"].split(":") == [str(environment.libdir), "/srv/lib", "/x"]
    assert env["PATH"].split(":")[0] == str(environment.bin_dir)


def test_port_parsing() -> None:
    assert parse_port("auto", "http") is None
    assert parse_port("8000", "http") == 8000
    with pytest.raises(ValueError, match="--grpc-port"):
        parse_port("eighty", "grpc")


def test_taken_port_names_the_port_and_holder() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        holder = Path("/proc/self/comm").read_text().strip()  # python, or pytest when run as .venv/bin/pytest
        with pytest.raises(PortInUseError, match=rf"port {port} .*{re.escape(holder)} \(pid {os.getpid()}\)") as info:
            ensure_free(port, "http")
    assert info.value.port == port
