"""Install, start and stop a native Triton server (no Docker)."""

from tritonhf.bootstrap.command import ServerConfig
from tritonhf.bootstrap.diagnose import Diagnosis, diagnose
from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.installation.install import BootstrapResult, bootstrap
from tritonhf.bootstrap.installation.sources import DirSource, PipWheelSource, TarballSource, WheelSource, choose_source
from tritonhf.bootstrap.layout import Manifest, Workspace
from tritonhf.bootstrap.process import ModelStatus, Server, ServerState
from tritonhf.bootstrap.stack import Gateway, Stack

__all__ = [
    "BootstrapResult",
    "Diagnosis",
    "DirSource",
    "Gateway",
    "Manifest",
    "ModelStatus",
    "PipWheelSource",
    "Server",
    "ServerConfig",
    "ServerState",
    "Stack",
    "StubEnvironment",
    "TarballSource",
    "WheelSource",
    "Workspace",
    "bootstrap",
    "choose_source",
    "diagnose",
]
