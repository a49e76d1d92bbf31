"""The typed client, and module-level shortcuts on a default client created on first use.

from tritonhf import sdk
sdk.classify("This movie is absolutely wonderful")

Each shortcut has exactly its ``Client`` method's signature (overloads included).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from tritonhf._wire.config import ImageLimits
from tritonhf._wire.transport import API_KEY_HEADER
from tritonhf.sdk.aio import AsyncClient, AsyncTextStream, AsyncTranscriptionStream
from tritonhf.sdk.client import Client, TextStream, TranscriptionStream
from tritonhf.sdk.media import AudioInput, ImageInput
from tritonhf.sdk.results import (
    Answer,
    ChatResult,
    Classification,
    Embeddings,
    Entity,
    FillMask,
    ModelInfo,
    Ranked,
    Segment,
    TokenLogprob,
    ToolCall,
    Transcription,
    TranscriptionPart,
    Usage,
    ZeroShotClassification,
)
from tritonhf.sdk.sampling import Sampling, SpeechOptions

__all__ = [
    "API_KEY_HEADER",
    "Answer",
    "AsyncClient",
    "AsyncTextStream",
    "AsyncTranscriptionStream",
    "AudioInput",
    "ChatResult",
    "Classification",
    "Client",
    "Embeddings",
    "Entity",
    "FillMask",
    "ImageInput",
    "ImageLimits",
    "ModelInfo",
    "Ranked",
    "Sampling",
    "Segment",
    "SpeechOptions",
    "TextStream",
    "TokenLogprob",
    "ToolCall",
    "Transcription",
    "TranscriptionPart",
    "TranscriptionStream",
    "Usage",
    "ZeroShotClassification",
    "answer",
    "chat",
    "classify",
    "classify_images",
    "default_client",
    "embed",
    "embed_images",
    "fill_mask",
    "generate",
    "infer",
    "models",
    "ner",
    "rerank",
    "summarize",
    "transcribe",
    "translate",
    "zero_shot",
    "zero_shot_images",
]

P = ParamSpec("P")
R = TypeVar("R")
_lock = threading.Lock()
_default: Client | None = None


def default_client() -> Client:
    """The shared client (``$TRITONHF_URL`` or the local `tritonhf up` server), made on first use."""
    global _default
    with _lock:
        if _default is None:
            _default = Client()
        return _default


def _on_default_client(method: Callable[Concatenate[Client, P], R]) -> Callable[P, R]:
    """``method`` called on the default client, with the method's own signature and docstring."""

    @functools.wraps(method)
    def shortcut(*args: P.args, **kwargs: P.kwargs) -> R:
        return method(default_client(), *args, **kwargs)

    return shortcut


classify = _on_default_client(Client.classify)
classify_images = _on_default_client(Client.classify_images)
embed_images = _on_default_client(Client.embed_images)
zero_shot_images = _on_default_client(Client.zero_shot_images)
zero_shot = _on_default_client(Client.zero_shot)
ner = _on_default_client(Client.ner)
embed = _on_default_client(Client.embed)
generate = _on_default_client(Client.generate)
chat = _on_default_client(Client.chat)
infer = _on_default_client(Client.infer)
rerank = _on_default_client(Client.rerank)
answer = _on_default_client(Client.answer)
fill_mask = _on_default_client(Client.fill_mask)
summarize = _on_default_client(Client.summarize)
translate = _on_default_client(Client.translate)
transcribe = _on_default_client(Client.transcribe)
models = _on_default_client(Client.models)
