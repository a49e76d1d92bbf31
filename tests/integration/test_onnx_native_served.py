"""A ``--onnx-runtime native`` model served for real: the template's BLS call into its part.

The wheel's server has no onnxruntime backend, so the part runs on the stand-in
(tests/onnx_part_standin.py: model.onnx by onnxruntime in the Python backend, with the
part's own config, warm-up included). Everything else is the real thing: Triton loads both
models, batches requests for the template, which tokenizes and sends one BLS request.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tritonhf import Client
from tritonhf.bootstrap import Server, Workspace
from tritonhf.gallery import AddRequest, add_model, validate_repository

pytestmark = pytest.mark.integration
STANDIN = Path(__file__).parent.parent / "onnx_part_standin.py"
TEXTS = [
    f"the {animal} sat on the {thing} number {n}"
    for n in range(4)
    for animal in ("cat", "dog")
    for thing in ("mat", "rug")
]


@pytest.fixture(scope="module")
def native_server(make_workspace: Callable[[str], Workspace], tiny: dict[str, Path]) -> Iterator[Server]:
    workspace = make_workspace("native-onnx")
    repo = workspace.model_repository
    source = str(tiny["encoder"])
    add_model(AddRequest("feature-extraction", source, repo, name="emb", backend="onnx", onnx_runtime="native"))
    add_model(AddRequest("feature-extraction", source, repo, name="emb-pytorch"))
    assert validate_repository(repo) == []
    part = repo / "emb__onnx"
    shutil.copy(STANDIN, part / "1" / "model.py")
    config = part / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "onnxruntime"', 'backend: "python"'))
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=120) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_native_onnx_embeddings_match_pytorch_under_concurrency(native_server: Server, protocol: str) -> None:
    url = native_server.http_url if protocol == "http" else native_server.grpc_url
    with Client(url) as client:
        expected = client.embed(TEXTS, model="emb-pytorch")
        with ThreadPoolExecutor(8) as pool:  # one text per request: Triton batches them for the template
            got = np.concatenate(list(pool.map(lambda text: client.embed(text, model="emb"), TEXTS)))
        np.testing.assert_allclose(got, expected, atol=1e-3)
        statistics = client.statistics("emb__onnx")["model_stats"][0]
        calls = int(statistics["inference_stats"]["success"]["count"])
        template_runs = int(client.statistics("emb")["model_stats"][0]["execution_count"])
        assert calls >= template_runs > 0  # one BLS request per execution of the template (warm-up aside)


def test_the_part_is_a_model_of_its_own(native_server: Server) -> None:
    with Client(native_server.http_url) as client:
        models = {info.name: info for info in client.models()}
        assert models["emb"].task == "feature-extraction" and models["emb"].ready
        assert models["emb__onnx"].ready and models["emb__onnx"].task is None
