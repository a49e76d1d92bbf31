"""Where the SDK connects by default, and which key it sends (only an explicit one)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tritonhf._wire.transport import API_KEY_HEADER

URL_ENV = "TRITONHF_URL"
API_KEY_ENV = "TRITONHF_API_KEY"
GATEWAY_KEY_ENV = "TRITONHF_GATEWAY_KEY"  # the key the gateway requires (its clients send it as API_KEY_ENV's)
WORKSPACE_ENV = "TRITONHF_WORKSPACE"
DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 60.0


def default_url() -> str:
    """``$TRITONHF_URL``, else the server `tritonhf up` started in the default workspace, else :8000.

    The workspace's server is reached on its loopback address (the one tritonhf keeps for itself).
    """
    if os.environ.get(URL_ENV):
        return os.environ[URL_ENV]
    workspace = Path(os.environ.get(WORKSPACE_ENV, "triton_workspace"))
    try:
        state = json.loads((workspace / "run" / "server.json").read_text())
        return str(state["local_url"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_URL


def key_headers(api_key: str | None) -> dict[str, str]:
    """The key header for a server whose APIs the user restricted: only a key given explicitly
    (``api_key=`` or ``$TRITONHF_API_KEY``), never one read from a file and sent to whatever URL."""
    key = api_key or os.environ.get(API_KEY_ENV)
    return {API_KEY_HEADER: key} if key else {}
