"""Answers of the gateway's routes, as documented in ``/openapi.json``.

The routes write their answers as plain dicts (or straight from numpy); these models only describe them, so that
the schema is the contract: the fuzzer in `make test` checks every answer against them. The request bodies are in
``schemas``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tritonhf.serve.schemas import MessageToolCall, RerankDocument


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class OpenAIErrorDetail(_Answer):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(_Answer):
    """Every /v1 route's error (OpenAI's shape)."""

    error: OpenAIErrorDetail


class TeiError(_Answer):
    """Every TEI route's error (TEI's shape)."""

    error: str
    error_type: str


class ModelCard(_Answer):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    task: str | None
    batch_invariant: bool = Field(description="False only where the model was added with batch_invariant=false.")
    matryoshka: bool = Field(description="True where /v1/embeddings takes 'dimensions' (--param matryoshka=true).")
    reasoning: bool = Field(default=False, description="True where the model thinks before it answers "
                            "(reasoning_content, reasoning items).")  # fmt: skip


class ModelList(_Answer):
    object: Literal["list"]
    data: list[ModelCard]


class Usage(_Answer):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int
    prompt_tokens_cut: int | None = Field(default=None, description="With truncate=true: prompt tokens cut.")
    completion_tokens_details: dict[str, int] | None = Field(
        default=None, description="A reasoning model's: reasoning_tokens, those of its thinking."
    )


class AssistantMessage(_Answer):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[MessageToolCall] | None = None
    reasoning_content: str | None = Field(default=None, description="A reasoning model's thinking (vLLM's field).")


class TopLogprob(_Answer):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(_Answer):
    content: list[TokenLogprob] | None


class ChatChoice(_Answer):
    index: int
    message: AssistantMessage
    finish_reason: str
    logprobs: ChatLogprobs | None


class ChatCompletion(_Answer):
    """A chat answer (``stream: true`` answers server-sent events of ``chat.completion.chunk`` instead)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class OutputText(_Answer):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[TokenLogprob]


class OutputMessage(_Answer):
    type: Literal["message"]
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"]
    content: list[OutputText]


class OutputFunctionCall(_Answer):
    type: Literal["function_call"]
    id: str
    call_id: str = Field(description="The id a function_call_output answers it by.")
    name: str
    arguments: str
    status: Literal["in_progress", "completed"]


class ReasoningText(_Answer):
    type: Literal["reasoning_text"]
    text: str


class OutputReasoning(_Answer):
    """A reasoning model's thinking: its whole text as the item's content (no summary is made)."""

    type: Literal["reasoning"]
    id: str
    summary: list[Any]
    content: list[ReasoningText]
    status: Literal["in_progress", "completed"]


class ResponseUsage(_Answer):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class ResponseObject(_Answer):
    """A response of the Responses API (``stream: true`` answers its typed server-sent events instead: each event's
    name is its ``type``, from ``response.created`` to ``response.completed``)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    error: dict[str, str] | None
    incomplete_details: dict[str, str] | None
    model: str
    output: list[OutputReasoning | OutputMessage | OutputFunctionCall]
    usage: ResponseUsage | None
    previous_response_id: str | None
    store: bool


class DeletedResponse(_Answer):
    id: str
    object: Literal["response"]
    deleted: bool


class CompletionLogprobs(_Answer):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(_Answer):
    index: int
    text: str
    finish_reason: str
    logprobs: CompletionLogprobs | None


class Completion(_Answer):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class Embedding(_Answer):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(description="The vector, or its little-endian float32 bytes in base64.")
    truncated: bool | None = None


class EmbeddingList(_Answer):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: Usage


class RerankResult(_Answer):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankList(_Answer):
    id: str
    model: str
    results: list[RerankResult]


class Label(_Answer):
    label: str
    score: float


class Ranked(_Answer):
    index: int
    score: float
    text: str | None = None


class Token(_Answer):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


# Statuses a route may answer besides 200: each documented with its family's error body.
ERROR_STATUSES = (400, 401, 404, 413, 429, 499, 500, 501, 503, 504)


def documented(answer: Any, errors: type[BaseModel], stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=``: its answer (and server-sent events where it streams), and its error body."""
    ok: dict[str, Any] = {"model": answer, "description": "The answer."}
    if stream:  # each server-sent event: its data is one JSON chunk (or [DONE])
        event = {"type": "object", "properties": {"data": {"type": "string"}, "event": {"type": "string"}}}
        ok["content"] = {"text/event-stream": {"schema": {**event, "required": ["data"]}}}
    found: dict[int | str, dict[str, Any]] = {200: ok}
    for status in ERROR_STATUSES:
        found[status] = {"model": errors, "description": "Refused or failed; the body says why."}
    return found
