"""Request bodies of the gateway's routes (OpenAI's and TEI's shapes), checked by pydantic.

The bounds are the ones every layer holds (tritonhf/runtime/ranges.py, through ``tritonhf.tasks``): the SDK
checks the same before sending and the templates after receiving, and ``/openapi.json`` publishes them, so a
client generator or a fuzzer reads the real contract. Fields OpenAI has but this server cannot honour
(echo, best_of, several choices of a completion) are bounded to the one value served, so the schema tells a client
generator the truth and a refusal names the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from tritonhf import tasks

Role = Literal["system", "user", "assistant", "tool", "developer"]  # OpenAI's roles (tasks.ROLES); others a 400
# A text a route needs something in: an empty one is refused, so the schema says so too. Stated in the schema only:
# the routes' own checks refuse it, naming the input ("cannot be empty"), and a text that is not valid Unicode ("is
# not valid Unicode"), which pydantic's constrained strings would refuse with a message that names neither.
Text = Annotated[str, Field(json_schema_extra={"minLength": 1})]
Texts = Annotated[list[Text], Field(json_schema_extra={"minItems": 1})]


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # clients send fields we do not use; unsupported ones are refused by name

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """An explicit JSON null means "not given" (clients that serialise every field send them)."""
        return {key: value for key, value in data.items() if value is not None} if isinstance(data, dict) else data


class CalledFunction(_Body):
    name: str = Field(pattern=tasks.TOOL_NAME, description="The function called.")
    arguments: str = Field(default="{}", description="Its arguments, as the JSON text the model wrote.")


class MessageToolCall(_Body):
    id: str = Field(default="", description="The call's id; a 'tool' message answers it by this id.")
    type: Literal["function"] = "function"
    function: CalledFunction


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ImageUrl(_Body):
    url: str = Field(description="data:image/...;base64,... (an http(s) URL only where the operator allows it).")
    detail: Literal["auto", "low", "high"] = Field(default="auto", description="Accepted; the processor sizes it.")


class ImageUrlPart(_Body):
    """An image in a message, for an image-text-to-text model (its limits: GET /v1/models)."""

    type: Literal["image_url"]
    image_url: ImageUrl


class ChatMessage(_Body):
    role: Role = Field(description="Who speaks; 'developer' is rendered as a system message.")
    # a part of another type is read as a dict, and refused by name (serve/images.py)
    content: str | list[TextPart | ImageUrlPart | dict[str, Any]] | None = Field(
        default=None, description="The text, or a list of parts: text, and images for an image-text-to-text model."
    )
    tool_calls: list[MessageToolCall] | None = Field(
        default=None,
        max_length=tasks.MAX_TOOLS,
        description="An assistant's earlier calls (sent back in the conversation).",
    )
    tool_call_id: str | None = Field(default=None, description="A 'tool' message: the call it answers.")


class FunctionTool(_Body):
    name: str = Field(pattern=tasks.TOOL_NAME, description="1-64 letters, digits, '_', '.' or '-'.")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(default=None, description="Its arguments' JSON Schema.")
    strict: bool | None = Field(default=None, description="Accepted; a required call is always held to the schema.")


class ChatTool(_Body):
    type: Literal["function"] = Field(description="Function tools only.")
    function: FunctionTool


class ToolName(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: ToolName


class StreamOptions(_Body):
    include_usage: bool = False


class TextFormat(_Body):
    type: Literal["text"]


class JsonObjectFormat(_Body):
    type: Literal["json_object"]


class JsonSchemaSpec(_Body):
    name: str = Field(default="response", max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema", description="A JSON Schema object.")
    strict: bool | None = Field(default=None, description="Accepted: the answer is always held to the schema.")


class JsonSchemaFormat(_Body):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


class Sampling(_Body):
    """The sampling fields every generation route takes (chat completions, completions, Responses)."""

    temperature: float | None = Field(
        default=None, ge=0, le=tasks.TEMPERATURE_MAX, description="0 (the default) is greedy; higher samples."
    )
    top_p: float | None = Field(
        default=None,
        ge=tasks.TOP_P_MIN,
        le=tasks.TOP_P_MAX,
        description="Nucleus sampling's mass, above 0 (as FP32) up to 1.",
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        le=tasks.SEED_MAX,
        description="Any 64-bit unsigned integer; the same seed, prompt and options give the same text.",
    )
    presence_penalty: float = Field(
        default=0.0,
        ge=-tasks.PENALTY_MAX,
        le=tasks.PENALTY_MAX,
        description="A token already in the answer loses this much logit.",
    )
    frequency_penalty: float = Field(
        default=0.0,
        ge=-tasks.PENALTY_MAX,
        le=tasks.PENALTY_MAX,
        description="A token loses this much logit per time it came.",
    )
    # vLLM's extra sampling fields (llama.cpp's server takes the same names)
    repetition_penalty: float | None = Field(
        default=None,
        ge=tasks.REPETITION_PENALTY_MIN,
        le=tasks.REPETITION_PENALTY_MAX,
        description="Not OpenAI's: a repeated token's logit / this.",
    )
    top_k: int | None = Field(
        default=None, ge=tasks.TOP_K_MIN, le=tasks.INT32_MAX, description="Not OpenAI's: the k likeliest tokens."
    )
    min_p: float | None = Field(
        default=None,
        ge=0,
        le=tasks.MIN_P_MAX,
        description="Not OpenAI's: tokens at least this share of the likeliest's probability.",
    )
    logit_bias: (
        dict[
            Annotated[str, Field(pattern=r"^[0-9]{1,9}$")],
            Annotated[float, Field(ge=-tasks.LOGIT_BIAS_MAX, le=tasks.LOGIT_BIAS_MAX)],
        ]
        | None
    ) = Field(
        default=None,
        max_length=tasks.LOGIT_BIAS_TOKENS,
        description="Token id -> a bias added to its logit (the transformers engine; the OpenVINO engine: a 400).",
    )


class GenerationBody(Sampling):
    model: str = Field(description="A served text-generation model's name (GET /v1/models).")
    max_tokens: int | None = Field(
        default=None,
        ge=tasks.MAX_TOKENS_MIN,
        le=tasks.INT32_MAX,
        description="At most this many new tokens (the model's context bounds it).",
    )
    max_completion_tokens: int | None = Field(
        default=None, ge=tasks.MAX_TOKENS_MIN, le=tasks.INT32_MAX, description="As max_tokens."
    )
    stop: str | list[str] | None = Field(default=None, description="The text ends before the first of these.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(
        default=1,
        ge=1,
        le=tasks.CHOICES_MAX,
        description="Choices, each its own generation (with a seed: seed, seed + 1 ...).",
    )
    response_format: TextFormat | JsonObjectFormat | JsonSchemaFormat | None = Field(
        default=None,
        discriminator="type",
        description="'json_object' or 'json_schema': the answer is held to it by the model's grammar (it always "
        "parses when it finishes; finish_reason 'length' when max_tokens cut it).",
    )
    # not OpenAI's: cut a prompt past the context (its start) instead of a 400
    truncate: bool = Field(default=False, description="Cut a prompt past the context (its start) instead of a 400.")


class ChatBody(GenerationBody):
    messages: Annotated[list[ChatMessage], Field(json_schema_extra={"minItems": 1})]
    tools: list[ChatTool] | None = Field(
        default=None, max_length=tasks.MAX_TOOLS, description="Functions the model may call (OpenAI's function tools)."
    )
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        default=None, description="'auto' (the default with tools), 'none', 'required', or one function by name."
    )
    parallel_tool_calls: bool | None = Field(default=None, description="Accepted: a required call is one call.")
    logprobs: bool | None = Field(default=None, description="Each token's log-probability (choices[].logprobs).")
    top_logprobs: int | None = Field(
        default=None,
        ge=0,
        le=tasks.TOP_LOGPROBS_MAX,
        description="With logprobs: this many alternatives per token (the OpenVINO engine: 0).",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None,
        description="Not OpenAI's (vLLM's): keywords for the model's chat template, as {'enable_thinking': false}.",
    )
    functions: list[Any] | None = Field(default=None, max_length=0, description="Not supported: send 'tools'.")
    function_call: Literal["none"] | None = Field(default=None, description="Not supported: send 'tool_choice'.")


class CompletionBody(GenerationBody):
    prompt: Text | Texts | list[int] | list[list[int]]
    echo: Literal[False] = Field(default=False, description="Not supported.")
    logprobs: int | None = Field(
        default=None,
        ge=0,
        le=tasks.COMPLETION_LOGPROBS_MAX,
        description="Each token's log-probability with this many alternatives (the OpenVINO engine: 0).",
    )
    best_of: int | None = Field(default=None, ge=1, le=1, description="Only 1.")
    suffix: str | None = Field(default=None, max_length=0, description="Not supported.")


class InputText(_Body):
    """A message's text part: the input's ``input_text``, an earlier answer's ``output_text``."""

    type: Literal["input_text", "output_text"]
    text: str


