"""Every numeric option's range, stated once: the templates check them, the SDK checks them before sending, and the
gateway publishes them in its OpenAPI schema (request bodies' bounds).

The bounds are OpenAI's where OpenAI states one (``temperature`` 0 to 2, 0 to 1 for speech, ``top_p`` above 0 up
to 1, ``top_logprobs`` 0 to 20, ``presence_penalty`` and ``frequency_penalty`` -2 to 2, ``seed`` any 64-bit unsigned
integer a client draws), vLLM's for its extra sampling fields (``top_k``, ``min_p``, ``repetition_penalty``);
``max_tokens`` is at least 1 and fits Triton's INT32 tensor (the model's context then bounds it further, with a 400
naming the context length).

Seeds: clients draw them with ``random.getrandbits(64)``, so every value from 0 to 2**64 - 1 is a seed. Triton's
seed tensor is INT64; a seed travels as the same 64 bits (``seed_to_wire``: from 2**63 up it arrives as a negative
int64) and the template reads it back as unsigned (``seed_from_wire``). The mapping is a bijection, so each of the
2**64 seeds is its own generator seed, and the same seed gives the same text.
"""

from __future__ import annotations

import struct


def fp32(value: float) -> float:
    """``value`` as the FP32 a tensor carries it in: a bound stated so holds at every layer (the schema's float64,
    the SDK's and the template's FP32)."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


SEED_MAX = 2**64 - 1
INT32_MAX = 2**31 - 1
MAX_TOKENS_MIN = 1
TEMPERATURE_MAX = 2.0  # OpenAI's; 0 means greedy
AUDIO_TEMPERATURE_MAX = 1.0  # OpenAI's for transcriptions and translations
TOP_P_MAX = 1.0  # top_p is in (0, TOP_P_MAX]
TOP_P_MIN = fp32(1e-45)  # the least top_p above 0 once it travels as FP32 (a smaller one arrives as 0)
TOP_LOGPROBS_MAX = 20
COMPLETION_LOGPROBS_MAX = 5  # OpenAI's legacy completions' logprobs: 0 to 5 alternatives
PENALTY_MAX = 2.0  # OpenAI's presence_penalty and frequency_penalty: from -PENALTY_MAX to PENALTY_MAX, 0 is none
# vLLM's and transformers' repetition_penalty: 1 is none; bounded away from 0, where a logit divided by it overflows
REPETITION_PENALTY_MIN = fp32(0.01)  # 0.01 as it travels (0.01 itself rounds below 0.01 in FP32)
REPETITION_PENALTY_MAX = 10.0
# top_k: the k likeliest tokens only, 0 (or vLLM's -1) for all; min_p: tokens at least min_p times the likeliest's
# probability, from 0 (all) to MIN_P_MAX (both vLLM's names)
MIN_P_MAX = 1.0
TOP_K_MIN = -1  # vLLM's -1 (as 0) for all tokens
ANSWERS_MAX = 100  # question answering's top_k: the answers one question gets
CANDIDATES_MAX = 1000  # fill-mask's top_k: the candidates for one mask
CHOICES_MAX = 8  # OpenAI's n: the choices of one chat answer, each its own generation
LOGIT_BIAS_MAX = 100.0  # OpenAI's logit_bias: from -100 (never) to 100 (always) added to a token's logit
LOGIT_BIAS_TOKENS = 300  # OpenAI's bound on how many tokens one request biases
# An audio array's sampling rate in Hz (the SDK encodes (samples, rate) as a WAV): 1 kHz to 384 kHz, the highest rate
# of audio hardware; a rate outside is more likely a mistake (samples and rate swapped) than audio
AUDIO_RATE_MIN = 1000
AUDIO_RATE_MAX = 384_000
ROLES = ("system", "user", "assistant", "tool", "developer")  # OpenAI's chat roles; "developer" is a system message
_BITS = 2**64


def seed_to_wire(seed: int) -> int:
    """A seed (0 to 2**64 - 1) as the int64 that carries its 64 bits."""
    return seed - _BITS if seed >= 2**63 else seed


def seed_from_wire(value: int) -> int:
    """The seed an int64 carries (its 64 bits, unsigned)."""
    return int(value) % _BITS
