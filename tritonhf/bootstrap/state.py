"""What a running server leaves on disk so that later commands can find it: ``run/server.json``.

Every file here is written owner-only (0600), through a temporary file and a rename.
Nothing secret is stored: the restriction that closes the admin APIs of an exposed endpoint
is made anew at each launch and kept nowhere (see ``process.Server``). The workspace key in
``run/api-key`` exists only for the OpenAI gateway's bearer token.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from tritonhf._files import load_dataclass, save_dataclass
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import url_host
from tritonhf.bootstrap.spawn import Identity


def save_private(instance: object, path: Path) -> None:
    """A dataclass as JSON, readable by its owner only."""
    save_dataclass(instance, path, mode=0o600)


@dataclass
class ServerState:
    """A running server: its process, where each service listens, and how it was started."""

    pid: int
    started: int  # the process's start time (clock ticks since boot): the pid is ours only while it matches
    binary: str
    host: str  # what the user asked to expose (127.0.0.1 by default)
    http_address: str  # where each service listens
    grpc_address: str
    metrics_address: str
    http_port: int
    grpc_port: int
    metrics_port: int
    admin_protocol: str  # "http" or "grpc": the protocol tritonhf keeps on loopback for itself
    tls: bool
    shm_prefix: str
    log: str
    repository: str
    model_control: str
    started_at: float
    command: list[str] = field(default_factory=list)  # without the per-launch restriction
    local_url: str = ""  # where tools on this machine connect (the admin endpoint)
    gateway_host: str = ""  # the OpenAI/TEI gateway, when `up --openai-port` started one
    gateway_port: int = 0
    gateway_pid: int = 0
    gateway_started: int = 0
    gateway_executable: str = ""
    gateway_args: list[str] = field(default_factory=list)  # its limits, as arguments (kept for restarts)

    @property
    def gateway(self) -> Identity | None:
        if not self.gateway_port:
            return None
        return Identity(self.gateway_pid, self.gateway_started, self.gateway_executable)

    @property
    def gateway_url(self) -> str:
        return f"http://{url_host(self.gateway_host)}:{self.gateway_port}/v1" if self.gateway_port else ""

    @property
    def identity(self) -> Identity:
        return Identity(self.pid, self.started, self.binary)

    @property
    def http_url(self) -> str:
        return f"http://{url_host(self.http_address)}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://{url_host(self.grpc_address)}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{url_host(self.metrics_address)}:{self.metrics_port}/metrics"

    @property
    def admin_url(self) -> str:
        return self.http_url if self.admin_protocol == "http" else self.grpc_url

    def save(self, path: Path) -> None:
        self.local_url = self.admin_url
        save_private(self, path)

    @classmethod
    def load(cls, path: Path) -> ServerState | None:
        return load_dataclass(cls, path)


def ensure_api_key(workspace: Workspace) -> str:
    """The workspace's key (the gateway's bearer token), created owner-only if missing."""
    path = workspace.api_key_file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    return path.read_text().strip()
