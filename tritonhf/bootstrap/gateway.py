"""The OpenAI/TEI gateway as a process beside the server: started (and restarted by the supervisor) here.

The process runs ``python -m tritonhf.serve``; this module reads what it needs of the workspace (the server's
endpoint, the repository, the key file when bound beyond loopback) and passes it as arguments, and never imports
the web code, so bootstrap stays below serve and serve knows no workspace. What the gateway does is
``tritonhf/serve``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tritonhf._wire.settings import GATEWAY_KEY_ENV, default_url
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import is_exposed, url_host
from tritonhf.bootstrap.spawn import Identity, identity_of, spawn
from tritonhf.bootstrap.state import ServerState, ensure_api_key
from tritonhf.errors import ServerStartError

GATEWAY_MODULE = "tritonhf.serve"


def require_gateway_packages() -> None:
    """FastAPI and uvicorn are an extra (``tritonhf[serve]``): say so before anything starts."""
    missing = [name for name in ("fastapi", "uvicorn", "orjson") if importlib.util.find_spec(name) is None]
    if missing:
        raise ServerStartError(
            f"The OpenAI gateway needs {', '.join(missing)}: pip install 'tritonhf[serve]'"
            " (or leave out --openai-port)."
        )


def gateway_url(workspace: Workspace) -> str:
    """The Triton endpoint for the gateway: gRPC (one connection pool, streaming), unless it uses TLS."""
    state = ServerState.load(workspace.state_file)
    if state is None:
        return default_url()
    return state.local_url if state.tls else state.grpc_url


def gateway_metrics_url(workspace: Workspace) -> str | None:
    """The running server's metrics endpoint (Triton's and the templates' figures), when it has one."""
    state = ServerState.load(workspace.state_file)
    return state.metrics_url if state is not None and state.metrics_port else None


def gateway_repository(workspace: Workspace) -> Path | None:
    """The repository the server serves, when it is a folder on this machine (the gateway reads tokenizers there)."""
    state = ServerState.load(workspace.state_file)
    where = state.repository if state is not None else str(workspace.model_repository)
    return Path(where) if "://" not in where and Path(where).is_dir() else None


def gateway_key_file(workspace: Workspace, host: str) -> Path | None:
    """The workspace's key file (created owner-only) for a gateway bound beyond loopback, unless
    ``$TRITONHF_GATEWAY_KEY`` gives the key; None on loopback."""
    if os.environ.get(GATEWAY_KEY_ENV) or not is_exposed(host):
        return None
    ensure_api_key(workspace)
    return workspace.api_key_file


def gateway_arguments(workspace: Workspace, host: str, url: str | None = None) -> list[str]:
    """What the gateway process is given of the workspace: the endpoint, Triton's metrics (the page's server state
    reads them), the repository, the key file."""
    arguments = ["--url", url or gateway_url(workspace)]
    metrics = gateway_metrics_url(workspace)
    if metrics is not None:
        arguments += ["--metrics-url", metrics]
    repository = gateway_repository(workspace)
    if repository is not None:
        arguments += ["--repository", str(repository)]
    key_file = gateway_key_file(workspace, host)
    if key_file is not None:
        arguments += ["--api-key-file", str(key_file)]
    return arguments


def start_gateway(
    workspace: Workspace,
    host: str,
    port: int,
    die_with_parent: bool,
    env: dict[str, str],
    arguments: Sequence[str] = (),
) -> Identity:
    """`python -m tritonhf.serve` beside the server, given the workspace's endpoint, repository and key file
    (``arguments``: its limits); returns once /health answers."""
    require_gateway_packages()
    command = [
        sys.executable, "-m", GATEWAY_MODULE, *gateway_arguments(workspace, host), "--host", host, "--port", str(port),
        *arguments,
    ]  # fmt: skip
    process = spawn(command, workspace.logs_dir / "gateway.log", env, workspace.root, die_with_parent, append=True)
    identity = identity_of(process)
    deadline = time.monotonic() + 60
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with opener.open(f"http://{url_host(host)}:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return identity
        except OSError:
            time.sleep(0.2)
    identity.stop(5)
    raise ServerStartError(f"The OpenAI gateway did not start; see {workspace.logs_dir / 'gateway.log'}.")
