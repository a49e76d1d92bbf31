"""Generation calls, free of I/O: the template's tensors from a prompt and ``Sampling``
options, chat messages as the JSON the template reads, and what a stream has delivered."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tritonhf import tasks
from tritonhf._wire import codecs
from tritonhf.errors import (
    ClientError,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
)
from tritonhf.sdk._policy import Tensors
from tritonhf.sdk.media import encode_image
from tritonhf.sdk.results import (
    ChatResult,
    TokenLogprob,
    ToolCall,
    Usage,
)
from tritonhf.sdk.sampling import OPTIONS as SAMPLING_OPTIONS
from tritonhf.tasks import IMAGE_CHAT as IMAGE_CHAT  # the SDK resolves an image chat to its models
from tritonhf.tasks import seed_to_wire

CHAT_TASKS: tuple[str, ...] = (
    "text-generation",
    "text2text-generation",
    IMAGE_CHAT,
)  # what chat without images may name


def generation_inputs(
    text: str, chat: bool, sampling: Mapping[str, Any], constraint: Constraint | None = None
) -> Tensors:
    """The text-generation template's tensors (Triton's generate extension names), one row.

    ``sampling`` holds the ``Sampling`` options; an unknown one is refused by name (a typo such
    as ``max_token`` would otherwise be dropped silently). ``truncate`` lets the server cut a prompt
    past the model's context (its start goes; the usage says how many tokens); without it such
    a prompt is a ``ContextLengthError``.
    """
    unknown = sorted(set(sampling) - set(SAMPLING_OPTIONS))
    if unknown:
        raise InvalidInputError(
            f"unknown generation option(s) {', '.join(unknown)}; the options are {', '.join(SAMPLING_OPTIONS)}."
        )
    inputs = {"text_input": codecs.bytes_column([text])}
    for key, (datatype, inside, said) in RANGES.items():
        value = sampling.get(key)
        if value is None:
            continue
        check_option(key, value, datatype, inside, said)
        inputs[key] = codecs.column(seed_to_wire(value) if key == "seed" else value, datatype, 1)
    if sampling.get("logit_bias"):
        inputs["logit_bias"] = codecs.bytes_column([json.dumps(_logit_bias(sampling["logit_bias"]))])
    stop = sampling.get("stop")
    if stop:
        stops, _ = codecs.text_list(stop, "stop")
        inputs["stop"] = codecs.bytes_matrix([stops])
    if chat:
        inputs["chat"] = codecs.column(True, "BOOL", 1)
    kwargs = sampling.get("chat_template_kwargs")
    if kwargs:
        if not chat:
            raise InvalidInputError("chat_template_kwargs is for chat (the chat template renders the messages).")
        if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
            raise InvalidInputError(f"chat_template_kwargs must be a dict of names to values, not {kwargs!r:.80}.")
        try:
            inputs["chat_template_kwargs"] = codecs.bytes_column([json.dumps(dict(kwargs))])
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"chat_template_kwargs must be JSON values ({error}).") from error
    truncate = sampling.get("truncate", False)
    if not isinstance(truncate, bool):
        raise InvalidInputError(f"truncate must be True or False, not {truncate!r}.")
    if truncate:
        inputs["truncate"] = codecs.column(True, "BOOL", 1)
    if constraint is not None:
        for key, value in (("json_schema", constraint.schema), ("tools", constraint.tools),
                           ("tool_choice", constraint.tool_choice)):  # fmt: skip
            if value is not None:
                inputs[key] = codecs.bytes_column([value])
    return inputs


class SchemaModel(Protocol):
    """A class that states its JSON Schema and parses JSON text into an instance (a pydantic model)."""

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]: ...

    @classmethod
    def model_validate_json(cls, json_data: str) -> Any: ...


# What ``response_format`` takes: a pydantic model class, a JSON Schema dict, or OpenAI's own shapes of it.
ResponseFormat = type[SchemaModel] | Mapping[str, Any]
ToolSpecs = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Constraint:
    """What a chat asks beyond free text, as the template's optional inputs take it (JSON text), and how the answer
    is parsed back."""

    schema: str | None = None
    tools: str | None = None
    tool_choice: str | None = None
    parse: Callable[[str], Any] = json.loads


def constraint(
    response_format: ResponseFormat | None, tools: ToolSpecs | None = None, tool_choice: str | None = None
) -> Constraint | None:
    """The ``Constraint`` of a call's ``response_format``, ``tools`` and ``tool_choice`` (None: a free answer).

    ``response_format``: a pydantic model class (its schema; the answer parsed into an instance), a JSON Schema
    dict, ``{"type": "json_object"}`` (any JSON object), or ``{"type": "json_schema", "json_schema": {"schema":
    ...}}`` as OpenAI's API takes it. The template checks the tools and compiles the schema; a schema its grammar
    compiler refuses is an ``InvalidInputError`` naming the construct."""
    if response_format is None and tools is None and tool_choice is None:
        return None
    schema: str | None = None
    parse: Callable[[str], Any] = json.loads
    if isinstance(response_format, type) and hasattr(response_format, "model_json_schema"):
        schema, parse = json.dumps(response_format.model_json_schema()), response_format.model_validate_json
    elif isinstance(response_format, Mapping):
        kind = response_format.get("type")
        if kind == "json_object":
            schema = '{"type": "object"}'
        elif kind == "json_schema" and isinstance(response_format.get("json_schema"), Mapping):
            schema = json.dumps(response_format["json_schema"].get("schema") or {"type": "object"})
        elif kind == "text":
            schema = None
        else:
            schema = json.dumps(dict(response_format))
    elif response_format is not None:
        raise InvalidInputError(
            "response_format must be a pydantic model class or a JSON Schema dict, "
            f"not {type(response_format).__name__}."
        )
    if tool_choice is not None and not isinstance(tool_choice, str):
        raise InvalidInputError(
            f"tool_choice must be 'auto', 'none', 'required' or a tool's name, not {tool_choice!r}."
        )
    if tools is not None and (isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence)):
        raise InvalidInputError('tools must be a list of {"type": "function", "function": {...}} dicts.')
    offered = json.dumps([dict(tool) for tool in tools]) if tools else None
    return Constraint(schema, offered, tool_choice, parse)


# Each sampling option's tensor type and range (tritonhf/runtime/ranges.py states them; the template checks the same).
RANGES: dict[str, tuple[str, Callable[[Any], bool], str]] = {
    "max_tokens": (
        "INT32",
        lambda v: tasks.MAX_TOKENS_MIN <= v <= tasks.INT32_MAX,
        f"an int from {tasks.MAX_TOKENS_MIN} to {tasks.INT32_MAX}",
    ),
    "temperature": (
        "FP32",
        lambda v: 0 <= v <= tasks.TEMPERATURE_MAX,
        f"a number from 0 (greedy) to {tasks.TEMPERATURE_MAX:g}",
    ),
    "top_p": ("FP32", lambda v: 0 < v <= tasks.TOP_P_MAX, f"a number above 0 and at most {tasks.TOP_P_MAX:g}"),
    "seed": ("INT64", lambda v: 0 <= v <= tasks.SEED_MAX, "an int from 0 to 2**64 - 1"),
    "logprobs": (
        "INT32",
        lambda v: 0 <= v <= tasks.TOP_LOGPROBS_MAX,
        f"an int from 0 to {tasks.TOP_LOGPROBS_MAX} (alternatives)",
    ),
    "presence_penalty": (
        "FP32",
        lambda v: -tasks.PENALTY_MAX <= v <= tasks.PENALTY_MAX,
        f"a number from -{tasks.PENALTY_MAX:g} to {tasks.PENALTY_MAX:g}",
    ),
    "frequency_penalty": (
        "FP32",
        lambda v: -tasks.PENALTY_MAX <= v <= tasks.PENALTY_MAX,
        f"a number from -{tasks.PENALTY_MAX:g} to {tasks.PENALTY_MAX:g}",
    ),
    "repetition_penalty": (
        "FP32",
        lambda v: tasks.REPETITION_PENALTY_MIN <= v <= tasks.REPETITION_PENALTY_MAX,
        f"a number from {tasks.REPETITION_PENALTY_MIN:g} to {tasks.REPETITION_PENALTY_MAX:g} (1: none)",
    ),
    "top_k": (
        "INT32",
        lambda v: tasks.TOP_K_MIN <= v <= tasks.INT32_MAX,
        f"an int, {tasks.TOP_K_MIN} or 0 for all tokens",
    ),
    "min_p": ("FP32", lambda v: 0 <= v <= tasks.MIN_P_MAX, f"a number from 0 to {tasks.MIN_P_MAX:g}"),
}


def _logit_bias(given: Any) -> dict[str, float]:
    """OpenAI's logit_bias checked before sending: token ids (ints, or their decimal strings) to biases in range."""
    bound = tasks.LOGIT_BIAS_MAX
    said = f"a mapping of at most {tasks.LOGIT_BIAS_TOKENS} token ids to numbers from -{bound:g} to {bound:g}"
    if not isinstance(given, Mapping) or len(given) > tasks.LOGIT_BIAS_TOKENS:
        raise InvalidInputError(f"logit_bias must be {said}, not {given!r:.80}.")
    found: dict[str, float] = {}
    for token, bias in given.items():
        numeric = isinstance(bias, (int, float)) and not isinstance(bias, bool)
        if not (isinstance(token, int) or (isinstance(token, str) and token.isdigit())) or not numeric:
            raise InvalidInputError(f"logit_bias must be {said}; {token!r}: {bias!r} is not.")
        if not -tasks.LOGIT_BIAS_MAX <= bias <= tasks.LOGIT_BIAS_MAX:
            raise InvalidInputError(f"logit_bias must be {said}; {token!r}: {bias!r} is not.")
        found[str(int(token))] = float(bias)
    return found


