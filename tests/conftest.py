"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonhf.bootstrap import Workspace, bootstrap


@pytest.fixture(scope="session")
def installed_server(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A workspace with a real Triton server installed once per session (wheel cached by pip)."""
    workspace = Workspace(tmp_path_factory.mktemp("server") / "workspace")
    bootstrap(workspace)
    return workspace


@pytest.fixture
def workspace(installed_server: Workspace, tmp_path: Path) -> Workspace:
    """A fresh workspace sharing the session's server install, with an empty repository."""
    fresh = Workspace(tmp_path / "workspace")
    fresh.root.mkdir()
    (fresh.root / "triton_server").symlink_to(installed_server.server_dir)
    fresh.create_folders()
    return fresh
