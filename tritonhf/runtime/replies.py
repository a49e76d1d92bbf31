"""Answers: error and busy responses, tensors, ranked labels, and ``TextReply`` for streamed
text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .common import pb_utils
from .reasoning import split


def error_response(message: str, invalid_input: bool = True) -> Any:
    """An error answer for one request; INVALID_ARG (HTTP 400) unless the model itself failed."""
    pb = pb_utils()
    code = pb.TritonError.INVALID_ARG if invalid_input else pb.TritonError.INTERNAL
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, code))


def busy_response(waiting: int) -> Any:
    """UNAVAILABLE (HTTP 503, gRPC UNAVAILABLE) for a request beyond a template's own queue bound, in the
    words Triton uses for its queue ("exceeds maximum queue size"), so clients treat both alike."""
    pb = pb_utils()
    message = (
        f"Exceeds maximum queue size: {waiting} requests are already waiting (parameter max_waiting). "
        "The model is busy: retry shortly."
    )
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, pb.TritonError.UNAVAILABLE))


def string_tensor(name: str, values: Sequence[Any]) -> Any:
    """A BYTES output: an object array of UTF-8 bytes, one row per text."""
    array = np.array([[str(value).encode("utf-8")] for value in values], dtype=np.object_)
    return pb_utils().Tensor(name, array.reshape(len(values), 1))


def string_matrix(name: str, rows: Sequence[Sequence[str]]) -> Any:
    """A BYTES output [rows, k]; shorter rows are padded with empty strings."""
    width = max((len(row) for row in rows), default=0)
    array = np.array(
        [[value.encode("utf-8") for value in row] + [b""] * (width - len(row)) for row in rows], dtype=np.object_
    )
    return pb_utils().Tensor(name, array.reshape(len(rows), width))


def float_tensor(name: str, values: Any) -> Any:
    return pb_utils().Tensor(name, np.ascontiguousarray(values, dtype=np.float32))


def int_tensor(name: str, values: Sequence[int]) -> Any:
    return pb_utils().Tensor(name, np.array(values, dtype=np.int32).reshape(len(values), 1))


def bool_tensor(name: str, values: Sequence[bool]) -> Any:
    return pb_utils().Tensor(name, np.array(values, dtype=np.bool_).reshape(len(values), 1))


def ranked_labels(scores: np.ndarray[Any, Any], labels: Sequence[str], top_k: int) -> tuple[list[str], list[float]]:
    """One row's labels best first, and their scores, the ``top_k`` best."""
    order = np.argsort(-scores, kind="stable")[:top_k]
    return [labels[index] for index in order], [float(scores[index]) for index in order]


def ranked_labels_outputs(ranked: Sequence[tuple[list[str], list[float]]]) -> list[Any]:
    """LABEL, SCORE (the best label per row) and LABELS, SCORES (best first; padded with "" and 0)."""
    width = max((len(labels) for labels, _ in ranked), default=0)
    scores = np.zeros((len(ranked), width), dtype=np.float32)
    for row, (_, values) in enumerate(ranked):
        scores[row, : len(values)] = values
    return [
        string_tensor("LABEL", [labels[0] for labels, _ in ranked]),
        float_tensor("SCORE", scores[:, :1]),
        string_matrix("LABELS", [labels for labels, _ in ranked]),
        float_tensor("SCORES", scores),
    ]


# ---------------------------------------------------------------------------- streamed text answers


