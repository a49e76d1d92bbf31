"""automatic-speech-recognition: decoding with limits, the template on a tiny Whisper against transformers
in-process (each row alone), and bad files failing their own request only."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import random
import time
from pathlib import Path
from typing import Any

import fake_pb_utils as pb
import numpy as np
import pytest
import soundfile
from template_harness import answers, instantiate

from harness.audio import FORMATS, AudioOracle, encode, random_audio, read, sound
from tritonhf import AsyncClient, Client, InvalidInputError, Segment, Transcription
from tritonhf._wire.transport import json_body
from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.config import ModelOptions
from tritonhf.gallery.listing import parameters_of_folder
from tritonhf.runtime.audio import decode_audio
from tritonhf.runtime.common import BadRequest
from tritonhf.sdk.media import audio_list, wav
from tritonhf.sdk.testing import AsyncMemoryTransport, FakeServer, MemoryTransport


@pytest.mark.parametrize(("container", "subtype"), FORMATS)
@pytest.mark.parametrize(("rate", "channels"), [(16000, 1), (48000, 2), (8000, 2)])
def test_every_format_rate_and_channel_count_reads_as_the_reference(
    container: str, subtype: str, rate: int, channels: int
) -> None:
    data = encode(sound(random.Random(rate + channels), 1.5, rate, channels), rate, container, subtype)
    got = decode_audio(data, 16000)
    assert got.dtype == np.float32 and got.ndim == 1
    np.testing.assert_array_equal(got, read(data, 16000))
    assert abs(len(got) / 16000 - 1.5) < 0.1  # mixed down and resampled, not cut (MP3 and Opus pad a little)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "is empty"),
        (b"not audio at all" * 10, "not audio libsndfile can read (Format not recognised"),
        (b"\x89PNG\r\n\x1a\n" + bytes(200), "not audio"),
        (encode(np.zeros((16000, 1), np.float32)), "is silent (1.00 s of zeros)"),
    ],
)
def test_unusable_audio_is_refused_saying_why(data: bytes, words: str) -> None:
    with pytest.raises(BadRequest) as caught:
        decode_audio(data, 16000)
    assert words in str(caught.value)


def test_too_long_audio_is_refused_from_its_header_before_decoding() -> None:
    hour = encode(np.full((8000 * 3700, 1), 0.1, np.float32), 8000, "FLAC")  # 61 min, a few MB compressed
    started = time.perf_counter()
    with pytest.raises(BadRequest, match=r"is 3,700.0 s long, over the limit of 3,600 s \(parameter max_audio"):
        decode_audio(hour, 16000)
    assert time.perf_counter() - started < 1  # read from the header: decoding an hour takes far longer
    with pytest.raises(BadRequest, match="over the limit of 2 s"):
        decode_audio(encode(sound(random.Random(1), 2.5)), 16000, max_seconds=2)


# ------------------------------------------------------------------ the template


@pytest.fixture(scope="module", params=["pytorch", "ctranslate2"])
def whisper(request: pytest.FixtureRequest, tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The template on each engine; CTranslate2 in float32 gives transformers' greedy tokens on the tiny model."""
    repo = tmp_path_factory.mktemp("asr") / "repo"
    return instantiate(add_model(AddRequest("whisper", str(tiny["whisper"]), repo, name="asr", backend=request.param)))


def _column(*values: Any, dtype: Any = object) -> np.ndarray:
    return np.array([[value] for value in values], dtype=dtype)


def _outputs(response: Any) -> dict[str, Any]:
    assert not response.has_error(), response.error().message()
    found = {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors}
    return {
        "text": [value.decode() for value in found["TEXT"].reshape(-1)],
        "language": [value.decode() for value in found["SPOKEN_LANGUAGE"].reshape(-1)],
        "duration": found["DURATION"].reshape(-1).tolist(),
        "segments": [json.loads(value) for value in found["SEGMENTS"].reshape(-1)],
    }


def test_each_row_equals_transformers_alone_and_bad_files_fail_alone(whisper: Any, tiny: dict[str, Path]) -> None:
    oracle = AudioOracle(tiny["whisper"])
    rng = random.Random(5)
    files = [random_audio(rng)[0] for _ in range(6)]
    requests = [
        pb.InferenceRequest(AUDIO=_column(files[0], files[1])),
        pb.InferenceRequest(AUDIO=_column(b"junk" * 50)),
        pb.InferenceRequest(AUDIO=_column(files[2]), LANGUAGE=_column(b"de"), TIMESTAMPS=_column(True, dtype=bool)),
        pb.InferenceRequest(AUDIO=_column(files[3], encode(np.zeros((800, 1), np.float32)))),
        pb.InferenceRequest(AUDIO=_column(files[4]), TASK=_column(b"translate"), MAX_TOKENS=_column(5, dtype=np.int32)),
        pb.InferenceRequest(AUDIO=_column(files[5]), PROMPT=_column(b"an earlier sentence")),
        pb.InferenceRequest(AUDIO=_column(files[0]), LANGUAGE=_column(b"xx")),
        pb.InferenceRequest(AUDIO=_column(files[0]), MAX_TOKENS=_column(0, dtype=np.int32)),
        pb.InferenceRequest(AUDIO=_column(files[0]), TASK=_column(b"summarise")),
    ]
    got = answers(whisper, requests)
    first = _outputs(got[0])
    for row in range(2):
        expected = oracle.transcribe(files[row])
        assert first["text"][row] == expected["text"] and first["language"][row] == expected["language"]
        assert abs(first["duration"][row] - expected["duration"]) < 1e-4
        (segment,) = first["segments"][row]
        assert segment["start"] == 0.0 and segment["text"] == expected["text"]
        assert segment["end"] == pytest.approx(expected["duration"], abs=0.005)
    assert got[1].has_error() and "input 'AUDIO' is not audio" in got[1].error().message()
    third = _outputs(got[2])
    assert third["text"][0] == oracle.transcribe(files[2], language="de", timestamps=True)["text"]
    assert third["language"] == ["de"]
    segments = third["segments"][0]
    assert segments and "".join(s["text"] for s in segments).replace(" ", "") == third["text"][0].replace(" ", "")
    assert all(0 <= s["start"] <= s["end"] <= third["duration"][0] + 1e-6 for s in segments)
    assert got[3].has_error() and got[3].error().message().startswith("row 1: input 'AUDIO' is silent")
    fifth = _outputs(got[4])
    assert fifth["text"][0] == oracle.transcribe(files[4], task="translate", max_tokens=5)["text"]
    assert len(fifth["text"][0]) <= 5  # one character a token in this vocabulary
    assert _outputs(got[5])["text"][0] == oracle.transcribe(files[5], prompt="an earlier sentence")["text"]
    assert "input 'LANGUAGE' 'xx' is not a language of this model; it knows: de, en, fr" in got[6].error().message()
    assert "input 'MAX_TOKENS' is 0; it must be between 1 and 64" in got[7].error().message()
    assert "input 'TASK' is 'summarise'; it must be transcribe or translate" in got[8].error().message()


