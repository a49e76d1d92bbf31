"""tritonhf: serve HuggingFace models on a native Triton Inference Server, without Docker.

from tritonhf import Client, Server
with Server("triton_workspace") as server, Client(server.http_url) as client:
    client.classify("This movie is absolutely wonderful")
"""

from tritonhf._version import __version__
from tritonhf.bootstrap.process import Server
from tritonhf.bootstrap.stack import Gateway, Stack
from tritonhf.errors import (
    AmbiguousModelError,
    ClientError,
    ContextLengthError,
    DeployError,
    GalleryError,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    PermissionDeniedError,
    RequestCancelledError,
    RequestTimeoutError,
    ServerBusyError,
    ServerError,
    ServerStartError,
    ServerUnavailableError,
    StorageError,
    TritonHFError,
)
from tritonhf.sdk import (
    Answer,
    AsyncClient,
    AsyncTextStream,
    Classification,
    Client,
    Embeddings,
    Entity,
    FillMask,
    ImageInput,
    ModelInfo,
    Ranked,
    Sampling,
    TextStream,
    Usage,
    ZeroShotClassification,
)

__all__ = [
    "AmbiguousModelError",
    "Answer",
    "AsyncClient",
    "AsyncTextStream",
    "Classification",
    "Client",
    "ClientError",
    "ContextLengthError",
    "DeployError",
    "Embeddings",
    "Entity",
    "FillMask",
    "GalleryError",
    "Gateway",
    "ImageInput",
    "InferenceError",
    "InvalidInputError",
    "ModelInfo",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "PermissionDeniedError",
    "Ranked",
    "RequestCancelledError",
    "RequestTimeoutError",
    "Sampling",
    "Server",
    "ServerBusyError",
    "ServerError",
    "ServerStartError",
    "ServerUnavailableError",
    "Stack",
    "StorageError",
    "TextStream",
    "TritonHFError",
    "Usage",
    "ZeroShotClassification",
    "__version__",
]
