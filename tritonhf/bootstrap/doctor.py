"""``tritonhf doctor``: one table of everything a native server needs, each FAIL with its fix."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.installation.sources import python_version_tag
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.ports import holder_of, is_free

MIN_GLIBC = (2, 35)
MIN_SHM_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _glibc() -> Check:
    raw = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    version = (raw or "unknown").split()[-1]
    try:
        ok = tuple(int(part) for part in version.split(".")[:2]) >= MIN_GLIBC
    except ValueError:
        ok = False
    return Check(
        "glibc >= 2.35", ok, version, "Use Ubuntu 22.04+, Debian 12+ or Colab; the server binary needs glibc 2.35."
    )


_ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


def elf_machine(binary: Path) -> str | None:
    """The architecture an ELF executable was built for (x86_64, aarch64), None when unreadable."""
    try:
        header = binary.read_bytes()[:20]
    except OSError:
        return None
    if header[:4] != b"\x7fELF":
        return None
    number = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
    return _ELF_MACHINES.get(number, f"machine {number}")


def _architecture(workspace: Workspace) -> Check:
    machine = platform.machine()
    built = elf_machine(workspace.binary) if workspace.binary.is_file() else None
    supported = machine in _ELF_MACHINES.values()
    ok = supported and (built is None or built == machine)
    detail = f"{machine}" + (f", server binary {built}" if built else "")
    fix = (
        "Triton's wheel exists for x86_64 and aarch64 Linux only."
        if not supported
        else "The installed server was built for another machine: run `tritonhf bootstrap --force` here."
    )
    return Check("CPU architecture", ok, detail, fix)


def _server(workspace: Workspace) -> list[Check]:
    manifest = workspace.read_manifest()
    if manifest is None or not workspace.binary.is_file():
        return [Check("server installed", False, f"nothing in {workspace.server_dir}", "Run `tritonhf bootstrap`.")]
    checks = [Check("server installed", True, f"Triton {manifest.triton_version} from {manifest.source_kind}")]
    stub_ok = workspace.stub.is_file() and manifest.python_stub in (python_version_tag(), "as shipped")
    checks.append(
        Check(
            "Python stub for this interpreter",
            stub_ok,
            f"stub {manifest.python_stub}, interpreter {python_version_tag()}",
            "Run `tritonhf bootstrap --force` with this interpreter to install its stub.",
        )
    )
    environment = StubEnvironment.for_workspace(workspace)
    try:
        result = subprocess.run(
            [str(workspace.binary), "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            env=environment.server_env(workspace.lib_dir),
        )
        # `--help` exits non-zero; what proves the binary and its libraries load is the usage text.
        output = result.stdout + result.stderr
        runs = "Usage: tritonserver" in output
        detail = "starts (prints its usage)" if runs else (output.strip().splitlines() or ["no output"])[-1]
    except (OSError, subprocess.SubprocessError) as exc:
        runs, detail = False, str(exc)
    checks.append(
        Check("server binary runs", runs, detail[:80], "Re-run `tritonhf bootstrap --force`; see the detail.")
    )
    return checks


def _environment(workspace: Workspace) -> list[Check]:
    """Both environments: the user's (any numpy) and the one the stubs run in (numpy < 2 of its own)."""
    user = StubEnvironment.current()
    stub = StubEnvironment.for_workspace(workspace)
    own = stub.prefix != user.prefix
    where = f"{stub.prefix}" + (" (the workspace's stub_env)" if own else " (this environment: no stub_env yet)")
    checks = [
        Check("your environment", True, f"numpy {user.numpy}, Python {user.version} in {user.prefix}"),
        Check(
            "libpython found",
            stub.libpython.exists(),
            str(stub.libpython),
            "Use a Python built with --enable-shared (system python3, or pyenv with "
            "PYTHON_CONFIGURE_OPTS=--enable-shared).",
        ),
        Check(
            "numpy < 2 for the stub",
            stub.numpy is not None and (stub.numpy_major() or 0) < 2,
            f"numpy {stub.numpy} in {where}",
            "Run `tritonhf bootstrap`: it gives the stub numpy < 2 in WORKSPACE/stub_env and leaves yours alone.",
        ),
        Check(
            "stub Python = this Python",
            stub.version == user.version,
            f"stub environment {stub.version}, interpreter {user.version}",
            "Run `tritonhf bootstrap --force` with the interpreter you serve from.",
        ),
    ]
    try:
        imported = subprocess.run(
            [str(stub.bin_dir / "python"), "-c", "import numpy, torch, transformers"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        ok, detail = imported.returncode == 0, (imported.stderr.strip().splitlines() or ["importable"])[-1]
    except (OSError, subprocess.SubprocessError) as exc:
        ok, detail = False, str(exc)
    checks.append(
        Check(
            "torch and transformers in the stub",
            ok,
            detail[:80],
            f"{user.bin_dir / 'python'} -m pip install transformers 'torch==2.13.0' (the stub shares your packages)",
        )
    )
    return checks


def _shm() -> Check:
    try:
        total = shutil.disk_usage("/dev/shm").total
    except OSError:
        return Check("/dev/shm size", False, "no /dev/shm", "The Python backend needs /dev/shm (a tmpfs).")
    return Check(
        "/dev/shm size",
        total >= MIN_SHM_BYTES,
        f"{total / 2**20:.0f} MiB",
        "Give /dev/shm at least 256 MiB (docker: --shm-size=1g; else mount -o remount,size=1G /dev/shm).",
    )


def _ports(ports: tuple[int, ...]) -> list[Check]:
    checks = []
    for port in ports:
        free = is_free(port)
        holder = "" if free else f" (held by {holder_of(port) or 'another process'})"
        checks.append(
            Check(
                f"port {port} free",
                free,
                "free" if free else f"in use{holder}",
                "Use --http-port/--grpc-port/--metrics-port auto.",
            )
        )
    return checks


def _gpu() -> Check:
    present = Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None
    return Check("GPU", True, "present" if present else "none: models run on the CPU")


def run_checks(workspace: Workspace, ports: tuple[int, ...] = (8000, 8001, 8002)) -> list[Check]:
    return [
        _architecture(workspace),
        _glibc(),
        *_server(workspace),
        *_environment(workspace),
        _shm(),
        *_ports(ports),
        _gpu(),
    ]