class InputImage(_Body):
    """A message's image part (``input_image``): a data: URL (an http(s) URL only where the operator allows it)."""

    type: Literal["input_image"]
    image_url: str | None = Field(default=None, description="data:image/...;base64,... (or an allowed URL).")
    file_id: str | None = Field(default=None, description="Not served: this server has no files.")
    detail: Literal["auto", "low", "high"] = Field(
        default="auto", description="Accepted; the model's processor sizes it."
    )


class InputMessage(_Body):
    """A message of a Responses input (``type`` may be left out, as OpenAI's easy input messages do)."""

    type: Literal["message"] = "message"
    role: Role = Field(description="Who speaks; 'developer' and 'system' are rendered as a system message.")
    content: str | list[InputText | InputImage] = Field(
        description="The text, or its parts: text, and images for an image-text-to-text model (no files or audio)."
    )
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_Body):
    """An earlier answer's function call, sent back with its output."""

    type: Literal["function_call"]
    call_id: str = Field(description="The id its output answers (function_call_output.call_id).")
    name: str = Field(pattern=tasks.TOOL_NAME)
    arguments: str = Field(default="{}", description="Its arguments, as the JSON text the model wrote.")
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Body):
    """A function call's result."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | list[InputText] = Field(description="The result, as text (or text parts).")
    id: str | None = None
    status: str | None = None


class ReasoningItem(_Body):
    """An earlier answer's reasoning, sent back by clients that keep the whole output: not shown to the model again
    (chat templates drop earlier thinking too)."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None


