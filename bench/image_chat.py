"""`make bench` (image chat): an image-text-to-text model served by tritonhf against transformers' ``generate`` in
this process, on the same model, side by side in one run.

No real vision-language model can be downloaded here, so the model is a random Qwen2-VL of a realistic shape for a
small one, built on the fly (harness/tiny_models.py's builder: hidden 512, 8 layers, an 8-layer vision tower of width
256, images resized to at most 448x448 pixels: 256 image tokens), added with ``gallery add image-text-to-text`` (fp16
OpenVINO IR) and served by one Triton. Random weights answer nonsense, but they cost what trained ones of that shape
cost; both paths answer the same greedy tokens (gallery add checked it).

Per round, interleaved (served, transformers, served, ...): one image chat alone (time to first token, tokens per
second after it), then four at once (served: four streams at the same moment; transformers: the four in one
``generate`` call, left-padded, as a careful user batches them), aggregate tokens per second and the mean time to
first token. Each chat: a 400x300 JPEG and a question, greedy, at most 64 new tokens (fewer where the model ends
its answer: the tokens each path generated are counted). Prints a markdown table and the ratios. Not part of
``make test``.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the shared harness package

from harness.images import picture
from harness.tiny_models import build_qwen_vl
from tritonhf import Client, Server
from tritonhf.bootstrap import Workspace, bootstrap
from tritonhf.gallery import AddRequest, add_model
from tritonhf.runtime.images import decode_image
from tritonhf.runtime.vision import Vision

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TOKENS = 64
QUESTIONS = ("describe the picture", "what colour is it", "tell me a story about this", "what is in the picture")
Measured = dict[str, float]  # ttft (ms), tok/s, tokens


def chats() -> list[tuple[str, bytes]]:
    import random

    rng = random.Random(3)
    found = []
    for question in QUESTIONS:
        buffer = io.BytesIO()
        Image.fromarray(picture(rng, 400, 300)).save(buffer, "JPEG", quality=90)
        found.append((question, buffer.getvalue()))
    return found


def messages(question: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


class Library:
    """transformers in this process: the image processor, the prompt widened as the processor widens it, generate."""

    def __init__(self, folder: Path) -> None:
        import transformers

        self.vision = Vision(str(folder), "qwen2_vl", {})
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder, padding_side="left")
        auto: Any = transformers.AutoModelForImageTextToText
        self.model = auto.from_pretrained(folder, dtype="float32").eval()

    def run(self, batch: list[tuple[str, bytes]]) -> Measured:
        started = time.perf_counter()
        images = [decode_image(data) for _, data in batch]
        processed = self.vision.processor(images=images, return_tensors="pt")
        counts = [self.vision.family.tokens(grid) for grid in processed["image_grid_thw"]]
        prompts = [
            self.vision.widen(self.tokenizer.apply_chat_template(messages(q), add_generation_prompt=True,
                                                                 tokenize=False), [count])
            for (q, _), count in zip(batch, counts)
        ]  # fmt: skip
        encoded = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        marks: list[float] = []  # generate's streamer hears the prompt, then each step's tokens

        class Streamer:
            def put(self, value: Any) -> None:
                marks.append(time.perf_counter())

            def end(self) -> None:
                pass

        with torch.no_grad():
            out = self.model.generate(**encoded, pixel_values=processed["pixel_values"],
                                      image_grid_thw=processed["image_grid_thw"], max_new_tokens=TOKENS,
                                      do_sample=False, streamer=Streamer())  # fmt: skip
        ended = time.perf_counter()
        new = out[:, encoded["input_ids"].shape[1] :]
        eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        tokens = sum(int((row != eos).sum()) for row in new)  # an ended row is padded with its end token
        ttft = (marks[1] if len(marks) > 1 else ended) - started
        return {"ttft": 1000 * ttft, "tps": tokens / max(ended - started - ttft, 1e-9), "tokens": tokens}


def served(client: Client, model: str, batch: list[tuple[str, bytes]]) -> Measured:
    """The chats at the same moment, each streamed: the mean TTFT, the aggregate tokens/s after it."""
    start = threading.Barrier(len(batch))

    def one(chat: tuple[str, bytes]) -> tuple[float, float, int, float]:
        """(began, its TTFT, its tokens, ended)"""
        question, image = chat
        sent = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question}]}]
        start.wait()
        began = time.perf_counter()
        stream = client.chat(sent, model=model, stream=True, max_tokens=TOKENS, temperature=0)
        first = None
        for _ in stream:
            first = first or time.perf_counter()
        ended = time.perf_counter()
        return began, (first or ended) - began, stream.usage.completion_tokens if stream.usage else 0, ended

    with ThreadPoolExecutor(len(batch)) as pool:
        found = list(pool.map(one, batch))
    ttft = statistics.mean(f[1] for f in found)
    tokens = sum(f[2] for f in found)
    span = max(f[3] for f in found) - min(f[0] for f in found)
    return {"ttft": 1000 * ttft, "tps": tokens / max(span - ttft, 1e-9), "tokens": tokens}


def _spread(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="tritonhf-bench-image-chat-") as scratch:
        root = Path(scratch)
        source = root / "qwen2-vl-bench"
        source.mkdir()
        build_qwen_vl(source, hidden=512, layers=8, vision=256, largest=448)
        workspace = Workspace(root / "workspace")
        bootstrap(workspace)
        add_model(AddRequest("image-text-to-text", str(source), workspace.model_repository, name="vlm"))
        check = [line for line in (workspace.model_repository / "vlm" / "config.pbtxt").read_text().splitlines()
                 if line.startswith("# Checked at gallery add")]  # fmt: skip
        library = Library(source)
        all_chats = chats()
        paths: dict[str, Callable[[list[tuple[str, bytes]]], Measured]] = {}
        server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600)
        with server, Client(server.grpc_url, timeout=600) as client:
            paths["tritonhf (OpenVINO GenAI, fp16 IR), served over gRPC"] = lambda b: served(client, "vlm", b)
            paths["transformers generate, in-process (fp32)"] = library.run
            served(client, "vlm", all_chats[:1])  # warm-up of both paths, not counted
            library.run(all_chats[:1])
            rounds = [
                {name: {"1": run(all_chats[:1]), "4": run(all_chats)} for name, run in paths.items()}
                for _ in range(ROUNDS)
            ]
    cores = os.cpu_count()
    print(f"# image chat ({cores} cores, {ROUNDS} interleaved rounds, greedy, at most {TOKENS} new tokens)\n")
    print(f"gallery add's check: {check[0][2:] if check else 'not found'}\n")
    print("| path | one chat: TTFT | one chat: tok/s | 4 at once: mean TTFT | 4 at once: aggregate tok/s |")
    print("| --- | --- | --- | --- | --- |")
    for name in paths:

        def cell(level: str, key: str, digits: int = 1, name: str = name) -> str:
            return _spread([r[name][level][key] for r in rounds], digits)

        print(f"| {name} | {cell('1', 'ttft', 0)} ms | {cell('1', 'tps')} | {cell('4', 'ttft', 0)} ms | "
              f"{cell('4', 'tps')} |")  # fmt: skip
    ours, theirs = list(paths)
    print("\n| ratio (per round, then median) | measured |\n| --- | --- |")
    for level, label in (("1", "one chat"), ("4", "4 at once")):
        tps = [r[ours][level]["tps"] / r[theirs][level]["tps"] for r in rounds]
        ttft = [r[theirs][level]["ttft"] / r[ours][level]["ttft"] for r in rounds]
        print(f"| {label}: tokens/s, served / transformers | {_spread(tps, 2)} |")
        print(f"| {label}: TTFT, transformers / served (above 1: served is sooner) | {_spread(ttft, 2)} |")
    tokens = {name: sorted({r[name][level]["tokens"] for r in rounds for level in "14"}) for name in paths}
    print(f"\ntokens generated per level (1, 4) by each path: {json.dumps(tokens)}")


if __name__ == "__main__":
    main()
