"""The OpenVINO generation engine's CPU settings: batch-invariant by default, faster only when asked.

Each answer must not depend on what it was batched with. OpenVINO's CPU plugin breaks that in two
ways, found by counting how many of 8 greedy answers (SmolLM2-135M Q4_1 GGUF, 96 tokens) equal the same
prompt's answer alone, on two CPUs (docs/performance.md, "Batch invariance"):

* **more than one thread.** With the int4/int8 weights of a GGUF file, a fully connected layer quantizes
  its activations on the fly (``DYNAMIC_QUANTIZATION_GROUP_SIZE``) and its kernel splits the work between
  threads by the shape of the step; the split, and so the order of the float sums, changes with the
  number of rows in the step, that is with the batch-mates. On one thread every row is summed in one
  order whatever the batch: 8/8 on a Xeon with AMX, where two threads gave 2/8. Turning the dynamic
  quantization off instead (group size 0) was invariant on two threads too but slower at both one and
  eight streams, since the weights are then expanded to f32 for every step;
* **reduced precision.** bf16 activations (OpenVINO's default on a CPU with AMX or AVX512-BF16) gave
  4/8 even on one thread, and an f16 key/value cache changed answers on an AMD Zen 4 CPU (7/8 against 8/8
  with f32 there). So the defaults are f32 activations and an f32 cache, whatever the CPU reports.

``threads=N`` (N > 1) keeps invariance on N threads by turning the dynamic quantization off: each step's
products then run in f32 whatever the batch, split between threads by output column, never by the sum.
Measured 8/8 at once and 8/8 staggered on both CPUs with an f32 cache (on the AMD CPU an f16 cache gave
7/8), so the cache stays f32 there too. One stream runs faster than on one thread, eight slower (the
weights are expanded to f32 for every step): docs/performance.md has both, from one run.

``batch_invariant=false`` (``gallery add --param``) is the way out, never taken silently: the instance's
share of the cores (two threads here), an f16 key/value cache; each answer may then change with its
batch-mates, and the config, ``gallery show`` and the gateway's ``/v1/models`` say so. The
``kv_cache_precision`` and ``inference_precision`` parameters override either choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .common import PARAM_BATCH_INVARIANT


@dataclass(frozen=True)
class EngineSettings:
    """What the pipeline is built with: its threads, the plugin's properties, and why, in one line."""

    invariant: bool
    threads: int
    properties: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        shown = ", ".join(f"{key}={value}" for key, value in self.properties.items())
        if self.invariant:
            return (
                f"batch-invariant: each answer equals its answer alone ({self.threads} thread"
                f"{'s' if self.threads > 1 else ''}, {shown}; "
                "--param batch_invariant=false trades that for batched throughput)"
            )
        return (
            f"NOT batch-invariant (batch_invariant=false): an answer may change with its batch-mates "
            f"({self.threads} threads, {shown})"
        )


def batch_invariant(params: Mapping[str, str]) -> bool:
    """The ``batch_invariant`` parameter: true unless it says false; anything else is an error."""
    value = str(params.get(PARAM_BATCH_INVARIANT, "true")).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"parameter {PARAM_BATCH_INVARIANT} must be true or false, not {value!r}")
    return value == "true"


def engine_settings(params: Mapping[str, str], cores: int) -> EngineSettings:
    """The settings for a model with ``params``, on an instance whose share of the cores is ``cores``: batch-invariant
    on one thread, or on the ``threads`` parameter's count with the dynamic quantization off; with
    ``batch_invariant=false`` on the instance's cores (or ``threads``) with OpenVINO's fast kernels."""
    invariant = batch_invariant(params)
    given = str(params.get("threads", "")).strip()
    if given and (not given.isdigit() or int(given) < 1):
        raise ValueError(f"parameter threads must be a whole number of threads, 1 or more, not {given!r}")
    threads = int(given) if given else (1 if invariant else max(1, cores))
    properties = {
        "KV_CACHE_PRECISION": params.get("kv_cache_precision", "f32" if invariant else "f16"),
        "INFERENCE_PRECISION_HINT": params.get("inference_precision", "f32"),
    }
    if invariant and threads > 1:  # the quantizing kernels split a step's sums by its shape: off
        properties["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
    return EngineSettings(invariant, threads, properties)
