"""The workspace: the folders a Triton user knows, and the manifest of what was installed.

WORKSPACE/
  triton_server/{bin,lib,backends/python,caches}   the server install
  triton_server/manifest.json                        where it came from
  model_repository/                                  NAME/config.pbtxt, NAME/1/model.py
  logs/server.log                                    the server's output
  run/server.json                                    pid and endpoints of the running server
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tritonhf._files import load_dataclass, save_dataclass

# The Python backend's stub binary, in backends/python/ of every install (and in argv[0] of its processes).
STUB_NAME = "triton_python_backend_stub"

DEFAULT_WORKSPACE = "triton_workspace"
WORKSPACE_ENV = "TRITONHF_WORKSPACE"


def default_workspace() -> Path:
    """``$TRITONHF_WORKSPACE`` if set, else ``./triton_workspace``."""
    return Path(os.environ.get(WORKSPACE_ENV, DEFAULT_WORKSPACE)).absolute()


@dataclass(frozen=True)
class Workspace:
    """Paths of one workspace; creating the object touches nothing on disk."""

    root: Path

    @classmethod
    def at(cls, root: Path | str | None = None) -> Workspace:
        return cls(Path(root).absolute() if root is not None else default_workspace())

    @property
    def server_dir(self) -> Path:
        return self.root / "triton_server"

    @property
    def binary(self) -> Path:
        return self.server_dir / "bin" / "tritonserver"

    @property
    def lib_dir(self) -> Path:
        return self.server_dir / "lib"

    @property
    def backends_dir(self) -> Path:
        return self.server_dir / "backends"

    @property
    def python_backend_dir(self) -> Path:
        return self.backends_dir / "python"

    @property
    def stub(self) -> Path:
        return self.python_backend_dir / STUB_NAME

    @property
    def manifest_path(self) -> Path:
        return self.server_dir / "manifest.json"

    @property
    def model_repository(self) -> Path:
        return self.root / "model_repository"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "server.json"

    @property
    def api_key_file(self) -> Path:
        return self.run_dir / "api-key"

    @property
    def stub_env_dir(self) -> Path:
        """The Python environment the stubs run in, when bootstrap prepared one (numpy < 2 of its own)."""
        return self.root / "stub_env"

    @property
    def stub_env_python(self) -> Path:
        return self.stub_env_dir / "bin" / "python"

    def create_folders(self) -> None:
        for folder in (self.model_repository, self.logs_dir, self.run_dir):
            folder.mkdir(parents=True, exist_ok=True)

    def is_installed(self) -> bool:
        return self.binary.is_file() and self.manifest_path.is_file()

    def read_manifest(self) -> Manifest | None:
        # One written by another version reads as absent, so the server is reinstalled.
        return load_dataclass(Manifest, self.manifest_path)


@dataclass(frozen=True)
class Manifest:
    """What ``bootstrap`` installed, so that a second run can tell nothing changed."""

    source_kind: str
    source: str
    fingerprint: str
    triton_version: str
    python_stub: str
    installed_at: str
    tritonhf_version: str

    def write(self, path: Path) -> None:
        save_dataclass(self, path)
