"""Running the gateway in this process, with what it was given: the Triton endpoint, the repository it reads
tokenizers from, and the key it requires.

``tritonhf up`` starts it as a process of its own (``bootstrap/gateway.py`` reads the workspace and passes those as
arguments); ``tritonhf openai`` runs it in the foreground. The key never travels on a command line: a key file
(``--api-key-file``, owner-only) or ``$TRITONHF_GATEWAY_KEY``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tritonhf._wire.settings import GATEWAY_KEY_ENV
from tritonhf.serve.limits import Limits


def gateway_key(key_file: Path | None = None) -> str | None:
    """The key the gateway requires: the key file's, else ``$TRITONHF_GATEWAY_KEY``'s, else none."""
    if key_file is not None:
        return key_file.read_text().strip() or None
    return os.environ.get(GATEWAY_KEY_ENV) or None


def run_gateway(
    url: str,
    host: str,
    port: int,
    key: str | None,
    limits: Limits | None = None,
    repository: Path | None = None,
    metrics_url: str | None = None,
) -> None:
    from tritonhf.serve.app import run

    run(url, host, port, key, limits, repository, metrics_url)
