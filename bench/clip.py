"""CLIP image and text embeddings against Infinity serving the same folder, in one run (`make bench`).

CLIP ViT-B/32 (224x224) with random weights at the real size (no real weights can be downloaded
here; the work per input is the same) and CLIP's own BPE tokenizer (49,408 tokens, built from the
merges file the ``open_clip_torch`` wheel carries, downloaded from the package registry; where it
cannot be, a byte-level tokenizer stands in and texts are not measured). Both servers are up at
once: the tritonhf gateway's `/v1/embeddings` over Triton (the gallery's
zero-shot-image-classification template as `gallery add` makes it by default: the two towers as
ONNX graphs, on the engine `--backend auto` measured faster) and Infinity 0.0.78's `/embeddings` with its
torch engine (batch 32). Images: ``"modality": "image"`` and a PNG as a data: URI; texts: one short
caption. One aiohttp client, one input per request, c1 and c16; rounds interleave the servers. A
cosine check first: both must answer the same vector for the same input, or the comparison means
nothing.

Infinity runs in the venv bench/peers.py makes; images need Pillow and aiohttp there, installed
here when missing. Where it cannot run, its rows are skipped and the reason printed.

``BENCH_MODEL=siglip``: google/siglip-base-patch16-224's shapes instead (ViT-B/16 224, 196 patches, a
12-layer text tower, 768-d space, sigmoid scores), texts padded to its 64 tokens. SigLIP's own
tokenizer is a sentencepiece model that cannot be made offline, so CLIP's BPE stands in for it
(49,408 tokens against 32,000: the same work per token after the lookup); said in the output.

    python bench/clip.py   # BENCH_SECONDS (per point, default 8), BENCH_ROUNDS (default 2), BENCH_MODEL
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from peers import chosen_engine, infinity_python, interleaved, start_infinity, table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the shared harness package
from harness.images import encode, picture
from harness.tiny_models import byte_level_clip_tokenizer
from tritonhf.bootstrap import Gateway, Server, Stack, Workspace, bootstrap
from tritonhf.bootstrap.ports import free_port
from tritonhf.gallery import AddRequest, add_model

SECONDS = float(os.environ.get("BENCH_SECONDS", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
LEVELS = (1, 16)
CAPTION = "a photo of a cat sitting on a red sofa next to a window"
MODEL = os.environ.get("BENCH_MODEL", "clip")


def build_clip_base(folder: Path) -> tuple[Path, bool]:
    """openai/clip-vit-base-patch32's shape (ViT-B/32 vision tower, 12-layer text tower, 512-d space), and whether
    it has CLIP's own tokenizer (so that texts cost what they cost with the real model)."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel

    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    real = clip_bpe_tokenizer(folder)
    tokenizer = real or byte_level_clip_tokenizer(folder, max_length=77)
    text = {"vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    CLIPModel(CLIPConfig(text_config=text, projection_dim=512)).eval().save_pretrained(folder)
    CLIPImageProcessorPil().save_pretrained(folder)  # resize the short side to 224, centre crop 224
    return folder, real is not None


def build_siglip_base(folder: Path) -> tuple[Path, bool]:
    """google/siglip-base-patch16-224's shape (ViT-B/16 vision tower, 12-layer text tower, 768-d space), CLIP's BPE
    standing in for its sentencepiece tokenizer (texts padded to 64 tokens, as SigLIP reads them)."""
    import torch
    from transformers import SiglipConfig, SiglipImageProcessorPil, SiglipModel

    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    real = clip_bpe_tokenizer(folder, max_length=64)
    tokenizer = real or byte_level_clip_tokenizer(folder, max_length=64)
    text = {"vocab_size": len(tokenizer), "max_position_embeddings": 64, "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}  # fmt: skip
    vision = {"image_size": 224, "patch_size": 16}
    SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval().save_pretrained(folder)
    SiglipImageProcessorPil(size={"height": 224, "width": 224}).save_pretrained(folder)  # resize, no crop
    return folder, real is not None


def clip_bpe_tokenizer(folder: Path, max_length: int = 77) -> Any:
    """CLIP's BPE tokenizer (openai/clip-vit-base-patch32's vocabulary and merges), saved in ``folder``; None where
    the ``open_clip_torch`` wheel, which carries the merges, cannot be downloaded.

    The vocabulary is built as CLIP builds it: the 256 byte characters, the same with ``</w>``, one token per
    merge, then the start and end tokens."""
    from transformers import CLIPTokenizer

    with tempfile.TemporaryDirectory() as scratch:
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                              "open_clip_torch==3.3.0", "-d", scratch], capture_output=True, text=True)  # fmt: skip
        wheels = list(Path(scratch).glob("open_clip_torch-*.whl"))
        if got.returncode != 0 or not wheels:
            print(f"# CLIP's merges could not be downloaded (open_clip_torch): texts not measured. {got.stderr[-200:]}")
            return None
        with zipfile.ZipFile(wheels[0]) as wheel:
            text = gzip.decompress(wheel.read("open_clip/bpe_simple_vocab_16e6.txt.gz")).decode()
    merges = text.split("\n")[1 : 49152 - 256 - 2 + 1]
    characters = list(_bytes_to_unicode().values())
    tokens = [*characters, *(c + "</w>" for c in characters), *("".join(m.split()) for m in merges)]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    pairs = [tuple(m.split()) for m in merges]
    tokenizer = CLIPTokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=pairs, model_max_length=max_length)
    tokenizer.save_pretrained(folder)
    return tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's (and CLIP's) byte -> printable character table."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), 256)]
    table = {b: chr(b) for b in kept}
    for extra, b in enumerate(b for b in range(256) if b not in table):
        table[b] = chr(256 + extra)
    return table  # in insertion order, as CLIP lists it: printable bytes first, then the rest


