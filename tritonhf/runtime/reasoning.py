"""A reasoning model's answer split into its thinking and its content.

Reasoning models (Qwen3, DeepSeek-R1 distills, QwQ, SmolLM3 ...) write ``<think> ... </think>`` before their answer;
some chat templates open the block in the prompt itself (the answer starts inside it), and a template that takes
``enable_thinking: false`` closes it there (the answer is all content). ``gallery add`` detects the block in the
tokenizer's chat template (``thinks``) and records it in the config; the generation template then splits each
answer: the thinking streams as ``reasoning_output``, the content as ``text_output``, the markers in neither, a
grammar (JSON Schema, tool calls) holds the content only, and tool calls are read from the content.
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import PARAM_REASONING

__all__ = ["PARAM_REASONING", "THINK_END", "THINK_START", "Split", "opened_in_prompt", "split", "thinks"]
THINK_START = "<think>"
THINK_END = "</think>"


def thinks(chat_template: object) -> bool:
    """Whether a chat template writes (or expects) a ``<think>`` block: the model reasons before it answers."""
    text = str(chat_template or "")
    return THINK_START in text and THINK_END in text


def opened_in_prompt(prompt: str) -> bool | None:
    """Where a rendered prompt leaves the answer: True inside a thinking block it opened, False after one it closed
    (thinking turned off), None when the answer decides (it may start with ``<think>``)."""
    tail = prompt.rstrip()
    if tail.endswith(THINK_START):
        return True
    if tail.endswith(THINK_END):
        return False
    return None


def _held(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` may be the start of ``marker`` (held back until they are not)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


@dataclass(frozen=True)
class Split:
    reasoning: str  # the thinking so far, without its markers
    content: str  # the answer after it (leading whitespace dropped)
    thinking: bool  # the answer is still inside (or may yet open) its thinking block


def split(text: str, opened: bool | None, final: bool) -> Split:
    """The answer ``text`` so far, split. ``opened``: ``opened_in_prompt``'s answer. Until ``final``, text that may
    still be part of a marker is in neither part, so what was given out never has to be taken back."""
    body = text
    if opened is None:  # the answer decides: a block it opens first, else it is all content
        start = text.lstrip()
        if start.startswith(THINK_START):
            body, opened = start[len(THINK_START) :], True
        elif THINK_START.startswith(start) and not final:
            return Split("", "", True)  # nothing yet, or the start of "<think>"
        else:
            opened = False
    if not opened:
        return Split("", body.lstrip(), False)
    end = body.find(THINK_END)
    if end < 0:
        cut = 0 if final else _held(body, THINK_END)
        return Split(body[: len(body) - cut], "", True)
    return Split(body[:end], body[end + len(THINK_END) :].lstrip(), False)