@pytest.mark.slow  # seconds of CPU: `make test` runs it, `make test-fast` leaves it out
def test_timestamped_rows_equal_transformers_which_reads_even_a_short_file_window_after_window(
    whisper: Any, tiny: dict[str, Path]
) -> None:
    """With timestamps, transformers decodes a short file again from its last complete segment (the long-form
    loop over its one window): the served text includes what that second pass reads, on either engine."""
    oracle = AudioOracle(tiny["whisper"])
    rng = random.Random(21)
    rows = [(random_audio(rng)[0], rng.randint(20, 64)) for _ in range(16)]
    requests = [pb.InferenceRequest(AUDIO=_column(data), TIMESTAMPS=_column(True, dtype=bool),
                                    MAX_TOKENS=_column(limit, dtype=np.int32)) for data, limit in rows]  # fmt: skip
    got = [_outputs(found)["text"][0] for found in answers(whisper, requests)]
    assert got == [oracle.transcribe(data, timestamps=True, max_tokens=limit)["text"] for data, limit in rows]


def test_a_file_longer_than_a_window_is_read_whole_with_times_into_the_file(
    whisper: Any, tiny: dict[str, Path]
) -> None:
    data = encode(sound(random.Random(8), 70.0), 16000, "FLAC")
    (found,) = answers(whisper, [pb.InferenceRequest(AUDIO=_column(data), LANGUAGE=_column(b"en"))])
    got = _outputs(found)
    assert got["text"][0] == AudioOracle(tiny["whisper"]).transcribe(data, language="en")["text"]
    assert got["duration"] == [70.0]
    starts = [segment["start"] for segment in got["segments"][0]]
    assert starts == sorted(starts) and starts[-1] >= 30.0, "the later windows' times count from the file's start"


def test_sampling_is_seeded_per_request_whatever_it_is_batched_with(whisper: Any, tiny: dict[str, Path]) -> None:
    rng = random.Random(9)
    data = random_audio(rng)[0]
    options = {"TEMPERATURE": _column(0.8, dtype=np.float32), "SEED": _column(4, dtype=np.int64),
               "LANGUAGE": _column(b"en")}  # fmt: skip
    (alone,) = answers(whisper, [pb.InferenceRequest(AUDIO=_column(data), **options)])
    batched = answers(
        whisper,
        [pb.InferenceRequest(AUDIO=_column(random_audio(rng)[0])), pb.InferenceRequest(AUDIO=_column(data), **options)],
    )
    assert _outputs(batched[1])["text"] == _outputs(alone)["text"]
    if not hasattr(whisper.engine, "ct2"):  # PyTorch: transformers' own sampling from the same seed
        expected = AudioOracle(tiny["whisper"]).transcribe(data, language="en", temperature=0.8, seed=4)["text"]
        assert _outputs(alone)["text"] == [expected]
    else:  # CTranslate2 has its own generator: the seed decides, and only the seed
        options["SEED"] = _column(5, dtype=np.int64)
        (other,) = answers(whisper, [pb.InferenceRequest(AUDIO=_column(data), **options)])
        assert _outputs(other)["text"] != _outputs(alone)["text"]


def test_a_temperature_near_zero_is_answered_or_refused_by_name_and_its_batch_is_answered(
    whisper: Any, tiny: dict[str, Path]
) -> None:
    """At a temperature near FP32's least (1e-38), transformers' sampling divides the logits into infinities and
    fails: the PyTorch engine refuses that row naming TEMPERATURE; CTranslate2 samples it (the likeliest tokens,
    the greedy text). Either way the other rows of the batch get the answers they get alone."""
    rng = random.Random(12)
    files = [random_audio(rng)[0] for _ in range(3)]
    english = {"LANGUAGE": _column(b"en")}
    tiny_t = {"TEMPERATURE": _column(1.175494351e-38, dtype=np.float32), "SEED": _column(3, dtype=np.int64)}
    sampled = {"TEMPERATURE": _column(0.8, dtype=np.float32), "SEED": _column(4, dtype=np.int64)}

    def request(index: int, **options: np.ndarray) -> Any:
        return pb.InferenceRequest(AUDIO=_column(files[index]), **english, **options)

    got = answers(whisper, [request(0), request(1, **tiny_t), request(2, **sampled)])
    assert _outputs(got[0])["text"] == _outputs(answers(whisper, [request(0)])[0])["text"]
    assert _outputs(got[2])["text"] == _outputs(answers(whisper, [request(2, **sampled)])[0])["text"]
    if hasattr(whisper.engine, "ct2"):
        assert _outputs(got[1])["text"] == _outputs(answers(whisper, [request(1)])[0])["text"]
    else:
        assert got[1].has_error()
        assert "input 'TEMPERATURE' is 1.17549e-38, a temperature at which transformers' sampling fails" in (
            got[1].error().message()
        )


