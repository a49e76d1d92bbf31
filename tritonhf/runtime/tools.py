"""Tool calling for the text-generation template: the tools a request offers, how the model is told of them, the
grammar that holds a required call to their schemas, and the calls read back from the answer.

Pure Python (json and re only): the template runs it in the stub, the gateway reads ``safe_to_stream`` to stream an
answer that may turn into a call, and the unit tests run it without a server.

The contract is OpenAI's: ``tools`` is a list of ``{"type": "function", "function": {"name", "description",
"parameters"}}``; ``tool_choice`` is ``"none"``, ``"auto"``, ``"required"`` or one function's name. The calls come
back as ``{"id", "name", "arguments"}`` with the arguments as a JSON string, as OpenAI sends them.

How the model is told (vLLM's and llama.cpp's order): a chat template that takes ``tools`` renders them itself (and
the assistant's earlier calls, in Hugging Face's message shape). Otherwise ``GENERIC_PROMPT`` goes into the system
message: the tools as JSON lines inside ``<tools>`` and the instruction to answer a call as ``<tool_call>{"name",
"arguments"}</tool_call>`` (the Hermes format that Qwen, SmolLM2 and many fine-tunes were trained on).

How a call is read (``parse_calls``): ``<tool_call>...</tool_call>`` blocks (one object or a list each), or an answer
that is nothing but a call object or a list of them (Llama 3's JSON format, and what the grammar of a required call
produces). With ``tool_choice`` "required" or a named function the answer is constrained by ``call_schema``'s grammar,
so a finished answer always parses; with "auto" the model chooses, and a small model seldom calls.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .common import BadRequest

MAX_SCHEMA_BYTES = 64 * 1024  # a response_format schema or a request's tools, as JSON text
MAX_TOOLS = 128
ANY_OBJECT = '{"type": "object"}'  # response_format {"type": "json_object"}: any JSON object
OPEN, CLOSE = "<tool_call>", "</tool_call>"
TOOL_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"  # OpenAI's rule for a function's name
NAME = re.compile(TOOL_NAME)
GENERIC_PROMPT = (
    "You may call one or more functions to answer. The functions, as JSON schemas:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, answer only with one line per call of the form\n"
    '<tool_call>{{"name": <function name>, "arguments": <arguments as a JSON object>}}</tool_call>\n'
    "and nothing else. If no function is needed, answer normally."
)


def load_json(text: str, where: str, fix: str) -> Any:
    """``text`` parsed, within ``MAX_SCHEMA_BYTES``; a BadRequest naming ``where`` otherwise."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SCHEMA_BYTES:
        raise BadRequest(f"input '{where}' is over {MAX_SCHEMA_BYTES // 1024} KiB of JSON: {fix}.")
    try:
        return json.loads(text)
    except ValueError as error:
        raise BadRequest(f"input '{where}' is not JSON ({error}): {fix}.") from error


def check_schema(text: str, where: str = "json_schema") -> str:
    """A response format's JSON Schema: an object, within the size bound (the grammar compiler judges the rest)."""
    schema = load_json(text, where, "send a JSON Schema object")
    if not isinstance(schema, dict):
        raise BadRequest(f"input '{where}' must be a JSON Schema object, not {type(schema).__name__}.")
    return text


def check_tools(text: str) -> list[dict[str, Any]]:
    """The request's tools as OpenAI defines them; a BadRequest naming the first unusable one."""
    tools = load_json(text, "tools", "send a list of function tools")
    if not isinstance(tools, list) or not tools:
        raise BadRequest('input \'tools\' must be a non-empty JSON list of {"type": "function", "function": ...}.')
    if len(tools) > MAX_TOOLS:
        raise BadRequest(f"input 'tools' holds {len(tools)} tools; at most {MAX_TOOLS} are taken.")
    names = set()
    for index, tool in enumerate(tools):
        where = f"input 'tools': tools[{index}]"  # "input '": how the SDK knows a refusal from a failure
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise BadRequest(f'{where} must be {{"type": "function", "function": {{...}}}} (function tools only).')
        function = tool.get("function")
        if not isinstance(function, dict):
            raise BadRequest(f"{where}.function must be an object with 'name' and 'parameters'.")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise BadRequest(f"{where}.function.name must be 1-64 letters, digits, '_', '.' or '-', not {name!r}.")
        if name in names:
            raise BadRequest(f"{where}.function.name {name!r} is given twice; each tool needs its own name.")
        names.add(name)
        parameters = function.get("parameters", {"type": "object"})
        if not isinstance(parameters, dict):
            raise BadRequest(f"{where}.function.parameters must be a JSON Schema object.")
    return tools


def tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(tool["function"]["name"]) for tool in tools]


