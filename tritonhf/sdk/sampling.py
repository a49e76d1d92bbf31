"""How a generation is sampled: one typed set of options for every generation method (vLLM's
``SamplingParams`` as a ``TypedDict``, so the methods take them as keywords, checked by mypy).

    client.generate("Once upon a time", max_tokens=64, temperature=0.7, seed=1)
    options: Sampling = {"max_tokens": 64, "stop": ["\\n\\n"]}
    client.chat(messages, **options)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from typing_extensions import TypedDict


class Sampling(TypedDict, total=False):
    """Generation options; each is optional, the model's defaults apply where one is not given."""

    max_tokens: int | None  # at most this many new tokens (the model's parameter when not given)
    temperature: float | None  # 0: greedy (the default); higher: more varied
    top_p: float | None  # nucleus sampling: the smallest set of tokens whose probability reaches it
    seed: int | None  # the same seed, prompt and options give the same text, whatever else runs
    stop: Sequence[str] | None  # the text ends before the first of these strings
    truncate: bool  # a prompt past the context has its start cut (and the usage says so) instead of a 400
    # each token's log-probability with this many alternatives (0-20; the OpenVINO engine: 0), on the stream's
    # ``logprobs`` (text-generation models)
    logprobs: int | None
    # OpenAI's penalties (-2 to 2; 0, the default, is none): a token already in the answer loses this much of its
    # logit once (presence) and per time it came (frequency)
    presence_penalty: float | None
    frequency_penalty: float | None
    # vLLM's extra fields (text-generation models): a repeated token's logit divided by it (1 is none; above 0), the
    # k likeliest tokens only (0 or -1: all), tokens at least min_p times the likeliest's probability (0: all)
    repetition_penalty: float | None
    top_k: int | None
    min_p: float | None
    # OpenAI's: token id -> a bias from -100 (never) to 100 (always) added to its logit; the transformers engine (the
    # OpenVINO engine refuses it by name)
    logit_bias: Mapping[int, float] | None
    # chat only: keywords for the model's chat template, as vLLM takes them ({"enable_thinking": False} answers a
    # reasoning model without its thinking); the stream's ``reasoning`` holds the thinking of one that thinks
    chat_template_kwargs: Mapping[str, object] | None


OPTIONS = tuple(Sampling.__annotations__)


class SpeechOptions(TypedDict, total=False):
    """Transcription options (``Client.transcribe``); each is optional."""

    language: str | None  # the spoken language's code; None: detected from the first 30 s (and returned)
    task: str  # "transcribe" (the default) or "translate" (into English)
    timestamps: bool  # timed segments; otherwise one segment, the whole file
    prompt: str | None  # text that came before: names, spelling, style
    temperature: float  # 0 (the default): greedy; higher: sampling
    seed: int | None  # with temperature > 0: the same seed and file give the same text
    max_tokens: int | None  # at most this many tokens per 30 s window
