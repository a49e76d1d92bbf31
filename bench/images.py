"""image-classification served against the in-process transformers path, in one run (`make bench`).

ViT-B/16 at 224x224 with random weights at the real size (no real weights can be downloaded
here; the work per image is the same), 64 JPEG photos-like files of 320-1024 pixels a side.

Rows, each round running every path back to back (rounds interleave, so drift falls on all):

* in-process transformers, what a careful user writes: ``load_image`` on the file's bytes,
  the model's image processor, PyTorch forward at batch 32 (torch threads = cores);
* in-process ONNX Runtime on the same export the gallery serves (the engine alone, batch 32);
* Triton via perf_analyzer, JPEG bytes in, c1 and c16 (no Python client: served throughput);
* the SDK (``Client.classify_images``, 16 threads over gRPC): the Python client's cost, its own row.

Ratios are taken within a round against the in-process transformers path.

    python bench/images.py   # BENCH_ROUNDS (default 2)
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import random
import statistics
import struct
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from run import prepare_perf_analyzer, spread

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's harness package
from harness.images import picture
from tritonhf import Client
from tritonhf.bootstrap import Server, Workspace, bootstrap
from tritonhf.gallery import AddRequest, ModelOptions, add_model
from tritonhf.runtime.images import load_image_processor

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
FILES = 64
BATCH = 32
torch.set_num_threads(os.cpu_count() or 1)


def build_vit_base(folder: Path) -> Path:
    """ViT-B/16, 224x224, 1000 labels: google/vit-base-patch16-224's shape with random weights."""
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessorPil

    torch.manual_seed(0)
    config = ViTConfig(num_labels=1000, id2label={i: f"label_{i}" for i in range(1000)})
    ViTForImageClassification(config).eval().save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 224, "width": 224}).save_pretrained(folder)
    return folder


def jpeg_files(count: int) -> list[bytes]:
    rng = random.Random(0)
    files = []
    for _ in range(count):
        width, height = rng.randint(320, 1024), rng.randint(320, 1024)
        buffer = io.BytesIO()
        Image.fromarray(picture(rng, width, height)).save(buffer, "JPEG", quality=90)
        files.append(buffer.getvalue())
    return files


def in_process_transformers(folder: Path, files: list[bytes]) -> float:
    """Images/s: decode + processor + PyTorch forward, batch 32, over every file once."""
    from transformers import AutoModelForImageClassification
    from transformers.image_utils import load_image

    processor = load_image_processor(str(folder))
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        model(**processor(images=[load_image(Image.open(io.BytesIO(files[0])))], return_tensors="pt"))  # warm-up
        started = time.perf_counter()
        for start in range(0, len(files), BATCH):
            images = [load_image(Image.open(io.BytesIO(data))) for data in files[start : start + BATCH]]
            model(**processor(images=images, return_tensors="pt")).logits.softmax(-1)
    return len(files) / (time.perf_counter() - started)


def in_process_onnx(onnx_file: Path, folder: Path, files: list[bytes]) -> float:
    """Images/s of the served export run by ONNX Runtime here (threads = cores), decode + processor included."""
    import onnxruntime
    from transformers.image_utils import load_image

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    processor = load_image_processor(str(folder))
    pixels = processor(images=[load_image(Image.open(io.BytesIO(files[0])))], return_tensors="np")["pixel_values"]
    session.run(None, {"pixel_values": pixels})
    started = time.perf_counter()
    for start in range(0, len(files), BATCH):
        images = [load_image(Image.open(io.BytesIO(data))) for data in files[start : start + BATCH]]
        session.run(None, {"pixel_values": processor(images=images, return_tensors="np")["pixel_values"]})
    return len(files) / (time.perf_counter() - started)


