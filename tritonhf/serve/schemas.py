"""Request bodies of the gateway's routes (OpenAI's and TEI's shapes), checked by pydantic.

Fields OpenAI has but a Triton text model cannot honour (several choices, tools, images,
penalties, logprobs) are accepted by the schema so that the refusal can name them clearly.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # clients send fields we do not use; unsupported ones are refused by name

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """An explicit JSON null means "not given" (clients that serialise every field send them)."""
        return {key: value for key, value in data.items() if value is not None} if isinstance(data, dict) else data


class ChatMessage(_Body):

    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class GenerationBody(_Body):
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool | int | None = None
    logit_bias: dict[str, float] | None = None
    truncate: bool = False  # not OpenAI's: cut a prompt past the context (its start) instead of a 400


class ChatBody(GenerationBody):
    messages: list[ChatMessage]
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None


class CompletionBody(GenerationBody):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


class EmbeddingBody(_Body):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    truncate: bool = False  # not OpenAI's (which refuses a too-long input): cut it, and say so per item
    # Infinity's: "image" makes every input an image (a data: URI or base64) for an image-text model (CLIP).
    modality: Literal["text", "image"] = "text"


class TeiEmbedBody(_Body):
    inputs: str | list[str]
    normalize: bool = True
    truncate: bool = False  # TEI's default: a too-long input is a 413, never cut unasked
    model: str | None = None


class TeiPredictBody(_Body):
    inputs: str | list[str] | list[list[str]]  # TEI: a text, texts, or [text, text_pair] pairs
    raw_scores: bool = False
    truncate: bool = False
    model: str | None = None


class TeiRerankBody(_Body):
    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = False
    model: str | None = None


class TeiTokenizeBody(_Body):
    inputs: str | list[str]
    add_special_tokens: bool = True
    model: str | None = None