class TextReply:
    """One streamed text answer (decoupled models): tokens in, text chunks out.

    Decodes only the new tokens' text (a short window, holding back an incomplete UTF-8
    character), cuts at a stop string and holds back text that may be the start of one, and
    ends with the usage (finish_reason, prompt and completion tokens) and the final flag.
    ``sender`` None (a warm-up) sends nothing. A chunk the stub's ``send`` refuses (it raises, e.g.
    on a closed sender) ends this answer, finish reason ``error``, and nothing else: the other
    streams of the step go on. (A client that leaves is not that: Triton 2.51 accepts sends to a
    cancelled request; the template sees ``is_cancelled`` at its next step.)
    """

    def __init__(
        self,
        sender: Any,
        tokenizer: Any,
        stops: Sequence[str],
        prompt_tokens: int,
        prompt_tokens_cut: int = 0,
        calls: Callable[[str], tuple[str, list[dict[str, str]]]] | None = None,
        reasons: bool = False,
        opened: bool | None = None,
    ) -> None:
        """``calls``: with tools offered, reads the finished text's tool calls (``tools.parse_calls``); the last
        response then carries them (``tool_calls``, JSON) and the text outside them (``content``). ``reasons``: a
        reasoning model's chat answer, its thinking streamed apart (``reasoning_output``) and the calls read from
        the rest; ``opened``: where its prompt left it (``reasoning.opened_in_prompt``)."""
        self.sender, self.tokenizer, self.stops, self.calls = sender, tokenizer, list(stops), calls
        self.reasons, self.opened = reasons, opened
        self.sent_reasoning = self.sent_content = 0  # characters of each part already sent (reasons only)
        self.reasoning_tokens = 0  # of the tokens, those of the thinking (counted by the template)
        self.prompt_tokens, self.prompt_tokens_cut = prompt_tokens, prompt_tokens_cut
        self.tokens: list[int] = []
        self.text = ""  # the decoded text so far
        self.sent = 0  # characters of it already sent
        self.prefix_offset = self.read_offset = 0
        self.finish_reason: str | None = None
        self.logprobs: list[list[Any]] = []  # [token, logprob, [[alternative, logprob], ...]] not sent yet

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def _decode(self, start: int, stop: int | None = None) -> str:
        return str(self.tokenizer.decode(self.tokens[start:stop], skip_special_tokens=True))

    def add(self, token: int, logprob: tuple[float, Sequence[tuple[int, float]]] | None = None) -> None:
        """One more generated token: send what is safe to send; finish at a stop string.

        ``logprob``: (its log-probability, [(alternative id, log-probability), ...]) when the request asked; each
        response carries the entries of the tokens added since the last one (``logprobs``, JSON), with the token as
        its own text, as OpenAI's ``logprobs.content`` has it."""
        self.tokens.append(token)
        if logprob is not None:
            value, alternatives = logprob
            others = [[self._token(other), float(found)] for other, found in alternatives]
            self.logprobs.append([self._token(token), float(value), others])
        before = self._decode(self.prefix_offset, self.read_offset)
        after = self._decode(self.prefix_offset)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
            self.text += after[len(before) :]
        for stop in self.stops:
            found = self.text.find(stop, max(0, self.sent - len(stop)))
            if found >= 0:
                self.text = self.text[:found]
                self.prefix_offset = self.read_offset = len(self.tokens)  # nothing left to flush
                self.finish("stop")
                return
        safe = len(self.text)  # hold back text that may be the start of a stop string
        for stop in self.stops:
            for size in range(min(len(stop) - 1, safe), 0, -1):
                if self.text.endswith(stop[:size]):
                    safe = min(safe, len(self.text) - size)
                    break
        self._send(safe)

    def _token(self, token: int) -> str:
        return str(self.tokenizer.decode([token], skip_special_tokens=False))

    def _send(self, end: int, extra: Sequence[Any] = (), final: bool = False) -> None:
        parts = {"text_output": self.text[self.sent : end]}
        if self.reasons:  # the thinking and the content, each from where it was sent to
            found = split(self.text[:end], self.opened, final)
            parts = {"text_output": found.content[self.sent_content :]}
            if len(found.reasoning) > self.sent_reasoning:
                parts["reasoning_output"] = found.reasoning[self.sent_reasoning :]
            self.sent_reasoning, self.sent_content = len(found.reasoning), len(found.content)
        if (any(parts.values()) or extra) and self.sender is not None:
            pb = pb_utils()
            if self.logprobs:  # the entries go with the text they made (held-back text: with the next response)
                extra = [*extra, string_tensor("logprobs", [json.dumps(self.logprobs)])]
                self.logprobs = []
            tensors = [string_tensor(name, [chunk]) for name, chunk in parts.items()]
            try:
                self.sender.send(pb.InferenceResponse(output_tensors=[*tensors, *extra]))
            except Exception:  # refused by the stub: nothing more can reach this caller, this answer ends
                self.sender, self.finish_reason = None, "error"
                return
        self.sent = max(self.sent, end)

    @property
    def content(self) -> str:
        """The answer's text without its thinking (all of it for a model that does not reason)."""
        return split(self.text, self.opened, True).content if self.reasons else self.text

    def finish(self, reason: str, error: str | None = None) -> None:
        """Send what was held back with the usage, then the final flag (or the error, or just the flag)."""
        self.finish_reason = reason
        if self.sender is None:
            return
        pb = pb_utils()
        final = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            if error is not None:
                self.sender.send(error_response(error, invalid_input=False), flags=final)
            elif reason == "cancelled":
                self.sender.send(flags=final)
            else:
                self.text += self._decode(self.prefix_offset)[len(self._decode(self.prefix_offset, self.read_offset)) :]
                usage = [
                    string_tensor("finish_reason", [reason]),
                    pb.Tensor("prompt_tokens", np.array([[self.prompt_tokens]], dtype=np.int32)),
                    pb.Tensor("completion_tokens", np.array([[len(self.tokens)]], dtype=np.int32)),
                ]
                if self.prompt_tokens_cut:  # the request asked to truncate: the answer says what went
                    usage.append(pb.Tensor("prompt_tokens_cut", np.array([[self.prompt_tokens_cut]], dtype=np.int32)))
                if self.reasons:
                    usage.append(pb.Tensor("reasoning_tokens", np.array([[self.reasoning_tokens]], dtype=np.int32)))
                content, calls = self.calls(self.content) if self.calls is not None else (self.content, [])
                if calls:
                    self.finish_reason = "tool_calls" if reason == "stop" else reason
                    usage[0] = string_tensor("finish_reason", [self.finish_reason])
                    usage += [string_tensor("tool_calls", [json.dumps(calls)]), string_tensor("content", [content])]
                self._send(len(self.text), usage, final=True)
                if self.sender is not None:  # None: the last chunk was refused, the answer has ended
                    self.sender.send(flags=final)
        except Exception:  # the client went away between two checks: nothing left to tell it
            pass
