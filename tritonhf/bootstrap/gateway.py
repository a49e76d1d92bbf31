"""The OpenAI/TEI gateway as a process beside the server: started (and restarted by the supervisor) here.

The process runs ``python -m tritonhf.serve WORKSPACE``; this module names it and never imports the
web code, so bootstrap stays below serve. What the gateway does is ``tritonhf/serve``.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import urllib.request
from collections.abc import Sequence

from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import url_host
from tritonhf.bootstrap.spawn import Identity, identity_of, spawn
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
        sys.executable, "-m", GATEWAY_MODULE, str(workspace.root), "--host", host, "--port", str(port), *arguments
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