def _item_type(item: Any) -> str:
    found = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")
    return str(found)


InputItem = Annotated[
    Annotated[InputMessage, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_type),
]


class ResponseFunctionTool(_Body):
    """A function tool of the Responses API (its fields flat, not under 'function')."""

    type: Literal["function"] = Field(description="Function tools only (no hosted tools: web or file search ...).")
    name: str = Field(pattern=tasks.TOOL_NAME, description="1-64 letters, digits, '_', '.' or '-'.")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(default=None, description="Its arguments' JSON Schema.")
    strict: bool | None = Field(default=None, description="Accepted; a required call is always held to the schema.")


class ResponseToolChoice(_Body):
    type: Literal["function"]
    name: str


class ResponseJsonSchema(_Body):
    type: Literal["json_schema"]
    name: str = Field(default="response", max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema", description="A JSON Schema object.")
    strict: bool | None = Field(default=None, description="Accepted: the answer is always held to the schema.")


class ResponseText(_Body):
    format: TextFormat | JsonObjectFormat | ResponseJsonSchema = Field(
        default_factory=lambda: TextFormat(type="text"),
        discriminator="type",
        description="'json_object' or 'json_schema': the answer is held to it by the model's grammar.",
    )
    verbosity: Literal["medium"] | None = Field(default=None, description="Only 'medium': the model's own.")


class Reasoning(_Body):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        default=None, description="A model that thinks: 'none' or 'minimal' answers without thinking, the others think."
    )
    summary: Literal["auto", "concise", "detailed"] | None = Field(
        default=None, description="Accepted: the reasoning item carries the whole reasoning text, not a summary."
    )