def resolve_choice(choice: str | None, tools: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """(mode, names): "none", "auto" or "required", and the functions a required call may name."""
    names = tool_names(tools)
    if choice in (None, "", "auto"):
        return "auto", names
    if choice in ("none", "required"):
        return choice, names
    if choice not in names:
        raise BadRequest(
            f"input 'tool_choice' names {choice!r}, which is not among the tools ({', '.join(names)}); "
            "send 'auto', 'none', 'required' or one of their names."
        )
    return "required", [choice]


@dataclass(frozen=True)
class Plan:
    """What a request's json_schema, tools and tool_choice ask: the tools to render into the prompt, the schema its
    answer is held to (``where``: the input it came from), and the functions a call may name (None: no calls)."""

    tools: list[dict[str, Any]] | None = None
    schema: str | None = None
    where: str = "json_schema"
    names: list[str] | None = None


def plan(schema: str | None, offered: str | None, choice: str | None, chat: bool) -> Plan:
    """The ``Plan`` of a request's optional inputs; a BadRequest naming the input that cannot be honoured."""
    if not offered:
        if choice not in (None, "", "none", "auto"):
            raise BadRequest(f"input 'tool_choice' is {choice!r} but no tools were sent: send 'tools' too.")
        return Plan(schema=check_schema(schema)) if schema else Plan()
    if not chat:
        raise BadRequest("input 'tools' needs chat=true (tools are offered in a conversation).")
    tools = check_tools(offered)
    mode, names = resolve_choice(choice, tools)
    if mode == "none":  # the model answers in words: the tools are not rendered
        return Plan(schema=check_schema(schema)) if schema else Plan()
    if schema:
        raise BadRequest(
            "input 'json_schema' with 'tools': an answer held to a schema cannot also call a tool; send one "
            "(or tool_choice 'none')."
        )
    if mode == "required":  # a call is due: its grammar holds the answer to one call of these tools
        return Plan(tools, call_schema(tools, names), "tools", names)
    return Plan(tools, None, "tools", names)


def call_schema(tools: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    """The JSON Schema of one call to one of ``names``: its name, and arguments held to that tool's parameters."""
    options = []
    for tool in tools:
        function = tool["function"]
        if function["name"] in names:
            options.append({
                "type": "object",
                "properties": {"name": {"const": function["name"]},
                               "arguments": function.get("parameters") or {"type": "object"}},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            })  # fmt: skip
    return json.dumps(options[0] if len(options) == 1 else {"anyOf": options})


def _arguments_object(arguments: Any) -> Any:
    """OpenAI sends a call's arguments as a JSON string; chat templates expect the object."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def template_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, template_takes_tools: bool
) -> list[dict[str, Any]]:
    """The conversation as the chat template reads it. Earlier calls and tool results are shaped for a template
    that takes tools (Hugging Face's convention), else written as text in the generic format; the generic prompt
    joins the system message when ``tools`` are offered to a template that does not take them."""
    shaped = []
    for message in messages:
        message = dict(message)
        calls = message.pop("tool_calls", None) or []
        if template_takes_tools:
            if calls:
                message["tool_calls"] = [
                    {"type": "function", "id": call.get("id"), "function": {
                        "name": call["function"]["name"],
                        "arguments": _arguments_object(call["function"].get("arguments", {}))}}
                    for call in calls
                ]  # fmt: skip
        else:
            if calls:
                text = "\n".join(
                    OPEN + json.dumps({"name": call["function"]["name"],
                                       "arguments": _arguments_object(call["function"].get("arguments", {}))}) + CLOSE
                    for call in calls
                )  # fmt: skip
                message["content"] = ((message.get("content") or "") + "\n" + text).strip()
            if message.get("role") == "tool":  # as a user turn: a template without tools may know no "tool" role
                result = message.get("content") or ""
                message = {"role": "user", "content": f"<tool_response>\n{result}\n</tool_response>"}
            message.pop("tool_call_id", None)
        message["content"] = message.get("content") or ""
        shaped.append(message)
    if tools and not template_takes_tools:
        prompt = GENERIC_PROMPT.format(tools="\n".join(json.dumps(tool["function"]) for tool in tools))
        if shaped and shaped[0].get("role") == "system":
            shaped[0] = {**shaped[0], "content": f"{shaped[0]['content']}\n\n{prompt}".strip()}
        else:
            shaped.insert(0, {"role": "system", "content": prompt})
    return shaped


def _call(found: Any, names: Sequence[str]) -> dict[str, str] | None:
    if not isinstance(found, dict) or found.get("name") not in names:
        return None
    arguments = found.get("arguments", found.get("parameters", {}))
    if isinstance(arguments, str):  # already a JSON string
        arguments = _arguments_object(arguments)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "name": str(found["name"]), "arguments": json.dumps(arguments)}


def _calls(value: Any, names: Sequence[str]) -> list[dict[str, str]] | None:
    """Calls from one parsed JSON value (an object or a list of them); None unless every item is a call."""
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, names) for item in items]
    return [call for call in calls if call is not None] if items and all(calls) else None


def parse_calls(text: str, names: Sequence[str]) -> tuple[str, list[dict[str, str]]]:
    """(content, calls) of an answer: the text outside the calls, and each call to a known function."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            calls = _calls(json.loads(stripped), names)
        except ValueError:
            calls = None
        if calls:
            return "", calls
    calls, content, position = [], [], 0
    for match in re.finditer(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", text, re.S):
        try:
            found = _calls(json.loads(match.group(1).strip()), names)
        except ValueError:
            found = None
        if not found:
            continue
        content.append(text[position : match.start()])
        calls.extend(found)
        position = match.end()
    if not calls:
        return text, []
    content.append(text[position:])
    return "".join(content).strip(), calls


def safe_to_stream(text: str) -> int:
    """How much of an answer with tools offered may be streamed as content now: not what may be (the start of) a
    call. An answer starting with '{' or '[' may be a call as a whole, so it waits for its end."""
    if text.lstrip().startswith(("{", "[")):
        return 0
    found = text.find(OPEN)
    if found >= 0:
        return found
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if text.endswith(OPEN[:size]):
            return len(text) - size
    return len(text)