@pytest.fixture(scope="module")
def streamed(whisper: Any, tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The template added with --stream (decoupled), on the engine of ``whisper``."""
    repo = tmp_path_factory.mktemp("asr-stream") / "repo"
    backend = "ctranslate2" if hasattr(whisper.engine, "ct2") else "pytorch"
    added = AddRequest("whisper", str(tiny["whisper"]), repo, name="asr", backend=backend,
                       options=ModelOptions(stream=True))  # fmt: skip
    folder = add_model(added)
    assert "decoupled: true" in (folder / "config.pbtxt").read_text()
    return instantiate(folder)


def _streamed(model: Any, requests: list[Any], timeout: float = 120.0) -> list[list[Any]]:
    """Every response each request got, in order (the last one carried the final flag)."""
    assert model.execute(requests) is None
    deadline = time.monotonic() + timeout
    while not all(request.sender.closed for request in requests):
        assert time.monotonic() < deadline, "a streamed request never ended"
        time.sleep(0.001)
    return [request.sender.responses for request in requests]


def _part(response: Any) -> dict[str, Any]:
    assert not response.has_error(), response.error().message()
    found = {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors}
    assert "TEXT" not in found, "a part carries TEXT_DELTA, the whole answer TEXT"
    return {
        "delta": [value.decode() for value in found["TEXT_DELTA"].reshape(-1)],
        "segments": [json.loads(value) for value in found["SEGMENTS"].reshape(-1)],
        "language": [value.decode() for value in found["SPOKEN_LANGUAGE"].reshape(-1)],
    }


@pytest.mark.slow  # seconds of CPU: `make test` runs it, `make test-fast` leaves it out
def test_a_streamed_model_sends_parts_as_windows_end_then_the_whole_answer(
    streamed: Any, whisper: Any, tiny: dict[str, Path]
) -> None:
    """Each request's parts add up to its answer, and its last response is exactly what the same model added without
    --stream answers (itself equal to transformers); a long file arrives window by window on either engine, with a
    prompt and sampling too; a bad file fails alone; a request whose caller left is not decoded further."""
    rng = random.Random(31)
    short = [random_audio(rng)[0] for _ in range(2)]
    long = encode(sound(random.Random(8), 70.0), 16000, "FLAC")
    uri = b"data:audio/flac;base64," + base64.b64encode(long)
    translated = {"LANGUAGE": _column(b"de"), "TASK": _column(b"translate"), "PROMPT": _column(b"an earlier sentence"),
                  "TEMPERATURE": _column(0.8, dtype=np.float32), "SEED": _column(3, dtype=np.int64)}  # fmt: skip
    make = [
        lambda: pb.InferenceRequest(AUDIO=_column(short[0]), LANGUAGE=_column(b"en")),
        lambda: pb.InferenceRequest(AUDIO=_column(uri), LANGUAGE=_column(b"en")),  # the JSON routes' form
        lambda: pb.InferenceRequest(AUDIO=_column(short[1], short[0]), TIMESTAMPS=_column(True, True, dtype=bool)),
        lambda: pb.InferenceRequest(AUDIO=_column(long), **translated),  # a prompt, sampling: window by window too
        lambda: pb.InferenceRequest(AUDIO=_column(b"junk" * 50)),
    ]
    got = _streamed(streamed, [build() for build in make])
    plain = answers(whisper, [build() for build in make[:4]])
    for request, (responses, expected) in enumerate(zip(got, plain)):
        *parts, last = responses
        whole = _outputs(last)
        assert whole == _outputs(expected), f"request {request}: the last answer is the plain model's"
        for row, text in enumerate(whole["text"]):
            pieces = [_part(part) for part in parts]
            assert "".join(piece["delta"][row] for piece in pieces).strip() == text
            assert [s for piece in pieces for s in piece["segments"][row]] == whole["segments"][row]
            assert all(piece["language"] == whole["language"] for piece in pieces)
    assert len(got[1]) - 1 == len(got[3]) - 1 == 3, "each window of 70 s is sent as it ends"
    (refused,) = got[4]
    assert refused.has_error() and "input 'AUDIO' is not audio" in refused.error().message()
    left = pb.InferenceRequest(AUDIO=_column(long), LANGUAGE=_column(b"en"))
    left.cancelled = True
    ((only,),) = _streamed(streamed, [left])  # no part: only the (unread) final answer
    assert _outputs(only)["text"] == [""], "a request whose caller left is not decoded"


def test_a_generation_config_the_window_loop_does_not_follow_keeps_the_whole_file_call(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    """A Whisper whose generation config conditions each window on the text before it: on PyTorch a streamed long
    file is then read by transformers' whole-file ``generate`` (one part, transformers' answer), not by the
    one-window loop, which does not condition."""
    import shutil

    from transformers import GenerationConfig

    model = tmp_path / "whisper"
    shutil.copytree(tiny["whisper"], model)
    generation = GenerationConfig.from_pretrained(model)
    generation.condition_on_prev_tokens = True
    generation.save_pretrained(model)
    added = AddRequest("whisper", str(model), tmp_path / "repo", name="asr", backend="pytorch",
                       options=ModelOptions(stream=True))  # fmt: skip
    served = instantiate(add_model(added))
    assert served.engine.asked == ["condition_on_prev_tokens"]  # so no window loop for a long file
    long = encode(sound(random.Random(8), 70.0), 16000, "FLAC")
    limit = 20  # the text before a window joins its prompt: room for both in the tiny decoder's 128 positions
    request = pb.InferenceRequest(AUDIO=_column(long), LANGUAGE=_column(b"en"),
                                  MAX_TOKENS=_column(limit, dtype=np.int32))  # fmt: skip
    ((*parts, last),) = _streamed(served, [request])
    expected = AudioOracle(model).transcribe(long, language="en", max_tokens=limit)["text"]
    assert len(parts) == 1 and _outputs(last)["text"] == [expected]


def test_a_part_the_stub_refuses_stops_only_that_request_and_the_batch_answers_the_others(
    streamed: Any, whisper: Any
) -> None:
    """A send that raises (a closed sender) for one request's part: that request is decoded no further and
    gets nothing more, and the other request of the batch gets its parts and answer."""
    rng = random.Random(32)
    long = encode(sound(random.Random(8), 70.0), 16000, "FLAC")
    left = pb.InferenceRequest(AUDIO=_column(long), LANGUAGE=_column(b"en"))
    left.sender.refusals = 10**6  # every send from the first part on
    data = random_audio(rng)[0]
    stays = pb.InferenceRequest(AUDIO=_column(data), LANGUAGE=_column(b"en"))
    assert streamed.execute([left, stays]) is None
    deadline = time.monotonic() + 120
    while not stays.sender.closed:
        assert time.monotonic() < deadline, "the request beside a refused one never ended"
        time.sleep(0.001)
    *parts, last = stays.sender.responses
    (expected,) = answers(whisper, [pb.InferenceRequest(AUDIO=_column(data), LANGUAGE=_column(b"en"))])
    assert _outputs(last) == _outputs(expected)
    assert "".join(_part(part)["delta"][0] for part in parts).strip() == _outputs(expected)["text"][0]
    assert left.sender.responses == [] and not left.sender.closed
    (responses,) = _streamed(streamed, [pb.InferenceRequest(AUDIO=_column(data), LANGUAGE=_column(b"en"))])
    assert _outputs(responses[-1]) == _outputs(expected), "the model answers the next batch"


def test_speech_models_refuse_what_they_cannot_do(tiny: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(GalleryError, match="is served with PyTorch, CTranslate2, OpenVINO GenAI: --backend auto or"):
        add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", backend="onnx"))
    with pytest.raises(GalleryError, match="--backend auto or one of pytorch, ctranslate2, openvino, not 'onnx'"):
        add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", backend="onnx", quantize="int8"))
    with pytest.raises(GalleryError, match="--backend openvino writes the converted model into the repository"):
        add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", backend="openvino", vendor=False))
    with pytest.raises(GalleryError, match=r"--backend openvino cannot serve .*: it runs Whisper models only"):
        add_model(AddRequest("asr", str(tiny["wav2vec2"]), tmp_path / "repo", backend="openvino"))
    with pytest.raises(GalleryError, match="CTranslate2 runs Whisper models only"):
        add_model(AddRequest("asr", str(tiny["wav2vec2"]), tmp_path / "repo", backend="ctranslate2"))
    with pytest.raises(GalleryError, match="the converted model into the repository: no --no-vendor"):
        add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", backend="ctranslate2", vendor=False))
    with pytest.raises(GalleryError, match="is for automatic-speech-recognition, not feature-extraction"):
        add_model(AddRequest("feature-extraction", str(tiny["encoder"]), tmp_path / "repo", backend="ctranslate2"))
    with pytest.raises(GalleryError, match="--stream is for automatic-speech-recognition"):
        add_model(AddRequest("feature-extraction", str(tiny["encoder"]), tmp_path / "repo",
                             options=ModelOptions(stream=True)))  # fmt: skip
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_a_whisper_whose_generation_config_asks_what_ct2_does_not_do_is_served_by_pytorch(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    """A generation config with ``condition_on_prev_tokens`` or ``no_speech_threshold`` reads a long file otherwise
    than the CTranslate2 reader: --backend ctranslate2 refuses it, naming the setting; auto keeps PyTorch and says
    why; a CTranslate2 model whose generation config was edited so afterwards does not load (nothing silently
    differs from transformers)."""
    import shutil

    asking = tmp_path / "asking"
    shutil.copytree(tiny["whisper"], asking)
    generation = json.loads((asking / "generation_config.json").read_text())
    (asking / "generation_config.json").write_text(json.dumps({**generation, "condition_on_prev_tokens": True}))
    with pytest.raises(GalleryError, match=r"cannot serve .* sets condition_on_prev_tokens, which CTranslate2"):
        add_model(AddRequest("whisper", str(asking), tmp_path / "repo", name="refused", backend="ctranslate2"))
    folder = add_model(AddRequest("whisper", str(asking), tmp_path / "repo", name="auto"))
    config = (folder / "config.pbtxt").read_text()
    assert 'string_value: "pytorch"' in config and "condition_on_prev_tokens" in config
    assert not (folder / "1" / "weights" / "ct2").exists()

    converted = add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", name="ct2",
                                     backend="ctranslate2"))  # fmt: skip
    edited = converted / "1" / "weights" / "generation_config.json"
    edited.write_text(json.dumps({**json.loads(edited.read_text()), "no_speech_threshold": 0.6}))
    with pytest.raises(ValueError, match="no_speech_threshold, which the CTranslate2 reader does not do: add the"):
        instantiate(converted)


def test_auto_measures_both_engines_and_ct2_keeps_no_pytorch_weights(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--backend auto: both engines timed here, the figures and the choice in the config; a CTranslate2 model
    is served from weights/ct2 alone (the PyTorch weights are not kept), a PyTorch one has no ct2 folder.
    OpenVINO GenAI's exporter is not downloaded by auto: where its venv is not made, the config says so."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no exporter venv made here
    folder = add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", name="asr"))
    config = (folder / "config.pbtxt").read_text()
    assert "tritonhf.engine_calibration" in config and "PyTorch" in config and "CTranslate2" in config
    assert "OpenVINO GenAI not measured: its exporter's venv is not made here (--backend openvino makes it" in config
    assert not (folder / "1" / "weights" / "openvino").exists()
    weights = folder / "1" / "weights"
    if 'string_value: "ctranslate2"' in config:
        assert (weights / "ct2" / "model.bin").is_file() and not list(weights.glob("*.safetensors"))
        assert 'key: "tritonhf.compute_type"' in config
    else:
        assert not (weights / "ct2").exists() and list(weights.glob("*.safetensors"))


@pytest.mark.slow  # seconds of CPU: `make test` runs it, `make test-fast` leaves it out
def test_auto_with_int8_times_ct2_with_the_encoder_it_would_serve_with(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--backend auto --quantize int8: CTranslate2's encoder on OpenVINO is measured (and gated) before the engines
    are, so CTranslate2 is timed as it would serve; one window and 8 at once, all in int8; the encoder file is kept
    only on a CTranslate2 model that kept it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no exporter venv: OpenVINO GenAI not measured
    folder = add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", name="asr", quantize="int8"))
    params = parameters_of_folder(folder)
    calibration = params["tritonhf.engine_calibration"]
    assert "measured here in int8" in calibration and "one window PyTorch" in calibration, calibration
    assert "8 windows at once PyTorch" in calibration and "(the fastest at 8 is kept" in calibration
    assert "encoder on OpenVINO" in params["tritonhf.encoder_check"]
    kept = params.get("tritonhf.encoder") == "openvino"
    assert (folder / "1" / "weights" / "ct2" / "openvino_encoder.xml").is_file() == kept
    assert not kept or params["tritonhf.backend"] == "ctranslate2"


def test_int8_rows_are_batched_and_equal_themselves_alone(tiny: dict[str, Path], tmp_path: Path) -> None:
    """--backend pytorch --quantize int8: the gate's figures in the config; activations scaled per token, so rows
    computed together (one group here) equal themselves alone and the int8 model in-process."""
    request = AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", name="asr8", quantize="int8",
                         backend="pytorch")  # fmt: skip
    folder = add_model(request)
    config = (folder / "config.pbtxt").read_text()
    assert "tritonhf.quantize" in config and "int8 encoder states (CTC: logits) within cosine" in config
    assert "a scale per token" in config
    model = instantiate(folder)
    oracle = AudioOracle(tiny["whisper"], int8=True)
    rng = random.Random(12)
    files = [random_audio(rng)[0] for _ in range(3)]
    requests = [pb.InferenceRequest(AUDIO=_column(files[0], files[1])),
                pb.InferenceRequest(AUDIO=_column(files[2]), LANGUAGE=_column(b"en"))]  # fmt: skip
    batched = answers(model, requests)
    assert _outputs(batched[0])["text"] == [oracle.transcribe(files[0])["text"], oracle.transcribe(files[1])["text"]]
    assert _outputs(batched[1])["text"] == [oracle.transcribe(files[2], language="en")["text"]]
    (alone,) = answers(model, [pb.InferenceRequest(AUDIO=_column(files[1]))])
    assert _outputs(alone)["text"][0] == _outputs(batched[0])["text"][1]


@pytest.mark.slow  # seconds of CPU: `make test` runs it, `make test-fast` leaves it out
def test_ct2_int8_passes_its_gate_and_rows_equal_themselves_alone(tiny: dict[str, Path], tmp_path: Path) -> None:
    """--backend ctranslate2 --quantize int8: CTranslate2's int8 against its own float32 (the gate's figures in the
    config), and the encoder on OpenVINO measured against CTranslate2's (gated against float32, kept where faster,
    its file removed otherwise); rows computed together equal themselves alone (CTranslate2 scales activations per
    row; OpenVINO encodes each row alone)."""
    request = AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", name="asr8", backend="ctranslate2",
                         quantize="int8")  # fmt: skip
    folder = add_model(request)
    config = (folder / "config.pbtxt").read_text()
    assert "int8 encoder states (CTC: logits) within cosine" in config and 'string_value: "int8"' in config
    assert "encoder on OpenVINO" in config and "states within cosine 0.9" in config
    kept = 'key: "tritonhf.encoder"' in config
    assert (folder / "1" / "weights" / "ct2" / "openvino_encoder.xml").is_file() == kept
    model = instantiate(folder)
    assert (model.engine.ct2.openvino is not None) == kept
    rng = random.Random(13)
    files = [random_audio(rng)[0] for _ in range(4)]
    batched = answers(model, [pb.InferenceRequest(AUDIO=_column(*files), LANGUAGE=_column(*[b"en"] * 4))])
    texts = _outputs(batched[0])["text"]
    assert len(set(texts)) > 1  # the answers depend on the audio
    for data, text in zip(files, texts):
        (alone,) = answers(model, [pb.InferenceRequest(AUDIO=_column(data), LANGUAGE=_column(b"en"))])
        assert _outputs(alone)["text"] == [text]


# ------------------------------------------------------------------ the SDK


def test_what_a_caller_holds_becomes_the_bytes_of_a_file(tmp_path: Path) -> None:
    samples = sound(random.Random(2), 0.5, 22050, 2)
    data = wav(samples, 22050)
    back, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    assert rate == 22050 and np.array_equal(back, samples)  # float WAV: lossless
    path = tmp_path / "a.flac"
    path.write_bytes(encode(samples, 22050, "FLAC"))
    assert audio_list(path) == ([path.read_bytes()], True)
    assert audio_list([data, (samples, 22050)]) == ([data, data], False)
    assert audio_list((samples[:, 0], 22050))[1] is True


@pytest.mark.parametrize(
    ("held", "words"),
    [
        (b"", "is empty"),
        ("/nonexistent.wav", "cannot read"),
        ((np.zeros(10), 44.1), "sampling rate must be an int"),
        ((np.array(["a"]), 16000), "samples are numbers"),
        (3.5, "must be a path, the bytes of an audio file or (samples, sampling_rate)"),
    ],
)
def test_what_is_not_audio_is_refused_before_sending(held: object, words: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        audio_list(held)  # type: ignore[arg-type]
    assert words in str(caught.value)


def test_transcribe_sends_files_and_options_splits_batches_and_reads_segments() -> None:
    seen: list[dict[str, np.ndarray]] = []

    def handler(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        seen.append(inputs)
        sizes = [len(bytes(item)) for item in inputs["AUDIO"].reshape(-1)]
        return {
            "TEXT": np.array([[f"{size} bytes".encode()] for size in sizes], dtype=object),
            "SPOKEN_LANGUAGE": np.array([[b"de"] for _ in sizes], dtype=object),
            "DURATION": np.array([[size / 100] for size in sizes], dtype=np.float32),
            "SEGMENTS": np.array(
                [[json.dumps([{"start": 0.0, "end": 1.5, "text": f"{size}"}]).encode()] for size in sizes], dtype=object
            ),
        }

    server = FakeServer()
    server.add("asr", "automatic-speech-recognition", handler, max_batch_size=2)
    files = [encode(sound(random.Random(i), 0.2 + 0.1 * i)) for i in range(3)]
    with Client(transport=MemoryTransport(server), timeout=5) as client:
        one = client.transcribe(files[0])
        many = client.transcribe(files, language="de", task="translate", timestamps=True, prompt="before",
                                 temperature=0.5, seed=7, max_tokens=9)  # fmt: skip
        with pytest.raises(InvalidInputError, match="task must be 'transcribe' or 'translate'"):
            client.transcribe(files[0], task="summarise")
    assert one.text == f"{len(files[0])} bytes" and one.language == "de"
    assert one.segments == (Segment(0.0, 1.5, str(len(files[0]))),)
    assert [t.text for t in many] == [f"{len(f)} bytes" for f in files]
    assert "LANGUAGE" not in seen[0] and "TEMPERATURE" not in seen[0]  # defaults are the server's
    chunks = seen[1:]
    assert sorted(len(c["AUDIO"]) for c in chunks) == [1, 2]
    for chunk in chunks:
        assert chunk["LANGUAGE"][0, 0] == b"de" and chunk["TASK"][0, 0] == b"translate"
        assert chunk["TIMESTAMPS"].all() and chunk["PROMPT"][0, 0] == b"before"
        assert chunk["TEMPERATURE"][0, 0] == pytest.approx(0.5) and chunk["SEED"][0, 0] == 7
        assert chunk["MAX_TOKENS"][0, 0] == 9


def _speech_outputs(text: str, segments: list[dict[str, Any]], delta: bool = False) -> dict[str, np.ndarray]:
    return {
        "TEXT_DELTA" if delta else "TEXT": np.array([[text.encode()]], dtype=object),
        "SEGMENTS": np.array([[json.dumps(segments).encode()]], dtype=object),
        "SPOKEN_LANGUAGE": np.array([[b"en"]], dtype=object),
        "DURATION": np.array([[41.0]], dtype=np.float32),
    }


def test_a_streaming_speech_model_is_read_part_by_part_or_whole_one_file_a_request() -> None:
    """On a model added with --stream (decoupled): stream=True yields the parts and then holds the whole answer; a
    call without stream sends each file as its own request and returns the whole answers; closing a stream early
    cancels it; a model that answers whole files refuses stream=True."""
    seen: list[bytes] = []
    first = {"start": 0.0, "end": 30.0, "text": "Hello"}
    second = {"start": 30.0, "end": 41.0, "text": "world"}

    def stream(inputs: dict[str, np.ndarray]) -> Any:
        (data,) = inputs["AUDIO"].reshape(-1)
        file = bytes(data)
        seen.append(file)
        yield _speech_outputs("Hello", [first], delta=True)
        yield _speech_outputs(" world", [second], delta=True)
        yield _speech_outputs(f"Hello world {len(file)}", [first, second])

    server = FakeServer()
    server.add("asr", "automatic-speech-recognition", stream=stream).config["model_transaction_policy"] = {
        "decoupled": True
    }
    server.add("plain", "automatic-speech-recognition", lambda inputs: _speech_outputs("whole", []))
    files = [encode(sound(random.Random(i), 0.2 + 0.1 * i)) for i in range(3)]
    whole = (Segment(0.0, 30.0, "Hello"), Segment(30.0, 41.0, "world"))
    with Client(transport=MemoryTransport(server), timeout=5) as client:
        with client.transcribe(files[0], model="asr", stream=True) as parts:
            got = list(parts)
        assert [part.text for part in got] == ["Hello", " world"]
        assert [part.segments for part in got] == [whole[:1], whole[1:]]
        assert got[0].language == "en" and got[0].duration == 41.0
        assert parts.result == Transcription(f"Hello world {len(files[0])}", "en", 41.0, whole)
        assert seen == [files[0]]
        many = client.transcribe(files, model="asr", language="en")
        assert [found.text for found in many] == [f"Hello world {len(data)}" for data in files]
        assert sorted(seen[1:]) == sorted(files) and all(found.segments == whole for found in many)
        with client.transcribe(files[1], model="asr", stream=True) as parts:
            next(parts)
        assert server.cancelled == ["asr"]
        with pytest.raises(InvalidInputError, match="answers whole files: add it with `tritonhf gallery add autom"):
            client.transcribe(files[0], model="plain", stream=True)
        with pytest.raises(InvalidInputError, match="stream=True transcribes one file"):
            client.transcribe(files, model="asr", stream=True)

    async def read() -> tuple[list[str], Transcription | None]:
        async with AsyncClient(transport=AsyncMemoryTransport(server), timeout=5) as client:
            parts = await client.transcribe(files[2], model="asr", stream=True)
            texts = [part.text async for part in parts]
            return texts, parts.result

    texts, result = asyncio.run(read())
    assert texts == ["Hello", " world"] and result is not None and result.text == f"Hello world {len(files[2])}"


def test_the_json_routes_carry_an_encoded_file_as_a_data_uri_that_the_template_reads() -> None:
    """Triton's generate routes take JSON, which carries text: a file (bytes that are not UTF-8) goes as a base64
    data: URI, text as itself; the template decodes the URI to the same samples, and refuses a broken one."""
    data = encode(sound(random.Random(3), 0.5))
    body = json.loads(json_body({"AUDIO": np.array([[data]], dtype=object),
                                 "LANGUAGE": np.array([[b"en"]], dtype=object)}))  # fmt: skip
    assert body["LANGUAGE"] == "en" and body["AUDIO"].startswith("data:application/octet-stream;base64,")
    np.testing.assert_array_equal(decode_audio(body["AUDIO"].encode(), 16000), decode_audio(data, 16000))
    with pytest.raises(BadRequest, match="payload is not valid base64"):
        decode_audio(b"data:audio/wav;base64,@@@@", 16000)
    with pytest.raises(BadRequest, match="a data: URI that is not base64"):
        decode_audio(b"data:audio/wav,RIFF", 16000)


def test_segments_as_subtitles_in_openai_s_shapes() -> None:
    from tritonhf.sdk.subtitles import srt, vtt

    segments = [Segment(0.0, 2.5, " hello there"), Segment(2.5, 3725.0401, "general kenobi")]
    assert srt(segments) == (
        "1\n00:00:00,000 --> 00:00:02,500\nhello there\n\n2\n00:00:02,500 --> 01:02:05,040\ngeneral kenobi\n"
    )
    assert vtt(segments) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nhello there\n\n00:00:02.500 --> 01:02:05.040\ngeneral kenobi\n"
    )


def test_audio_routes_take_bodies_up_to_their_own_limit() -> None:
    from tritonhf.serve.limits import Limits

    limits = Limits(payload_limit=1000)
    assert limits.body_limit("/v1/audio/transcriptions") == (25_000_000, "--max-audio-bytes")
    assert limits.body_limit("/v1/embeddings") == (1000, "--payload-limit")
    assert "--max-audio-bytes" in Limits().argv()


# ------------------------------------------------------------------ CTC models (wav2vec2)


@pytest.fixture(scope="module")
def wav2vec2(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("ctc") / "repo"
    return instantiate(add_model(AddRequest("asr", str(tiny["wav2vec2"]), repo, name="ctc")))


def test_a_streamed_ctc_model_sends_each_file_whole_then_the_plain_answer(
    wav2vec2: Any, tiny: dict[str, Path], tmp_path: Path
) -> None:
    """A CTC model added with --stream: one part per file (its whole text), then exactly the plain model's answer."""
    folder = add_model(AddRequest("asr", str(tiny["wav2vec2"]), tmp_path / "repo", name="ctc",
                                  options=ModelOptions(stream=True)))  # fmt: skip
    streamed = instantiate(folder)
    rng = random.Random(16)
    files = [random_audio(rng)[0] for _ in range(2)]
    make = lambda: pb.InferenceRequest(AUDIO=_column(*files), TIMESTAMPS=_column(True, True, dtype=bool))  # noqa: E731
    ((*parts, last),) = _streamed(streamed, [make()])
    (expected,) = answers(wav2vec2, [make()])
    whole = _outputs(last)
    assert whole == _outputs(expected) and len(parts) == 2
    for row, part in enumerate(parts):
        found = _part(part)
        assert found["delta"][row] == whole["text"][row] and found["segments"][row] == whole["segments"][row]
        assert found["delta"][1 - row] == "" and found["segments"][1 - row] == [], "the other row is empty"
    streamed.finalize()