class ResponsesBody(Sampling):
    """OpenAI's Responses API request (``POST /v1/responses``)."""

    model: str = Field(description="A served text-generation model's name (GET /v1/models).")
    input: str | Annotated[list[InputItem], Field(json_schema_extra={"minItems": 1})] = Field(
        description="The user's text, or the conversation's items."
    )
    instructions: str | None = Field(default=None, description="A system message put first (not carried over).")
    max_output_tokens: int | None = Field(
        default=None, ge=tasks.MAX_TOKENS_MIN, le=tasks.INT32_MAX, description="At most this many tokens."
    )
    tools: list[ResponseFunctionTool] | None = Field(default=None, max_length=tasks.MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | ResponseToolChoice | None = Field(
        default=None, description="'auto' (the default with tools), 'none', 'required', or one function by name."
    )
    parallel_tool_calls: bool | None = Field(default=None, description="Accepted: a required call is one call.")
    text: ResponseText | None = None
    reasoning: Reasoning | None = None
    stream: bool = False
    store: bool = Field(default=True, description="Keep the response (in memory, for a while) for GET and "
                        "previous_response_id.")  # fmt: skip
    previous_response_id: str | None = Field(default=None, description="Continue a stored response's conversation.")
    truncation: Literal["auto", "disabled"] = Field(
        default="disabled", description="'auto' cuts the conversation's start when it is past the context."
    )
    include: list[Literal["message.output_text.logprobs"]] | None = Field(
        default=None, description="'message.output_text.logprobs': each token's log-probability (with top_logprobs)."
    )
    top_logprobs: int | None = Field(
        default=None,
        ge=0,
        le=tasks.TOP_LOGPROBS_MAX,
        description="Alternatives per token; log-probabilities come with it.",
    )
    stop: str | list[str] | None = Field(default=None, description="Not OpenAI's: the text ends before these.")
    metadata: dict[str, str] | None = Field(default=None, max_length=16, description="Kept with the response.")
    background: Literal[False] = Field(default=False, description="Not supported: each response is answered at once.")
    conversation: None = Field(default=None, description="Not supported: send previous_response_id.")
    prompt: None = Field(default=None, description="Not supported (stored prompt templates): send input.")
    max_tool_calls: int | None = Field(
        default=None, ge=1, description="Accepted: it bounds hosted tools' calls, and this server has none."
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None,
        description="Not OpenAI's (vLLM's): keywords for the model's chat template, as {'enable_thinking': false}.",
    )


class EmbeddingBody(_Body):
    model: str
    input: Text | Texts | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(
        default=None, ge=1, description="Matryoshka models only (/v1/models says): the first N components, normalised."
    )
    truncate: bool = False  # not OpenAI's (which refuses a too-long input): cut it, and say so per item
    # Infinity's: "image" makes every input an image (a data: URI or base64) for an image-text model (CLIP).
    modality: Literal["text", "image"] = "text"
    prompt_name: str | None = Field(
        default=None,
        min_length=1,
        description="Not OpenAI's (TEI's): one of the model's prompts, put before each input.",
    )


class TeiEmbedBody(_Body):
    inputs: Text | Texts
    normalize: bool = True
    truncate: bool = False  # TEI's default: a too-long input is a 413, never cut unasked
    truncation_direction: Literal["Left", "Right", "left", "right"] = Field(
        default="Right", description="Only Right: a text past the window keeps its start."
    )
    prompt_name: str | None = Field(
        default=None, min_length=1, description="One of the model's prompts, put before each input (default: its own)."
    )
    model: str | None = None


class TeiPredictBody(_Body):
    inputs: Text | Texts | list[list[Text]]  # TEI: a text, texts, or [text, text_pair] pairs
    raw_scores: bool = False
    truncate: bool = False
    model: str | None = None


class TeiRerankBody(_Body):
    query: Text
    texts: Texts
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = False
    model: str | None = None


class SimilarityInputs(_Body):
    source_sentence: Text
    sentences: Texts


class TeiSimilarityBody(_Body):
    """TEI's /similarity (and Hugging Face's sentence-similarity task): cosines of the sentences to the source."""

    inputs: SimilarityInputs
    truncate: bool = False
    model: str | None = None


class TeiDecodeBody(_Body):
    """TEI's /decode: token ids (one list, or a list per text) back to text."""

    ids: list[int] | list[list[int]] = Field(min_length=1)
    skip_special_tokens: bool = True
    model: str | None = None


class TeiTokenizeBody(_Body):
    inputs: Text | Texts
    add_special_tokens: bool = True
    model: str | None = None


class RerankDocument(_Body):
    text: Text


class RerankBody(_Body):
    """Cohere's and Jina's rerank body (``/v1/rerank``, ``/v2/rerank``)."""

    model: str = Field(description="A served text-ranking model's name.")
    query: Text = Field(description="What the documents are ranked against.")
    documents: list[Text | RerankDocument] = Field(min_length=1, description="Strings or {'text': ...} objects.")
    top_n: int | None = Field(default=None, ge=1, description="Keep the best n (all when not given).")
    return_documents: bool = Field(default=True, description="Each result carries its document's text.")
    truncate: bool = Field(default=False, description="Not Cohere's: cut a document past the window, not a 400.")
