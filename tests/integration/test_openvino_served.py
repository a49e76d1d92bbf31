"""The text-generation template on its OpenVINO engine, and Whisper on OpenVINO GenAI's WhisperPipeline
(``--backend openvino``: exported at add in the exporter's own venv, made here on first use), served by a
real Triton (its own server: the shared one keeps a single text-generation model, so calls without model=
stay unambiguous, and the exporter's venv is not made on the shared server's critical path).

The batch-invariance seed of the OpenVINO engine: staggered concurrent streams (greedy, seeded
samples, stop strings, prompts past the context) over both protocols, each equal to its answer
alone. The engine's int8 weights are not transformers' fp32, so rows meet only themselves;
`gallery add` measures the agreement with transformers and writes it into the config. The Whisper seed:
mixed speech requests, each row equal to itself alone and to transformers' float32 answer.
"""

from __future__ import annotations

import random
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.audio import encode, sound
from harness.invariance import (
    AudioRowOracle,
    GenerationOracle,
    check_batched,
    check_generation,
    make_audio_cases,
    make_prompts,
)
from tritonhf import Client, InvalidInputError
from tritonhf.bootstrap import Server, Workspace
from tritonhf.deploy.requirements import needed_packages
from tritonhf.gallery import AddRequest, ModelOptions, add_model
from tritonhf.gallery.config import parameters_of, parse_config
from tritonhf.gallery.installed import openvino_genai_missing as openvino_missing
from tritonhf.gallery.listing import parameters_of_folder

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(openvino_missing() is not None, reason=str(openvino_missing())),
]


@pytest.fixture(scope="module")
def served_ov(make_workspace: Callable[[str], Workspace], tiny: dict[str, Path]) -> Iterator[Server]:
    workspace = make_workspace("openvino")
    add_model(AddRequest("text-generation", str(tiny["llama"]), workspace.model_repository, name="writer-ov"))
    for name, quantize, stream in (("asr-ov", None, False), ("asr-ov8", "int8", False), ("asr-ov-stream", None, True)):
        add_model(AddRequest("whisper", str(tiny["whisper"]), workspace.model_repository, name=name,
                             backend="openvino", quantize=quantize, options=ModelOptions(stream=stream)))  # fmt: skip
    with Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_each_stream_equals_itself_alone(served_ov: Server, tiny: dict[str, Path], protocol: str) -> None:
    config = (Path(served_ov.repository) / "writer-ov" / "config.pbtxt").read_text()
    assert parameters_of(parse_config(config))["tritonhf.backend"] == "openvino", "auto chose OpenVINO on a CPU"
    url = served_ov.http_url if protocol == "http" else served_ov.grpc_url
    oracle = GenerationOracle(tiny["llama"], versus_transformers=False)
    prompts = make_prompts(
        zlib.crc32(f"writer-ov/{protocol}".encode()), count=24, context_words=oracle.context, penalties=True
    )
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


@pytest.fixture(scope="module")
def speech_oracle(tiny: dict[str, Path]) -> AudioRowOracle:
    """transformers on the tiny Whisper, one file alone (own_sampling: the pipeline has its own generator)."""
    return AudioRowOracle(tiny["whisper"], own_sampling=True)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_whisper_rows_on_openvino_genai_get_the_answer_they_get_alone(
    served_ov: Server, speech_oracle: AudioRowOracle, protocol: str
) -> None:
    """Whisper on WhisperPipeline (float32): every row of a mixed batch (formats, rates, lengths, languages,
    tasks, prompts, limits, seeded sampling, broken files) equals itself alone, and a greedy row transformers'
    answer; a sampling row has only itself (the pipeline has its own generator)."""
    url = served_ov.http_url if protocol == "http" else served_ov.grpc_url
    cases = make_audio_cases("asr-ov", seed=zlib.crc32(f"asr-ov/{protocol}".encode()), count=16)
    check_batched(served_ov.http_url, url, "asr-ov", cases, speech_oracle)