def infinity_with_images(python: Path) -> str:
    """Pillow and aiohttp in Infinity's venv (its image inputs need both); "" or why not."""
    check = subprocess.run([str(python), "-c", "import PIL, aiohttp"], capture_output=True)
    if check.returncode == 0:
        return ""
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "pillow",
                           "aiohttp"], capture_output=True, text=True)  # fmt: skip
    return "" if done.returncode == 0 else f"pillow/aiohttp could not be installed for Infinity: {done.stderr[-200:]}"


def vector(url: str, body: dict[str, object]) -> np.ndarray:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return np.array(json.loads(response.read())["data"][0]["embedding"], dtype=np.float32)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tritonhf-clip-"))
    lines: list[str] = []
    infinity = None
    try:
        build = build_siglip_base if MODEL == "siglip" else build_clip_base
        folder, real_tokenizer = build(root / MODEL)
        image = encode(picture(random.Random(0), 640, 480), "PNG")
        data_uri = f"data:image/png;base64,{base64.b64encode(image).decode()}"
        bodies: dict[str, dict[str, object]] = {"image": {"model": "clip", "input": [data_uri], "modality": "image"}}
        if real_tokenizer:
            bodies["text"] = {"model": "clip", "input": [CAPTION], "modality": "text"}
        workspace = Workspace(root / "workspace")
        bootstrap(workspace)
        served = add_model(AddRequest("clip", str(folder), workspace.model_repository, name="clip"))
        shape = "SigLIP base/16 224, CLIP's BPE standing in for its tokenizer" if MODEL == "siglip" else "CLIP B/32"
        print(f"# {shape} embeddings vs Infinity ({os.cpu_count()} cores, {ROUNDS} rounds, {SECONDS:.0f} s/point)")
        print(f"# tritonhf's model (--backend auto): {chosen_engine(served)}")
        python, why = infinity_python()
        if python is not None:
            why = infinity_with_images(python)
            if not why:
                port = free_port("127.0.0.1")
                infinity, why = start_infinity(python, folder, port, root / "infinity.log", engine="torch", name="clip")
        server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600)
        with Stack(server, gateway=Gateway(), supervise=False) as stack:
            urls = {"tritonhf": f"{stack.gateway_url}/embeddings"}
            if infinity is not None:
                urls["Infinity"] = f"http://127.0.0.1:{port}/embeddings"
            else:
                lines.append(f"# Infinity not measured: {why}")
            for modality, body in bodies.items():
                if infinity is not None:
                    first, second = (vector(url, body) for url in urls.values())
                    cosine = float(first @ second / (np.linalg.norm(first) * np.linalg.norm(second)))
                    lines.append(f"\n# cosine between the two servers' vectors for the same {modality}: {cosine:.5f}")
                lines += table(interleaved(urls, LEVELS, SECONDS, ROUNDS, body), list(urls), LEVELS, modality)
            if "text" not in bodies:
                lines.append("\nTexts not measured: CLIP's tokenizer could not be built here (see above).")
    finally:
        if infinity is not None:
            infinity.terminate()
            infinity.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
