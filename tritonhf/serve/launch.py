"""Where the gateway points, which key it requires, and how `tritonhf up` runs it beside Triton.

The key never travels on a command line: ``--api-key-file``, ``$TRITONHF_GATEWAY_KEY``, or (when
bound beyond loopback without either) the workspace's ``run/api-key``, created owner-only.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import is_exposed, url_host
from tritonhf.bootstrap.spawn import Identity, identity_of, spawn
from tritonhf.bootstrap.state import ServerState, ensure_api_key
from tritonhf.errors import ServerStartError
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


def require_gateway_packages() -> None:
    """FastAPI and uvicorn are an extra (``tritonhf[serve]``): say so before anything starts."""
    import importlib.util

    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise ServerStartError(
            f"The OpenAI gateway needs {' and '.join(missing)}: pip install 'tritonhf[serve]'"
            " (or leave out --openai-port)."
        )


def run_gateway(
    url: str, host: str, port: int, key: str | None, limits: Limits | None = None, repository: Path | None = None
) -> None:
    require_gateway_packages()
    from tritonhf.serve.app import run

    run(url, host, port, key, limits, repository)


def start_gateway(
    workspace: Workspace,
    host: str,
    port: int,
    die_with_parent: bool,
    env: dict[str, str],
    arguments: Sequence[str] = (),
) -> Identity:
    """`python -m tritonhf.serve WORKSPACE` beside the server (``arguments``: its limits); returns once
    /health answers."""
    require_gateway_packages()
    command = [
        sys.executable, "-m", "tritonhf.serve", str(workspace.root), "--host", host, "--port", str(port), *arguments
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
