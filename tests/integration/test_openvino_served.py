"""The text-generation template on its OpenVINO engine, served by a real Triton (its own server: the
shared one keeps a single text-generation model, so calls without model= stay unambiguous).

The batch-invariance seed of the OpenVINO engine: staggered concurrent streams (greedy, seeded
samples, stop strings, prompts past the context) over both protocols, each equal to its answer
alone. The engine's int8 weights are not transformers' fp32, so rows meet only themselves;
`gallery add` measures the agreement with transformers and writes it into the config.
"""

from __future__ import annotations

import urllib.request
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.invariance import GenerationOracle, check_generation, make_prompts
from tritonhf import Client
from tritonhf.bootstrap import Server, Workspace
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.config import parameters_of, parse_config
from tritonhf.gallery.generation import openvino_missing

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(openvino_missing() is not None, reason=str(openvino_missing())),
]


@pytest.fixture(scope="module")
def served_ov(make_workspace: Callable[[str], Workspace], tiny: dict[str, Path]) -> Iterator[Server]:
    workspace = make_workspace("openvino")
    add_model(AddRequest("text-generation", str(tiny["llama"]), workspace.model_repository, name="writer-ov"))
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_each_stream_equals_itself_alone(served_ov: Server, tiny: dict[str, Path], protocol: str) -> None:
    config = (Path(served_ov.repository) / "writer-ov" / "config.pbtxt").read_text()
    assert parameters_of(parse_config(config))["tritonhf.backend"] == "openvino", "auto chose OpenVINO on a CPU"
    url = served_ov.http_url if protocol == "http" else served_ov.grpc_url
    oracle = GenerationOracle(tiny["llama"], versus_transformers=False)
    prompts = make_prompts(zlib.crc32(f"writer-ov/{protocol}".encode()), count=24, context_words=oracle.context)
    report = check_generation(url, "writer-ov", prompts, oracle)
    assert not report.mismatches, f"{len(report.mismatches)} mismatches:\n" + "\n".join(report.mismatches[:8])
    assert report.refused < report.requests


def test_usage_metrics_and_a_chat_through_the_sdk(served_ov: Server) -> None:
    with Client(served_ov.grpc_url) as client:
        stream = client.chat([{"role": "user", "content": "tell me a story"}], max_tokens=6, stream=True)
        text = "".join(stream)
        assert stream.usage is not None and 1 <= stream.usage.completion_tokens <= 6
        assert stream.finish_reason in ("stop", "length") and isinstance(text, str)
    metrics = urllib.request.urlopen(served_ov.metrics_url, timeout=10).read().decode()
    assert 'tritonhf_generated_tokens_total{model="writer-ov"}' in metrics
