"""All five gallery templates in one real server, queried raw (HTTP JSON, gRPC) and via the sdk."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline

from tritonhf import (
    AsyncClient,
    Classification,
    Client,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    ServerUnavailableError,
)
from tritonhf.bootstrap import Server, Workspace

pytestmark = pytest.mark.integration
DATA = Path(__file__).parent.parent / "data"
SENTENCES = [
    f"the movie {word} was {adjective}"
    for word in ("plot", "music", "actors", "film")
    for adjective in ("wonderful", "terrible", "great", "bad", "good", "awful", "not good", "very bad")
]


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _expected_labels(folder: Path, texts: list[str]) -> list[str]:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    return [model.config.id2label[int(i)] for i in logits.argmax(-1)]


def test_raw_http_json_and_grpc_for_every_template(served: Server) -> None:
    base = served.http_url
    text_input = {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["alice visited paris"]}
    for model, output in (("sentiment", "LABEL"), ("ner", "ENTITIES"), ("embed", "EMBEDDING"), ("zeroshot", "LABELS")):
        answer = _post(f"{base}/v2/models/{model}/infer", {"inputs": [text_input]})
        assert output in [o["name"] for o in answer["outputs"]], model
    with urllib.request.urlopen(
        urllib.request.Request(
            f"{base}/v2/models/writer/generate_stream",
            data=json.dumps({"text_input": "the movie", "max_tokens": 4}).encode(),
        ),
        timeout=60,
    ) as response:
        events = [line for line in response.read().decode().splitlines() if line.startswith("data:")]
    assert events and all("text_output" in e for e in events)

    grpc = grpcclient.InferenceServerClient(served.grpc_url.removeprefix("grpc://"))
    tensor = grpcclient.InferInput("TEXT", [2, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"a great film"], [b"bob"]], dtype=object))
    for model, output in (("sentiment", "SCORE"), ("ner", "ENTITIES"), ("embed", "EMBEDDING"), ("zeroshot", "SCORES")):
        assert grpc.infer(model, [tensor]).as_numpy(output).shape[0] == 2


def test_32_concurrent_requests_each_get_their_own_answer(served: Server, tiny: dict[str, Path]) -> None:
    expected = _expected_labels(tiny["classifier"], SENTENCES)

    def one(text: str) -> str:
        body = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}
        return _post(f"{served.http_url}/v2/models/sentiment/infer", body)["outputs"][0]["data"][0]

    with ThreadPoolExecutor(32) as pool:
        got = list(pool.map(one, SENTENCES))
    assert got == expected
    stats = Client(served.http_url).statistics("sentiment")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] >= 32


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sdk_every_task(served: Server, tiny: dict[str, Path], protocol: str) -> None:
    url = served.http_url if protocol == "http" else served.grpc_url
    with Client(url) as client:
        labels = _expected_labels(tiny["classifier"], SENTENCES[:3])
        assert [c.label for c in client.classify(SENTENCES[:3])] == labels
        single = client.classify(SENTENCES[0])
        assert isinstance(single, Classification) and 0 < single.score <= 1
        ranked = client.classify(SENTENCES[0], top_k=2)
        assert len(ranked) == 2 and ranked[0].score >= ranked[1].score

        reference = pipeline("token-classification", model=str(tiny["ner"]), aggregation_strategy="simple")
        entities = client.ner("alice visited paris")
        assert [(e.entity_group, e.start, e.end) for e in entities] == [
            (e["entity_group"], e["start"], e["end"]) for e in reference("alice visited paris")
        ]

        vectors = client.embed(["the cat", "a dog"], model="embed")
        assert vectors.shape == (2, 32) and vectors.dtype == np.float32
        tokenizer = AutoTokenizer.from_pretrained(tiny["encoder"])
        model = AutoModel.from_pretrained(tiny["encoder"]).eval()
        with torch.inference_mode():
            encoded = tokenizer(["the cat"], return_tensors="pt")
            pooled = model(**encoded).last_hidden_state.mean(1)[0].numpy()
        np.testing.assert_allclose(vectors[0], pooled / np.linalg.norm(pooled), atol=1e-5)

        zero = client.zero_shot(["a great film"], labels=["city", "food"])
        assert sorted(zero[0].labels) == ["city", "food"] and abs(sum(zero[0].scores) - 1) < 1e-5

        streamed = list(client.generate("the movie", model="writer", max_tokens=6, stream=True))
        assert "".join(streamed) == client.generate("the movie", model="writer", max_tokens=6)
        assert isinstance(client.chat([{"role": "user", "content": "hello"}], model="writer", max_tokens=3), str)

        out = client.infer("sentiment", TEXT=["a great film", "bad"])
        assert out["LABEL"].shape == (2, 1) and isinstance(out["LABEL"][0, 0], str)
        assert {m.name: m.task for m in client.models()}["embed"] == "feature-extraction"


def test_50_texts_with_max_batch_8_come_back_in_order(served: Server, tiny: dict[str, Path]) -> None:
    texts = (SENTENCES * 2)[:50]
    with Client(served.grpc_url) as client:
        got = client.classify(texts, model="sentiment")
    assert [c.label for c in got] == _expected_labels(tiny["classifier"], texts)
    assert client.classify([]) == []


def test_async_client_every_method_both_protocols(served: Server) -> None:
    async def main(url: str) -> dict[str, object]:
        async with AsyncClient(url) as client:
            await client.wait_ready(30)
            return {
                "labels": await client.classify(["a great film", "bad"]),
                "zero": await client.zero_shot("a great film", labels=["city", "food"]),
                "entities": await client.ner("alice visited paris"),
                "vectors": await client.embed("hello world", model="embed"),
                "chunks": [
                    chunk
                    async for chunk in await client.generate("the movie", model="writer", max_tokens=4, stream=True)
                ],
                "whole": await client.generate("the movie", model="writer", max_tokens=4),
                "chat": await client.chat([{"role": "user", "content": "hello"}], model="writer", max_tokens=3),
                "infer": await client.infer("embed", TEXT=["x"]),
                "models": await client.models(),
            }

    with Client(served.http_url) as sync:
        expected = {
            "labels": sync.classify(["a great film", "bad"]),
            "entities": sync.ner("alice visited paris"),
            "whole": sync.generate("the movie", model="writer", max_tokens=4),
        }
    for url in (served.http_url, served.grpc_url):
        got = asyncio.run(main(url))
        assert [c.label for c in got["labels"]] == [c.label for c in expected["labels"]]  # type: ignore[attr-defined]
        assert got["entities"] == expected["entities"]
        assert "".join(got["chunks"]) == got["whole"] == expected["whole"]  # type: ignore[arg-type]
        assert got["vectors"].shape == (1, 32)  # type: ignore[attr-defined]
        assert got["infer"]["EMBEDDING"].shape == (1, 32)  # type: ignore[index]
        assert sorted(got["zero"].labels) == ["city", "food"]  # type: ignore[attr-defined]
        assert isinstance(got["chat"], str)
        assert {m.name for m in got["models"]} >= {"sentiment", "ner", "embed", "zeroshot", "writer"}  # type: ignore[attr-defined]


def test_module_level_sdk_uses_tritonhf_url(served: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonhf import sdk

    monkeypatch.setenv("TRITONHF_URL", served.grpc_url)
    monkeypatch.setattr(sdk, "_default", None)
    assert sdk.classify("a great film").label in ("negative", "neutral", "positive")
    assert sdk.default_client().url == served.grpc_url
    sdk.default_client().close()
    monkeypatch.setattr(sdk, "_default", None)


def test_ambiguous_model_lists_candidates(served: Server) -> None:
    from tritonhf import AmbiguousModelError

    with Client(served.http_url) as client:
        with pytest.raises(AmbiguousModelError, match=r"Several ready feature-extraction models: .*embed-cls"):
            client.resolve_model(("feature-extraction",), None)  # embed and embed-cls
        with pytest.raises(AmbiguousModelError, match=r"sentiment \(text-classification\)"):
            client.resolve_model(("no-such-task",), None)  # no model of the task: the others are listed


def test_documented_errors(served: Server, installed_server: Workspace) -> None:
    with Client(served.http_url) as client:
        with pytest.raises(ModelNotFoundError, match="nope"):
            client.classify("x", model="nope")
        with pytest.raises(InvalidInputError, match="texts"):
            client.classify(42)  # type: ignore[call-overload]
        with pytest.raises(InvalidInputError, match=r"texts\[1\]"):
            client.embed(["ok", None], model="embed")  # type: ignore[list-item]
        with pytest.raises(InferenceError, match="raiser"):
            client.infer("raiser", TEXT=["boom"])
        with pytest.raises(InvalidInputError, match="max_tokens"):
            client.generate("hi", model="writer", max_tokens=-3)
        with pytest.raises(InvalidInputError, match="TOP_K"):
            client.infer("sentiment", TEXT=["x"], TOP_K=[[0]])
        assert client.classify("still fine after bad input").label
    with (
        Client("http://127.0.0.1:9", timeout=5) as dead,
        pytest.raises(ServerUnavailableError, match=r"127\.0\.0\.1:9"),
    ):
        dead.classify("x", model="sentiment")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_images_from_every_kind_of_holder_sync_async_and_cli(
    served: Server, tiny: dict[str, Path], protocol: str, tmp_path: Path
) -> None:
    """A path, bytes, a PIL image and an array give transformers' answer on that image; a broken image
    is an InvalidInputError naming it; the async client and `tritonhf classify-image` agree."""
    import random

    from PIL import Image
    from typer.testing import CliRunner

    from harness.images import ImageOracle, encode, picture
    from tritonhf.cli.main import app

    url = served.http_url if protocol == "http" else served.grpc_url
    oracle = ImageOracle(tiny["image-classifier"])
    pixels = [picture(random.Random(seed), 30 + seed, 50 - seed) for seed in range(4)]
    files = [tmp_path / f"{index}.png" for index in range(4)]
    for file, array in zip(files, pixels):
        file.write_bytes(encode(array, "PNG"))
    holders = [files[0], encode(pixels[1], "PNG"), Image.fromarray(pixels[2]), pixels[3]]
    with Client(url) as client:
        got = client.classify_images(holders, top_k=5)
        one = client.classify_images(str(files[0]))
        with pytest.raises(InvalidInputError, match="row 1: input 'IMAGE' is not an image"):
            client.classify_images([files[0], b"not an image"])
    for ranked, array in zip(got, pixels):
        expected = oracle.ranked(encode(array, "PNG"))
        assert [c.label for c in ranked] == expected["labels"]
        np.testing.assert_allclose([c.score for c in ranked], expected["scores"], atol=1e-4)
    assert one.label == got[0][0].label

    async def from_async() -> list[Classification]:
        async with AsyncClient(url) as client:
            return await client.classify_images(files)

    assert [c.label for c in asyncio.run(from_async())] == [ranked[0].label for ranked in got]
    printed = CliRunner().invoke(app, ["classify-image", *map(str, files), "--url", url])
    assert printed.exit_code == 0, printed.output
    rows = [line.split() for line in printed.output.splitlines()]  # label, score, file (a long path may wrap)
    labels = [row[0] for row in rows if len(row) >= 2 and row[1].replace(".", "", 1).isdigit()]
    assert labels == [ranked[0].label for ranked in got]


def test_image_text_model_embeds_both_in_one_space_and_ranks_labels(served: Server, tiny: dict[str, Path]) -> None:
    """CLIP over gRPC: embed_images and embed(texts, model=) equal transformers' unit vectors; zero_shot_images
    ranks the model's labels or the caller's; `tritonhf classify-image --labels` prints the same ranking."""
    import random

    from typer.testing import CliRunner

    from harness.images import ClipOracle, encode, picture
    from tritonhf.cli.main import app

    oracle = ClipOracle(tiny["clip"])
    image = encode(picture(random.Random(11), 40, 30), "PNG")
    with Client(served.grpc_url) as client:
        vectors = client.embed_images([image, image], model="clip")
        texts = client.embed(["a photo of a cat", "a dog"], model="clip")
        default = client.zero_shot_images(image, model="clip")
        chosen = client.zero_shot_images([image], labels=["boat", "tree"], model="clip")
    np.testing.assert_allclose(vectors[0], oracle.image_vector(image), atol=1e-5)
    np.testing.assert_allclose(texts[0], oracle.text_vector("a photo of a cat"), atol=1e-5)
    expected = oracle.ranked(image, ["cat", "dog", "car"])
    assert list(default.labels) == expected["labels"]
    np.testing.assert_allclose(default.scores, expected["scores"], atol=1e-5)
    assert list(chosen[0].labels) == oracle.ranked(image, ["boat", "tree"])["labels"]
    file = Path(served.workspace.root) / "clip-check.png"
    file.write_bytes(image)
    command = ["classify-image", str(file), "--labels", "cat,dog,car", "--model", "clip", "--url", served.grpc_url]
    printed = CliRunner().invoke(app, command)
    assert printed.exit_code == 0, printed.output
    assert [line.split()[0] for line in printed.output.splitlines()[1:]] == expected["labels"]


def test_speech_model_transcribes_over_both_protocols_and_the_cli(served: Server, tiny: dict[str, Path]) -> None:
    """Whisper served: the SDK's transcribe over HTTP and gRPC equals transformers in-process on the same file
    (a FLAC at 44.1 kHz stereo, samples held in memory, and one past the 30 s window); a silent file is an
    InvalidInputError naming it; `tritonhf transcribe --format srt` prints the same segments, and `--stream` a
    --stream model's parts as they come (over HTTP: the generate route)."""
    import random

    from typer.testing import CliRunner

    from harness.audio import AudioOracle, encode, sound
    from tritonhf import InvalidInputError
    from tritonhf.cli.main import app

    oracle = AudioOracle(tiny["whisper"])
    stereo = sound(random.Random(21), 4.0, 44100, 2)
    flac = encode(stereo, 44100, "FLAC")
    long = encode(sound(random.Random(22), 36.0), 16000, "FLAC")
    for url in (served.http_url, served.grpc_url):
        with Client(url) as client:
            one = client.transcribe(flac, model="asr")
            held = client.transcribe((stereo, 44100), model="asr", language="en")
            many = client.transcribe([flac, long], model="asr", language="en", timestamps=True)
            with pytest.raises(InvalidInputError, match="silent"):
                client.transcribe(encode(np.zeros((4000, 1), np.float32)), model="asr")
        expected = oracle.transcribe(flac)
        assert (one.text, one.language) == (expected["text"], expected["language"])
        assert abs(one.duration - 4.0) < 1e-3 and len(one.segments) == 1
        assert held.text == oracle.transcribe(encode(stereo, 44100, "WAV", "FLOAT"), language="en")["text"]
        assert many[0].text == oracle.transcribe(flac, language="en", timestamps=True)["text"]
        assert many[1].text == oracle.transcribe(long, language="en")["text"] and abs(many[1].duration - 36.0) < 1e-3
    file = Path(served.workspace.root) / "speech-check.flac"
    file.write_bytes(flac)
    printed = CliRunner().invoke(app, ["transcribe", str(file), "--model", "asr", "--language", "en", "--format",
                                       "srt", "--url", served.grpc_url])  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert printed.output.startswith("1\n00:00:") and many[0].segments[0].text in printed.output
    streamed = CliRunner().invoke(app, ["transcribe", str(file), "--model", "asr-stream", "--language", "en",
                                        "--stream", "--url", served.http_url])  # fmt: skip
    assert streamed.exit_code == 0, streamed.output
    with Client(served.grpc_url) as client:  # the same model added without --stream
        assert streamed.output.strip() == client.transcribe(flac, model="asr-ct2", language="en").text
