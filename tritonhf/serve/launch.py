"""Where the gateway points, which key and repository it uses, and running it in this process.

``tritonhf up`` starts it as a process of its own (``bootstrap/gateway.py``), which runs this.

The key never travels on a command line: ``--api-key-file``, ``$TRITONHF_GATEWAY_KEY``, or (when
bound beyond loopback without either) the workspace's ``run/api-key``, created owner-only.
"""

from __future__ import annotations

import os
from pathlib import Path

from tritonhf.bootstrap.gateway import require_gateway_packages
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import is_exposed
from tritonhf.bootstrap.state import ServerState, ensure_api_key
from tritonhf.serve.limits import Limits

KEY_ENV = "TRITONHF_GATEWAY_KEY"


def gateway_url(workspace: Workspace) -> str:
    """The Triton endpoint for the gateway: gRPC (one connection pool, streaming), unless it uses TLS."""
    state = ServerState.load(workspace.state_file)
    if state is None:
        from tritonhf._wire.settings import default_url

        return default_url()
    return state.local_url if state.tls else state.grpc_url


def gateway_repository(workspace: Workspace) -> Path | None:
    """The repository the server serves, when it is a folder on this machine (the gateway reads tokenizers there)."""
    state = ServerState.load(workspace.state_file)
    where = state.repository if state is not None else str(workspace.model_repository)
    return Path(where) if "://" not in where and Path(where).is_dir() else None


def gateway_key(workspace: Workspace, host: str, key_file: Path | None = None) -> str | None:
    if key_file is not None:
        return key_file.read_text().strip() or None
    if os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV]
    return ensure_api_key(workspace) if is_exposed(host) else None


def run_gateway(
    url: str, host: str, port: int, key: str | None, limits: Limits | None = None, repository: Path | None = None
) -> None:
    require_gateway_packages()
    from tritonhf.serve.app import run

    run(url, host, port, key, limits, repository)
