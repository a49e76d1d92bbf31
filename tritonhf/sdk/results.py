"""One small frozen result type per task."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from tritonhf._wire.config import ImageLimits

T = TypeVar("T")


@dataclass(frozen=True)
class Classification:
    """A label and its score (a probability for single-label models).

    ``truncated`` is True when the text was longer than the model takes and only its
    beginning was judged (see docs/guide.md, "Long inputs").
    """

    label: str
    score: float
    truncated: bool = False


@dataclass(frozen=True)
class ZeroShotClassification:
    """Candidate labels ranked best first, with scores that sum to 1."""

    labels: tuple[str, ...]
    scores: tuple[float, ...]
    truncated: bool = False

    @property
    def label(self) -> str:
        """The best label."""
        return self.labels[0]

    @property
    def score(self) -> float:
        """The best label's score."""
        return self.scores[0]


@dataclass(frozen=True)
class Segment:
    """A stretch of a transcription and its times in the file (seconds)."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Transcription:
    """What was said (or its English translation), the language, the file's length and timed segments.

    Without ``timestamps=True`` there is one segment: the whole file."""

    text: str
    language: str
    duration: float
    segments: tuple[Segment, ...] = ()


@dataclass(frozen=True)
class TranscriptionPart:
    """What a streamed transcription (``transcribe(..., stream=True)``) delivered since its last part: ``text``
    as decoded (the parts' texts add up to the whole text), and its timed ``segments``."""

    text: str
    segments: tuple[Segment, ...]
    language: str
    duration: float


@dataclass(frozen=True)
class Entity:
    """A named entity: its group (PER, LOC ...), its text, character offsets and score."""

    entity_group: str
    word: str
    start: int
    end: int
    score: float


@dataclass(frozen=True)
class Embeddings:
    """Vectors with what produced them: tokens per text (after any cut) and which texts were cut."""

    vectors: np.ndarray[Any, np.dtype[np.float32]]
    tokens: tuple[int, ...]
    truncated: tuple[bool, ...]

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)


@dataclass(frozen=True)
class Ranked:
    """A document as a reranker ranked it: its index in what was sent, its relevance, its text."""

    index: int
    score: float
    document: str
    truncated: bool = False


@dataclass(frozen=True)
class Answer:
    """An extractive answer: the span of the context, its score, character offsets into the context."""

    text: str
    score: float
    start: int
    end: int


@dataclass(frozen=True)
class FillMask:
    """A candidate for a mask token, and its probability."""

    token: str
    score: float


@dataclass(frozen=True)
class Usage:
    """Tokens a generation read and wrote (as the model's tokenizer counts them).

    ``prompt_tokens_cut`` is how many tokens were cut from the prompt's start to fit the context
    (only with ``truncate=True``; otherwise such a prompt is refused)."""

    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_cut: int = 0
    reasoning_tokens: int = 0  # of the completion's, those of a reasoning model's thinking

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token (as its own text), its log-probability, and the best alternatives with theirs (as many as
    asked; OpenVINO's engine gives none)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """A call the model made to one of the tools offered (OpenAI's shape): ``arguments`` is the JSON text it wrote."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict (a required call's grammar held them to the tool's parameters schema)."""
        found = json.loads(self.arguments)
        return found if isinstance(found, dict) else {"value": found}


@dataclass(frozen=True)
class ChatResult(Generic[T]):
    """A chat answer asked with ``response_format`` or ``tools``.

    ``text``: the answer's text (outside any tool calls). ``parsed``: with ``response_format``, the answer parsed
    (an instance of the model class given, or the JSON value for a schema dict); None when it was cut
    (``finish_reason`` "length") or a tool was called. ``tool_calls``: the calls made (``finish_reason``
    "tool_calls"). ``reasoning``: a reasoning model's thinking (not in ``text``; the schema holds the text only)."""

    text: str
    parsed: T | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    reasoning: str = ""


@dataclass(frozen=True)
class ModelInfo:
    """A model the server holds: its state, and its task when the gallery made it."""

    name: str
    version: str
    state: str
    task: str | None = None
    max_batch_size: int = 0
    reason: str = ""
    instances: int = 1  # copies of the model that compute at once (its config's instance groups)
    # False only where the model was added with batch_invariant=false (text-generation on OpenVINO).
    batch_invariant: bool = True
    matryoshka: bool = False  # its vectors may be cut to their first N components (/v1/embeddings' dimensions)
    reasoning: bool = False  # it thinks before it answers: chat's thinking comes apart (the streams' ``reasoning``)
    engine: str = ""  # what computes it, as gallery add chose (transformers, openvino, onnx, pytorch ...)
    engine_reason: str = ""  # why: what gallery add measured on the machine the model was added on
    images: ImageLimits | None = None  # an image chat model's limits (None: it takes no images in its chat)

    @property
    def ready(self) -> bool:
        return self.state == "READY"
