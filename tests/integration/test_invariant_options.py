"""The batch-invariance guard of the real SmolLM2-135M-Instruct on the settings that trade speed one way or the other
and keep invariance: two threads with the dynamic quantization off (``--param threads=2``), the GGUF's weights
exported to OpenVINO IR with int4 weights (``--weight-format int4-ir``), and the GGUF file on the llama.cpp engine
(``--engine llamacpp``: llama-server's slots, a key/value cache each). 8 greedy streams at once, then the staggered
mix; one protocol each (the defaults' guard, both protocols, is in test_batch_invariance.py).

Its own server, not the shared one: these models and their minutes of streams run beside the shared server's
modules instead of after them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.invariance import at_once_and_staggered
from tritonhf.bootstrap import Server, Workspace
from tritonhf.demo import offline_models
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.listing import parameters_of_folder

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def served_options(make_workspace: Callable[[str], Workspace]) -> Iterator[Server]:
    workspace = make_workspace("invariant-options")
    repo = workspace.model_repository
    smollm2 = {model.name: model.source for model in offline_models()}["smollm2-chat"]
    add_model(AddRequest("text-generation", smollm2, repo, name="smollm2-threads", engine="openvino",
                         params={"threads": "2"}))  # fmt: skip
    add_model(AddRequest("text-generation", smollm2, repo, name="smollm2-ir", weight_format="int4-ir"))
    add_model(AddRequest("text-generation", smollm2, repo, name="smollm2-llamacpp", engine="llamacpp"))
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600) as server:
        yield server


@pytest.mark.parametrize(
    ("model", "protocol", "param", "value"),
    [
        ("smollm2-threads", "http", "threads", "2"),
        ("smollm2-ir", "grpc", "tritonhf.openvino_model", "openvino"),
        ("smollm2-llamacpp", "grpc", "tritonhf.engine", "llamacpp"),
    ],
)
def test_real_model_on_its_invariant_options_streams_equal_themselves_alone(
    served_options: Server, model: str, protocol: str, param: str, value: str
) -> None:
    assert parameters_of_folder(Path(served_options.repository) / model)[param] == value
    url = served_options.http_url if protocol == "http" else served_options.grpc_url
    # llama.cpp refuses FP32's least normal temperature by name (its sampling overflows there): not among its streams
    at_once_and_staggered(url, model, protocol, least_temperature=model != "smollm2-llamacpp")