def test_max_audio_seconds_at_add_bounds_each_file_from_its_header(
    wav2vec2: Any, tiny: dict[str, Path], tmp_path: Path
) -> None:
    """`gallery add --max-audio-seconds 5`: a 6 s file is refused alone (its row named), a 4 s one beside it
    answered as the default model answers it; the flag and --param agree or the add is refused."""
    folder = add_model(AddRequest("asr", str(tiny["wav2vec2"]), tmp_path / "repo", name="short",
                                  options=ModelOptions(max_audio_seconds=5)))  # fmt: skip
    assert 'key: "max_audio_seconds"\n  value {\n    string_value: "5"' in (folder / "config.pbtxt").read_text()
    rng = random.Random(17)
    short, long = (encode(sound(rng, seconds), 16000, "FLAC") for seconds in (4.0, 6.0))
    (limited,) = answers(instantiate(folder), [pb.InferenceRequest(AUDIO=_column(short, long))])
    assert limited.has_error()
    message = limited.error().message()
    assert message.startswith("row 1: input 'AUDIO' is 6.0 s long, over the limit of 5 s (parameter max_audio_seconds)")
    (alone,) = answers(instantiate(folder), [pb.InferenceRequest(AUDIO=_column(short))])
    (default,) = answers(wav2vec2, [pb.InferenceRequest(AUDIO=_column(short))])
    assert _outputs(alone) == _outputs(default)
    add = lambda **extra: add_model(AddRequest("asr", str(tiny["wav2vec2"]), tmp_path / "other", **extra))  # noqa: E731
    with pytest.raises(GalleryError, match="--param max_audio_seconds=60 and --max-audio-seconds 5 disagree"):
        add(options=ModelOptions(max_audio_seconds=5), params={"max_audio_seconds": "60"})
    with pytest.raises(GalleryError, match="--max-audio-seconds must be 1 or more"):
        add(options=ModelOptions(max_audio_seconds=-1))
    with pytest.raises(GalleryError, match="--max-image-pixels is for image tasks; automatic-speech-recognition"):
        add(options=ModelOptions(max_image_pixels=1000))


