"""What the generation templates share (text-generation and text2text-generation): a request's sampling options read
against the ranges of ``ranges``, the sequence a request becomes, and the step that picks its next token.

torch is imported where a token is picked, as the package's other modules import it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, overload

from .batching import optional_scalar, optional_strings
from .ranges import MAX_TOKENS_MIN, TEMPERATURE_MAX, TOP_P_MAX, seed_from_wire
from .replies import TextReply


class Sampling(NamedTuple):
    """How one request samples: greedy at temperature 0, else top-p from its own generator (seeded when ``seed``)."""

    temperature: float = 0.0
    top_p: float = TOP_P_MAX
    seed: int | None = None
    stops: tuple[str, ...] = ()


GREEDY = Sampling()


def read_sampling(request: Any) -> Sampling:
    """A request's temperature, top_p, seed (its 64 bits, unsigned) and stop strings, each checked against its
    range (a BadRequest naming the input otherwise)."""
    temperature = optional_scalar(request, "temperature", 0.0, lambda v: 0 <= v <= TEMPERATURE_MAX,
                                  f"from 0 to {TEMPERATURE_MAX:g}")  # fmt: skip
    top_p = optional_scalar(request, "top_p", TOP_P_MAX, lambda v: 0 < v <= TOP_P_MAX, f"in (0, {TOP_P_MAX:g}]")
    seed = optional_scalar(request, "seed", None, lambda v: True, "an integer")
    stops = tuple(optional_strings(request, "stop") or ())
    return Sampling(float(temperature), float(top_p), None if seed is None else seed_from_wire(seed), stops)


@overload
def read_max_tokens(request: Any, default: int, limit: int) -> int: ...
@overload
def read_max_tokens(request: Any, default: None, limit: int) -> int | None: ...
def read_max_tokens(request: Any, default: int | None, limit: int) -> int | None:
    """A request's max_tokens, from ``MAX_TOKENS_MIN`` up to ``limit`` (the model's own bound), or ``default``."""
    found: int | None = optional_scalar(request, "max_tokens", default, lambda v: MAX_TOKENS_MIN <= v <= limit,
                           f"from {MAX_TOKENS_MIN} to {limit}")  # fmt: skip
    return None if found is None else int(found)


def read_flag(request: Any, name: str) -> bool:
    """An optional boolean input (``truncate``, ``chat``), False when not sent."""
    return bool(optional_scalar(request, name, False, lambda v: True, "a boolean"))


class Sequence:
    """One request being generated: its reply (``TextReply``, streamed through the request's sender; no request: a
    warm-up), its token budget and its sampling. A template adds what its own loop keeps."""

    def __init__(
        self,
        request: Any,
        tokenizer: Any,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        sampling: Sampling = GREEDY,
        cut: int = 0,
        **reply: Any,
    ) -> None:
        """``cut``: the prompt's tokens truncation took away (said in the last response); ``reply``: TextReply's
        keyword fields (calls, reasoning, opened)."""
        self.request = request
        sender = request.get_response_sender() if request is not None else None
        self.reply = TextReply(sender, tokenizer, list(sampling.stops), len(prompt_ids), cut, **reply)
        self.prompt_ids = prompt_ids
        self.max_tokens = max_tokens
        self.temperature, self.top_p, self.seed = sampling.temperature, sampling.top_p, sampling.seed
        self.top_k = 0  # the k likeliest tokens only; 0 for all (vLLM's field, set by a template that reads it)
        self.min_p = 0.0  # tokens at least this share of the likeliest's probability (vLLM's field, likewise)
        self.generator = _generator(sampling.seed)

    def cancelled(self) -> bool:
        return self.request is not None and bool(self.request.is_cancelled())


def _generator(seed: int | None) -> Any:
    if seed is None:
        return None
    import torch

    return torch.Generator().manual_seed(seed)


def pick_token(sequence: Sequence, logits: Any) -> int:
    """The next token from a row's logits (1-D): greedy at temperature 0; else the ``top_k`` likeliest, softmax at
    the temperature, ``min_p``, then top-p, sampled with the sequence's own generator (so a seeded row's tokens do
    not depend on its neighbours). The logits are divided by the temperature in float64: in their own FP32, a
    temperature near FP32's least (1e-38) makes them infinite and the softmax NaN, where the distribution it
    stands for is well defined (the likeliest token, or a draw among exact ties)."""
    import torch

    if sequence.temperature == 0:
        return int(torch.argmax(logits))
    if 0 < sequence.top_k < logits.shape[-1]:  # the k likeliest only
        kth = torch.topk(logits, sequence.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probabilities = torch.softmax(logits.double() / sequence.temperature, dim=-1)
    if sequence.min_p > 0:  # tokens at least min_p times the likeliest's probability
        probabilities = probabilities.masked_fill(probabilities < sequence.min_p * probabilities.max(), 0)
    if sequence.top_p < 1:
        sorted_probs, order = torch.sort(probabilities, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < sequence.top_p
        probabilities = torch.zeros_like(probabilities).scatter(0, order[keep], sorted_probs[keep])
    return int(torch.multinomial(probabilities.cpu(), 1, generator=sequence.generator))