def test_streamed_whisper_rows_on_openvino_genai_get_the_answer_they_get_alone(
    served_ov: Server, speech_oracle: AudioRowOracle
) -> None:
    """--stream: each row's text is sent as the pipeline decodes it, then its segments; the parts add up to the
    whole answer, which equals the row alone and transformers' (the harness checks the segments add up)."""
    cases = make_audio_cases("asr-ov-stream", seed=zlib.crc32(b"asr-ov-stream"), count=12)
    check_batched(served_ov.http_url, served_ov.grpc_url, "asr-ov-stream", cases, speech_oracle, streamed=True)
    data = encode(sound(random.Random(8), 40.0))  # two windows
    with Client(served_ov.grpc_url) as client:
        with client.transcribe(data, model="asr-ov-stream", timestamps=True, stream=True) as parts:
            got = list(parts)
        assert parts.result is not None and len(got) >= 2
        assert "".join(part.text for part in got).strip() == parts.result.text
        assert [segment for part in got for segment in part.segments] == list(parts.result.segments)
        assert all(0.0 <= segment.start <= segment.end <= parts.result.duration for segment in parts.result.segments)


def test_int8_whisper_rows_on_openvino_genai_get_exactly_the_answer_they_get_alone(
    served_ov: Server, speech_oracle: AudioRowOracle
) -> None:
    """--quantize int8: int8 weights in OpenVINO's default precision, behind the speech gate (its figures in the
    config); rows are compared with themselves only (int8 is not transformers' float32)."""
    params = parameters_of_folder(Path(served_ov.repository) / "asr-ov8")
    assert params["tritonhf.compute_type"] == "int8" and "encoder states" in params["tritonhf.int8_quality"]
    cases = make_audio_cases("asr-ov8", seed=zlib.crc32(b"asr-ov8"), count=12)
    check_batched(served_ov.http_url, served_ov.grpc_url, "asr-ov8", cases, speech_oracle, versus_transformers=False)


def test_whisper_on_openvino_genai_is_served_from_its_export(served_ov: Server, speech_oracle: AudioRowOracle) -> None:
    """The export alone in the repository (no PyTorch weights), the pipeline's packages in the requirements,
    a detected language and timestamps within the file, and a bad file refused by name."""
    folder = Path(served_ov.repository) / "asr-ov"
    assert parameters_of_folder(folder)["tritonhf.backend"] == "openvino"
    weights = folder / "1" / "weights"
    assert (weights / "openvino" / "openvino_decoder_model.xml").is_file() and not list(weights.glob("*.safetensors"))
    assert {"openvino-genai", "openvino-tokenizers"} <= set(needed_packages(Path(served_ov.repository)))
    rng = random.Random(5)
    data = encode(sound(rng, 4.0))
    assert speech_oracle.oracle is not None  # a Whisper's: transformers' generate
    expected = speech_oracle.oracle.transcribe(data, timestamps=True)
    with Client(served_ov.grpc_url) as client:
        found = client.transcribe(data, model="asr-ov", timestamps=True)
        assert (found.text, found.language) == (expected["text"], expected["language"])
        assert all(0.0 <= segment.start <= segment.end <= found.duration for segment in found.segments)
        with pytest.raises(InvalidInputError, match="AUDIO"):
            client.transcribe(b"not audio at all" * 4, model="asr-ov")


def test_auto_measures_openvino_genai_once_its_exporter_is_made(
    served_ov: Server, tiny: dict[str, Path], tmp_path: Path
) -> None:
    """--backend auto times WhisperPipeline beside PyTorch and CTranslate2 once the exporter's venv is made (the
    fixture's --backend openvino made it), and writes its figure into the config."""
    folder = add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", name="asr-auto"))
    params = parameters_of_folder(folder)
    calibration = params["tritonhf.engine_calibration"]
    assert ", OpenVINO GenAI " in calibration and "not measured" not in calibration, calibration
    assert (folder / "1" / "weights" / "openvino").is_dir() == (params["tritonhf.backend"] == "openvino")