def test_ctc_rows_equal_transformers_pipeline_alone_long_files_in_its_windows(
    wav2vec2: Any, tiny: dict[str, Path]
) -> None:
    """A CTC model: each file equals transformers' own ASR pipeline (chunk_length_s=30, stride_length_s=5) on
    that file, a 70 s file included (three overlapping windows); word timestamps as segments."""
    from harness.audio import CtcOracle

    oracle = CtcOracle(tiny["wav2vec2"])
    rng = random.Random(14)
    files = [random_audio(rng)[0] for _ in range(3)]
    long = encode(sound(random.Random(15), 70.0), 16000, "FLAC")
    requests = [
        pb.InferenceRequest(AUDIO=_column(files[0], files[1])),
        pb.InferenceRequest(AUDIO=_column(long)),
        pb.InferenceRequest(AUDIO=_column(files[2]), TIMESTAMPS=_column(True, dtype=bool)),
    ]
    got = answers(wav2vec2, requests)
    first = _outputs(got[0])
    assert first["text"] == [oracle.transcribe(files[0])["text"], oracle.transcribe(files[1])["text"]]
    assert first["language"] == ["", ""] and all(first["text"])
    assert _outputs(got[1])["text"] == [oracle.transcribe(long)["text"]]
    timed = _outputs(got[2])
    expected = oracle.transcribe(files[2], timestamps=True)
    assert timed["text"] == [expected["text"]]
    segments = timed["segments"][0]
    assert [s["text"] for s in segments] == [word for _, _, word in expected["words"]]
    for segment, (start, end, _) in zip(segments, expected["words"]):
        assert segment["start"] == pytest.approx(start, abs=0.006) and segment["end"] == pytest.approx(end, abs=0.006)


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("LANGUAGE", _column(b"en"), "input 'LANGUAGE' is given, but a CTC model has no language option"),
        ("TASK", _column(b"translate"), "input 'TASK' is 'translate': a CTC model only transcribes"),
        ("PROMPT", _column(b"earlier"), "input 'PROMPT' is given, but a CTC model takes no prompt"),
        ("TEMPERATURE", _column(0.5, dtype=np.float32), "input 'TEMPERATURE' is above 0"),
        ("MAX_TOKENS", _column(5, dtype=np.int32), "input 'MAX_TOKENS'"),
    ],
)
def test_ctc_refuses_options_it_cannot_honour(wav2vec2: Any, option: str, value: np.ndarray, words: str) -> None:
    data = random_audio(random.Random(16))[0]
    good, bad = answers(
        wav2vec2,
        [pb.InferenceRequest(AUDIO=_column(data)), pb.InferenceRequest(AUDIO=_column(data), **{option: value})],
    )
    assert _outputs(good)["text"][0]
    assert bad.has_error() and words in bad.error().message(), bad.error().message()


