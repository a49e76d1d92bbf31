"""tritonhf: serve HuggingFace models on a native Triton Inference Server, without Docker.

from tritonhf import Client, Server
with Server("triton_workspace") as server, Client(server.http_url) as client:
    client.classify("This movie is absolutely wonderful")
"""

from tritonhf._version import __version__
from tritonhf.bootstrap.process import Server
from tritonhf.errors import (
    AmbiguousModelError,
    ClientError,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    RequestTimeoutError,
    ServerUnavailableError,
    TritonHFError,
)
from tritonhf.sdk import AsyncClient, Classification, Client, Entity, ModelInfo, ZeroShotClassification

__all__ = [
    "AmbiguousModelError",
    "AsyncClient",
    "Classification",
    "Client",
    "ClientError",
    "Entity",
    "InferenceError",
    "InvalidInputError",
    "ModelInfo",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "RequestTimeoutError",
    "Server",
    "ServerUnavailableError",
    "TritonHFError",
    "ZeroShotClassification",
    "__version__",
]