def check_option(key: str, value: Any, datatype: str, inside: Callable[[Any], bool], said: str) -> None:
    """An ``InvalidInputError`` naming ``key`` unless ``value`` is a number of the right kind within its range."""
    integral = datatype.startswith("INT")
    kind_ok = isinstance(value, int) if integral else isinstance(value, (int, float))
    if isinstance(value, bool) or not kind_ok:
        raise InvalidInputError(f"{key} must be {said}, not {value!r}.")
    with np.errstate(over="ignore"):  # a float is checked as the FP32 it travels as: 1e-50 reaches a model as 0
        sent = value if integral else float(np.float32(value))
    if not inside(sent):
        raise InvalidInputError(f"{key} must be {said}, not {value!r}.")


def chat_text(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[bytes]]:
    """Chat messages as the JSON the template reads with chat=true, and their images in order (an image chat).

    A message's content is a string, or a list of parts: ``{"type": "text", "text": ...}`` and ``{"type": "image",
    "image": ...}`` (transformers' chat shape; the image as bytes of a file, a path, a PIL image or a uint8 array).
    Each image part goes to the template as ``{"type": "image"}``, its bytes in the returned list."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError('messages must be a list of {"role": ..., "content": ...} dicts.')
    sent: list[dict[str, Any]] = []
    images: list[bytes] = []
    for index, message in enumerate(messages):
        calls = isinstance(message, Mapping) and message.get("tool_calls") and message.get("content") is None
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(message, Mapping) or not (calls or isinstance(content, (str, list))):
            raise InvalidInputError(
                f'messages[{index}] must be a {{"role": ..., "content": str or list of parts}} dict (an '
                'assistant\'s may have "tool_calls" instead of content).'
            )
        found = dict(message)
        if isinstance(content, list):
            found["content"] = _parts(content, f"messages[{index}].content", images)
        elif isinstance(content, str):
            codecs.check_unicode(content, f"messages[{index}].content")
        sent.append(found)
    return json.dumps(sent), images


def _parts(parts: list[Any], where: str, images: list[bytes]) -> list[dict[str, str]]:
    """A message's content parts as the template reads them; each image's bytes appended to ``images``."""
    found: list[dict[str, str]] = []
    for number, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            codecs.check_unicode(part["text"], f"{where}[{number}].text")
            found.append({"type": "text", "text": part["text"]})
        elif kind == "image" and part.get("image") is not None:
            images.append(encode_image(part["image"], f"{where}[{number}].image"))
            found.append({"type": "image"})
        else:
            raise InvalidInputError(
                f'{where}[{number}] must be {{"type": "text", "text": str}} or {{"type": "image", "image": bytes, '
                "a path, a PIL image or a uint8 array}."
            )
    return found


def image_column(images: Sequence[bytes]) -> np.ndarray[Any, Any]:
    """A chat's images as the template's ``images`` input: one row of encoded files."""
    return np.array([list(images)], dtype=np.object_).reshape(1, len(images))


def scalar(value: Any) -> Any:
    """One value of a streamed response (an array over gRPC, a JSON value over HTTP) as a Python value."""
    array = np.asarray(value)
    item = array.reshape(-1)[0] if array.size else None
    if isinstance(item, bytes):
        return item.decode("utf-8", "replace")
    return item.item() if isinstance(item, np.generic) else item


@dataclass
class StreamProgress:
    """What a generation stream has delivered so far: chunks, and at its end the usage and why it ended."""

    chunks: int = 0
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    content: str | None = None  # with tool calls: the text outside them
    logprobs: list[TokenLogprob] = field(default_factory=list)  # with logprobs asked: each token's, so far
    reasoning: str = ""  # a reasoning model's thinking, so far (streamed before its text)

    def read(self, response: Mapping[str, Any]) -> str | None:
        """The text of one streamed response: "" when it brought only thinking (``reasoning`` grew), None when it
        brought neither; records usage and finish reason when present."""
        text = scalar(response["text_output"]) if "text_output" in response else ""
        thought = str(scalar(response["reasoning_output"]) or "") if "reasoning_output" in response else ""
        if "finish_reason" in response:
            self.finish_reason = str(scalar(response["finish_reason"]) or "") or None
        if "prompt_tokens" in response and "completion_tokens" in response:
            cut = int(scalar(response["prompt_tokens_cut"])) if "prompt_tokens_cut" in response else 0
            thinking = int(scalar(response["reasoning_tokens"])) if "reasoning_tokens" in response else 0
            self.usage = Usage(
                int(scalar(response["prompt_tokens"])), int(scalar(response["completion_tokens"])), cut, thinking
            )
        if "logprobs" in response:
            for token, value, others in json.loads(str(scalar(response["logprobs"]) or "[]")):
                top = tuple((str(other), float(found)) for other, found in others)
                self.logprobs.append(TokenLogprob(str(token), float(value), top))
        if "tool_calls" in response:
            found = json.loads(str(scalar(response["tool_calls"]) or "[]"))
            self.tool_calls = tuple(ToolCall(str(c["id"]), str(c["name"]), str(c["arguments"])) for c in found)
            self.content = str(scalar(response["content"]) or "") if "content" in response else ""
        text = str(text or "")
        self.reasoning += thought
        if text or thought:
            self.chunks += 1
            return text
        return None

    def result(self, text: str, constraint: Constraint) -> ChatResult[Any]:
        """The whole answer of a constrained chat: its text (outside the calls), parsed, or its calls."""
        if self.tool_calls:
            return ChatResult(self.content or "", None, self.tool_calls, self.finish_reason, self.usage,
                              self.reasoning)  # fmt: skip
        parsed = None
        if constraint.schema is not None and self.finish_reason != "length":
            try:
                parsed = constraint.parse(text)
            except ValueError as error:  # the grammar held it: a parse failure is the server's, not the caller's
                raise InferenceError(f"the answer did not parse against its schema ({error}): {text[:200]!r}") from (
                    error
                )
        return ChatResult(text, parsed, (), self.finish_reason, self.usage, self.reasoning)

    def stream_error(self, error: ClientError, model: str) -> ClientError:
        return stream_error(self.chunks, error, model)


def stream_error(chunks: int, error: ClientError, model: str) -> ClientError:
    """An error inside a stream: after the first chunk it is the model failing, whatever its text."""
    if chunks and isinstance(error, (InvalidInputError, ModelNotFoundError)):
        return InferenceError(f"Model '{model}' failed after {chunks} chunk(s): {error.message}", model)
    return error