def test_ctc_int8_passes_its_gate_and_answers(tiny: dict[str, Path], tmp_path: Path) -> None:
    folder = add_model(AddRequest("asr", str(tiny["wav2vec2"]), tmp_path / "repo", name="ctc8", quantize="int8"))
    assert "within cosine" in (folder / "config.pbtxt").read_text()
    (found,) = answers(instantiate(folder), [pb.InferenceRequest(AUDIO=_column(random_audio(random.Random(17))[0]))])
    assert _outputs(found)["text"][0]


TOY_SPEECH_ENGINE = '''
import segments
import tritonhf_runtime as runtime


class ToyEngine:
    """Says how many samples a file has; takes no prompt."""

    max_tokens = 8

    def __init__(self, args, params, processor, config, streaming):
        self.rate = processor.feature_extractor.sampling_rate

    def check(self, options):
        if options["prompt"]:
            raise runtime.BadRequest("is given, but the toy engine takes no prompt.", "PROMPT")

    def prepare(self, samples, options):
        return {**options, "samples": samples, "duration": len(samples) / self.rate, "language": "en"}

    def transcribe(self, rows, parts=None):
        return {row: segments.whole_file(item, f"{len(item['samples'])} samples") for row, item in rows.items()}

    def close(self):
        pass


ENGINE = ToyEngine
'''


