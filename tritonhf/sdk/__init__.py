"""The typed client, and module-level shortcuts on a default client created on first use.

from tritonhf import sdk
sdk.classify("This movie is absolutely wonderful")
"""

from __future__ import annotations

import threading
from typing import Any

from tritonhf.sdk.aio import AsyncClient
from tritonhf.sdk.client import Client
from tritonhf.sdk.results import Classification, Entity, ModelInfo, ZeroShotClassification

__all__ = [
    "AsyncClient",
    "Classification",
    "Client",
    "Entity",
    "ModelInfo",
    "ZeroShotClassification",
    "chat",
    "classify",
    "default_client",
    "embed",
    "generate",
    "infer",
    "models",
    "ner",
    "zero_shot",
]

_lock = threading.Lock()
_default: Client | None = None


def default_client() -> Client:
    """The shared client (``$TRITONHF_URL`` or the local `tritonhf up` server), made on first use."""
    global _default
    with _lock:
        if _default is None:
            _default = Client()
        return _default


def classify(*args: Any, **kwargs: Any) -> Any:
    """``Client.classify`` on the default client."""
    return default_client().classify(*args, **kwargs)


def zero_shot(*args: Any, **kwargs: Any) -> Any:
    """``Client.zero_shot`` on the default client."""
    return default_client().zero_shot(*args, **kwargs)


def ner(*args: Any, **kwargs: Any) -> Any:
    """``Client.ner`` on the default client."""
    return default_client().ner(*args, **kwargs)


def embed(*args: Any, **kwargs: Any) -> Any:
    """``Client.embed`` on the default client."""
    return default_client().embed(*args, **kwargs)


def generate(*args: Any, **kwargs: Any) -> Any:
    """``Client.generate`` on the default client."""
    return default_client().generate(*args, **kwargs)


def chat(*args: Any, **kwargs: Any) -> Any:
    """``Client.chat`` on the default client."""
    return default_client().chat(*args, **kwargs)


def infer(*args: Any, **kwargs: Any) -> Any:
    """``Client.infer`` on the default client."""
    return default_client().infer(*args, **kwargs)


def models() -> Any:
    """``Client.models`` on the default client."""
    return default_client().models()