def sdk_c16(url: str, files: list[bytes], seconds: float = 12.0) -> float:
    """Images/s with 16 threads each sending one image at a time through Client.classify_images."""
    with Client(url, timeout=120) as client:
        client.classify_images(files[0], model="vit")
        deadline = time.perf_counter() + seconds

        def caller(offset: int) -> int:
            count = 0
            while time.perf_counter() < deadline:
                client.classify_images(files[(offset + count) % len(files)], model="vit")
                count += 1
            return count

        started = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            done = sum(pool.map(caller, range(16)))
        return done / (time.perf_counter() - started)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tritonhf-bench-images-") as scratch:
        root = Path(scratch)
        folder = build_vit_base(root / "vit-base")
        files = jpeg_files(FILES)
        workspace = Workspace(root / "workspace")
        bootstrap(workspace)
        added = add_model(
            AddRequest("image-classification", str(folder), workspace.model_repository, name="vit",
                       options=ModelOptions(max_batch_size=BATCH))
        )  # fmt: skip
        config = (added / "config.pbtxt").read_text()
        engine = "ONNX Runtime" if 'string_value: "onnx"' in config else "PyTorch"
        onnx_file = added / "1" / "weights" / "model.onnx"
        data = root / "images.json"
        data.write_text(json.dumps({"data": [{"IMAGE": {"b64": _serialized(f), "shape": [1]}} for f in files]}))
        rounds: list[dict[str, float]] = []
        with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600) as server:
            analyzer = prepare_perf_analyzer(server)
            # Windows of 12 s: at a few images per second a 4 s window holds one or two batches.
            analyzer = dataclasses.replace(analyzer, texts=data, interval_ms=12000) if analyzer else None
            for _ in range(ROUNDS):
                figures = {"transformers": in_process_transformers(folder, files)}
                if onnx_file.is_file():
                    figures["onnx"] = in_process_onnx(onnx_file, folder, files)
                for level in (1, 16):
                    outside = analyzer.run("vit", level) if analyzer else None
                    if outside:
                        figures[f"triton c{level}"] = outside.throughput
                        figures[f"triton c{level} p50"] = outside.p50_ms
                figures["sdk c16"] = sdk_c16(server.grpc_url, files)
                rounds.append(figures)
        print(table(rounds, engine))


def _serialized(data: bytes) -> str:
    """perf_analyzer's "b64" for a BYTES input is Triton's serialized form: a 4-byte length, then the bytes."""
    return base64.b64encode(struct.pack("<I", len(data)) + data).decode()


def table(rounds: list[dict[str, Any]], engine: str) -> str:
    def median(key: str) -> tuple[float, float, float]:
        values = [r[key] for r in rounds if key in r]
        return (statistics.median(values), min(values), max(values)) if values else (float("nan"),) * 3

    def ratio(key: str) -> tuple[float, float, float]:
        values = [r[key] / r["transformers"] for r in rounds if key in r]
        return (statistics.median(values), min(values), max(values)) if values else (float("nan"),) * 3

    rows = [
        ("in-process transformers: load_image + processor + PyTorch, batch 32", "transformers", ""),
        ("in-process ONNX Runtime (the served export), batch 32", "onnx", ""),
        (f"Triton via perf_analyzer, c1 ({engine} in the stub)", "triton c1", "triton c1 p50"),
        (f"Triton via perf_analyzer, c16 ({engine} in the stub)", "triton c16", "triton c16 p50"),
        ("SDK Client.classify_images, 16 threads, gRPC", "sdk c16", ""),
    ]
    lines = [
        f"\n### image-classification: ViT-B/16 224 (random weights), {FILES} JPEG files of 320-1024 px\n",
        f"Median of {len(rounds)} rounds (lowest-highest); every path once per round; ratio within a round.\n",
        "| path | images/s | x in-process transformers | p50 ms |",
        "| --- | --- | --- | --- |",
    ]
    for label, key, p50 in rows:
        if any(key in r for r in rounds):
            latency = f"{median(p50)[0]:.0f}" if p50 else ""
            lines.append(f"| {label} | {spread(median(key), 1)} | {spread(ratio(key), 2)} | {latency} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