def test_a_new_speech_engine_is_one_module_and_one_line(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof for speech, as docs/guide.md ("How to add an engine") tells it: a module with the engine's methods
    and one line in gallery add's registry; `gallery add --backend toy` copies the module beside model.py and the
    template serves with it: its decoding, limits, per-row refusals and answers work unchanged."""
    from typer.testing import CliRunner

    from tritonhf.cli.main import app
    from tritonhf.gallery import families
    from tritonhf.gallery.families.speech import engines

    (tmp_path / "toy_engine.py").write_text(TOY_SPEECH_ENGINE)  # the one module
    line = engines.SpeechEngine("toy", "the toy engine", "counts samples", module=tmp_path / "toy_engine.py")
    monkeypatch.setattr(engines, "SPEECH", (*engines.SPEECH, line))  # the one line
    assert "toy: counts samples" in families.backend_help()
    repository = tmp_path / "repo"
    adding = ["gallery", "add", "asr", "--model", str(tiny["whisper"]), "--repository", str(repository)]
    added = CliRunner().invoke(app, [*adding, "--backend", "toy", "--name", "asr"])
    assert added.exit_code == 0, added.output
    assert "Serving asr with the toy engine: --backend toy" in added.output
    folder = repository / "asr"
    assert (folder / "1" / "toy_engine.py").is_file()
    assert parameters_of_folder(folder)["tritonhf.backend"] == "toy"
    model = instantiate(folder)
    assert type(model.engine).__name__ == "ToyEngine"
    try:
        data = encode(sound(random.Random(3), 2.0), 16000, "WAV")
        plain, prompted, too_many = (
            pb.InferenceRequest(AUDIO=_column(data)),
            pb.InferenceRequest(AUDIO=_column(data), PROMPT=_column(b"before")),
            pb.InferenceRequest(AUDIO=_column(data), MAX_TOKENS=_column(9, dtype=np.int32)),
        )
        got = answers(model, [plain, prompted, too_many])
        assert _outputs(got[0])["text"] == ["32000 samples"] and _outputs(got[0])["duration"] == [2.0]
        assert "input 'PROMPT' is given, but the toy engine takes no prompt" in got[1].error().message()
        assert "input 'MAX_TOKENS' is 9; it must be between 1 and 8" in got[2].error().message()
    finally:
        model.finalize()
    unknown = CliRunner().invoke(app, [*adding, "--backend", "nope", "--name", "other"])
    assert unknown.exit_code != 0 and "one of pytorch, ctranslate2, openvino, toy, not 'nope'" in unknown.output


def test_auto_times_a_speech_engine_added_by_one_line(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--backend auto measures every registered engine that can be timed: a line whose ``prepare`` makes the toy
    engine ready is timed beside PyTorch and CTranslate2 on the same windows, named in the figures, and, measured the
    fastest (its calls do nothing), kept: its module beside model.py, its choice in the config. One that cannot serve
    the model is named with its reason."""
    from tritonhf.gallery.families.speech import engines, measure
    from tritonhf.gallery.request import Choice

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no exporter venv: OpenVINO GenAI not timed
    (tmp_path / "toy_engine.py").write_text(TOY_SPEECH_ENGINE)
    timed: list[int] = []

    def ready(request: AddRequest, folder: Path, vendored: Path, progress: Any) -> measure.Ready:
        def timer(window: measure.Window) -> Any:
            assert window.features.shape[0] == 1 and window.suppress, "the window every engine is timed on"
            return lambda rows: lambda: timed.append(rows)

        return measure.Ready(timer, lambda reason, params: Choice("toy", reason, params, label="the toy engine"))

    toy = engines.SpeechEngine("toy", "the toy engine", "counts samples", module=tmp_path / "toy_engine.py",
                               prepare=ready)  # fmt: skip
    absent = engines.SpeechEngine("absent", "the absent engine", "serves nothing", prepare=lambda *_: "not here")
    monkeypatch.setattr(engines, "SPEECH", (*engines.SPEECH, toy, absent))  # the lines
    folder = add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "repo", name="asr"))
    params = parameters_of_folder(folder)
    calibration = params["tritonhf.engine_calibration"]
    assert calibration.startswith("the toy engine, measured here"), calibration
    assert (
        "one window PyTorch" in calibration and "CTranslate2" in calibration and "the toy engine 0.00 s" in calibration
    )
    assert "the absent engine not measured: not here" in calibration
    assert sorted(set(timed)) == [1, measure.CALLERS], "one window alone and CALLERS at once"
    assert params["tritonhf.backend"] == "toy" and (folder / "1" / "toy_engine.py").is_file()
    assert not (folder / "1" / "weights" / "ct2").exists() or params["tritonhf.backend"] == "ctranslate2"
