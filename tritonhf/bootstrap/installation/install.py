"""``tritonhf bootstrap``: install a server into a workspace, once, and prove that it starts."""

from __future__ import annotations

import datetime
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tritonhf._progress import Progress, SilentProgress
from tritonhf._version import __version__
from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.installation import stub_env
from tritonhf.bootstrap.installation.sources import PipWheelSource, ServerSource, python_version_tag
from tritonhf.bootstrap.layout import Manifest, Workspace
from tritonhf.bootstrap.process import Server
from tritonhf.errors import BootstrapError, ServerError


@dataclass(frozen=True)
class BootstrapResult:
    workspace: Workspace
    manifest: Manifest
    reused: bool
    stub_environment: StubEnvironment


def _is_current(workspace: Workspace, fingerprint: str) -> Manifest | None:
    manifest = workspace.read_manifest()
    if manifest is None or not workspace.binary.is_file() or not workspace.stub.is_file():
        return None
    if manifest.fingerprint != fingerprint:
        return None
    if manifest.python_stub not in (python_version_tag(), "as shipped"):
        return None  # the interpreter changed: another stub is needed
    return manifest


def verify_server(
    workspace: Workspace, server_dir: Path | None = None, environment: StubEnvironment | None = None
) -> str:
    """Start the installed binary on an empty repository and free loopback ports.

    Returns the server version it reports. This is the proof that the binary, its
    libraries and the backends folder work on this machine.
    """
    with tempfile.TemporaryDirectory(prefix="tritonhf-verify-") as scratch:
        probe = Workspace(Path(scratch))
        probe.create_folders()
        (probe.root / "triton_server").symlink_to(server_dir or workspace.server_dir)
        server = Server(
            probe,
            http_port="auto",
            grpc_port="auto",
            metrics_port="auto",
            startup_timeout=30,
            environment=environment or StubEnvironment.for_workspace(workspace),
        )
        try:
            server.start()
            version = str(server.metadata().get("version", "unknown"))
        except ServerError as exc:
            raise BootstrapError(f"The installed server does not start on this machine.\n{exc}") from exc
        finally:
            server.stop(grace=10)
    return version


def bootstrap(
    workspace: Workspace,
    source: ServerSource | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> BootstrapResult:
    """Lay out ``workspace`` and install the server from ``source`` unless already done.

    The server is unpacked into a hidden folder beside ``triton_server/`` and renamed into
    place only once complete and verified, so an interrupted run leaves the old install
    (or nothing) behind, never half of one.
    """
    source = source or PipWheelSource()
    progress = progress or SilentProgress()
    workspace.root.mkdir(parents=True, exist_ok=True)
    workspace.create_folders()
    fingerprint = source.fingerprint()
    environment = stub_env.prepare(workspace, progress)  # quick when it is there already
    current = None if force else _is_current(workspace, fingerprint)
    if current is not None:
        return BootstrapResult(workspace, current, reused=True, stub_environment=environment)

    staging = Path(tempfile.mkdtemp(prefix=".triton_server.partial-", dir=workspace.root))
    try:
        stub_tag = source.populate(staging, progress)
        progress.step("Checking that the server starts")
        version = verify_server(workspace, staging, environment)
        manifest = Manifest(
            source_kind=source.kind,
            source=source.describe(),
            fingerprint=fingerprint,
            triton_version=version,
            python_stub=stub_tag,
            installed_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            tritonhf_version=__version__,
        )
        manifest.write(staging / "manifest.json")
        _swap_into_place(staging, workspace.server_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return BootstrapResult(workspace, manifest, reused=False, stub_environment=environment)


def _swap_into_place(staging: Path, target: Path) -> None:
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.replace(old)
    staging.replace(target)
    shutil.rmtree(old, ignore_errors=True)
