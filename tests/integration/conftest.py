"""Integration fixtures: one real server holding every gallery template, with the gateway beside it, shared by the
modules of ``SERVED_MODULES`` (tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from page_helpers import WAIT

from tritonhf.bootstrap import Gateway, Server, Stack, Workspace
from tritonhf.demo import offline_models
from tritonhf.gallery import AddRequest, ModelOptions, add_model
from tritonhf.gallery.families.generation import gguf_export

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium driven by Selenium (tests/page_helpers.py), for the modules that use the page."""
    from harness import browser as chromium

    if not chromium.installed():
        if os.geteuid() == 0:  # make test installs them as root: missing there is a failure, not a skip
            pytest.fail("chromium and chromium-driver are missing: make packages installs them (Debian's).")
        pytest.skip("Debian's chromium and chromium-driver are not installed (make packages, as root)")
    driver = chromium.chromium()
    driver.set_script_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def make_workspace(installed_server: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Workspace]:
    """``make_workspace(name)``: a fresh, empty workspace that shares the session's installed server."""

    def make(name: str) -> Workspace:
        root = tmp_path_factory.mktemp(name) / "workspace"
        root.mkdir()
        (root / "triton_server").symlink_to(installed_server.server_dir)
        (root / "stub_env").symlink_to(installed_server.stub_env_dir)
        workspace = Workspace(root)
        workspace.create_folders()
        return workspace

    return make


@pytest.fixture(scope="session")
def served_stack(make_workspace: Callable[[str], Workspace], tiny: dict[str, Path]) -> Iterator[Stack]:
    """The shared server and the OpenAI/TEI gateway over it: the tiny models of every template, and the two real
    ones that registry packages carry (all-MiniLM-L6-v2 as ``minilm``, SmolLM2-135M-Instruct as ``smollm2``)."""
    workspace = make_workspace("gallery")
    repo = workspace.model_repository
    small = ModelOptions(max_batch_size=8)
    real = {model.name: model.source for model in offline_models()}
    add_model(AddRequest("feature-extraction", real["minilm-embed"], repo, name="minilm"))
    # the OpenVINO engine, named: auto measures it against llama.cpp, which another machine may find faster
    add_model(AddRequest("text-generation", real["smollm2-chat"], repo, name="smollm2", engine="openvino"))
    # the llama.cpp engine on a tiny llama's GGUF (that engine serves GGUF files): the fuzzer and the shapes reach it
    tiny_gguf = workspace.root / "tiny-llama.gguf"
    gguf_export.export(tiny["llama"], tiny_gguf, "f16")
    add_model(AddRequest("text-generation", str(tiny_gguf), repo, name="writer-llamacpp", engine="llamacpp"))
    for task, source, name, extra in (
        ("text-classification", tiny["classifier"], "sentiment", {"options": small}),
        ("ner", tiny["ner"], "ner", {}),
        ("feature-extraction", tiny["encoder"], "embed", {}),
        ("feature-extraction", tiny["encoder-cls"], "embed-cls", {}),
        ("feature-extraction", tiny["encoder"], "embed-ov", {"backend": "openvino"}),  # the same export on OpenVINO
        # two instances: ONNX Runtime on each one's share of the cores, torch on one thread beside it
        ("feature-extraction", tiny["encoder"], "embed-2x", {"options": ModelOptions(instances=2)}),
        # int8 kept whatever the random tiny model scores on the quality gate: the harness checks it
        ("feature-extraction", tiny["encoder"], "embed-int8", {"quantize": "int8", "force": True}),
        ("feature-extraction", tiny["st-prompts"], "embed-st", {}),  # pooling, Dense and prompts of its folder
        ("zero-shot", tiny["encoder"], "zeroshot", {"labels": ("positive", "negative")}),
        ("text-generation", tiny["generator"], "writer", {"engine": "transformers"}),  # the transformers engine
        ("text-generation", tiny["thinker"], "thinker", {"engine": "transformers"}),  # it reasons, by script
        ("rerank", tiny["cross-encoder"], "reranker", {"options": small}),
        ("question-answering", tiny["qa"], "reader", {}),
        ("fill-mask", tiny["masked-lm"], "filler", {}),
        ("summarization", tiny["seq2seq"], "summarizer", {}),
        ("image-classification", tiny["image-classifier"], "vit", {"options": small}),  # ONNX Runtime (auto)
        ("clip", tiny["clip"], "clip", {"labels": ("cat", "dog", "car"), "options": small}),
        # the same two tower graphs on OpenVINO (auto keeps whichever measured faster; this one is forced)
        ("clip", tiny["clip"], "clip-ov", {"labels": ("cat", "dog", "car"), "options": small, "backend": "openvino"}),
        ("whisper", tiny["whisper"], "asr", {"options": small, "backend": "pytorch"}),
        ("whisper", tiny["whisper"], "asr-int8", {"options": small, "quantize": "int8", "backend": "pytorch"}),
        ("whisper", tiny["whisper"], "asr-ct2", {"options": small, "backend": "ctranslate2"}),  # float32
        # int8 kernels, and the encoder on OpenVINO where gallery add measured it faster
        ("whisper", tiny["whisper"], "asr-ct2-int8", {"options": small, "backend": "ctranslate2", "quantize": "int8"}),
        # the same, decoupled (--stream): answers in parts, then whole
        ("whisper", tiny["whisper"], "asr-stream", {"options": replace(small, stream=True), "backend": "ctranslate2"}),
        ("whisper", tiny["whisper"], "asr-stream-pt", {"options": replace(small, stream=True), "backend": "pytorch"}),
        ("asr", tiny["wav2vec2"], "ctc", {"options": small}),  # a CTC model: every file alone
    ):
        add_model(AddRequest(task=task, source=str(source), repository=repo, name=name, **extra))  # type: ignore[arg-type]
    shutil.copytree(DATA / "raiser", repo / "raiser")
    shutil.copytree(DATA / "sleeper", repo / "sleeper")
    # 600 s: every template loads (a few minutes on 2 cores) while make test's other worker uses the cores too
    server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600)
    with Stack(server, gateway=Gateway(), supervise=False) as stack:
        yield stack


@pytest.fixture(scope="session")
def served(served_stack: Stack) -> Server:
    return served_stack.server
