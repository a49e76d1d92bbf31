"""image-classification: decoding with limits, the template on a tiny ViT against transformers in-process,
the SDK's encoding of what a caller holds, and the plan over an in-memory server."""

from __future__ import annotations

import io
import random
import re
import time
from pathlib import Path
from typing import Any

import fake_pb_utils as pb
import numpy as np
import pytest
from PIL import Image
from template_harness import answers, instantiate

from harness.images import FORMATS, MODES, ImageOracle, bomb_png, encode, header_only_png, picture, random_image
from tritonhf import Client, InvalidInputError
from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, ModelOptions, add_model
from tritonhf.runtime.common import BadRequest
from tritonhf.runtime.images import decode_image
from tritonhf.sdk.media import encode_image, image_list, png
from tritonhf.sdk.testing import FakeServer, MemoryTransport


def _reference_rgb(data: bytes) -> np.ndarray:
    from transformers.image_utils import load_image

    return np.asarray(load_image(Image.open(io.BytesIO(data))))


@pytest.mark.parametrize("image_format", FORMATS)
@pytest.mark.parametrize("mode", MODES)
def test_every_format_and_mode_decodes_as_transformers_load_image(image_format: str, mode: str) -> None:
    data = encode(picture(random.Random(1), 37, 23), image_format, mode)
    decoded = decode_image(data)
    assert decoded.mode == "RGB" and decoded.size == (37, 23)
    np.testing.assert_array_equal(np.asarray(decoded), _reference_rgb(data))


def test_exif_orientation_is_applied() -> None:
    data = encode(picture(random.Random(2), 40, 10), "JPEG", exif_orientation=6)  # rotated 90 degrees
    decoded = decode_image(data)
    assert decoded.size == (10, 40)
    np.testing.assert_array_equal(np.asarray(decoded), _reference_rgb(data))


def test_a_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    assert decode_image(buffer.getvalue()).getpixel((0, 0)) == (255, 0, 0)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "is empty"),
        (b"plain text, not an image", "not an image Pillow can read"),
        (b"II*\x00" + bytes(64), "a TIFF image, which is not supported"),
        (encode(picture(random.Random(3), 64, 64), "PNG")[:200], "damaged or truncated PNG"),
        (encode(picture(random.Random(3), 64, 64), "JPEG")[:300], "damaged or truncated"),
        (header_only_png(0, 10), "damaged"),
    ],
)
def test_unusable_images_are_refused_saying_why(data: bytes, words: str) -> None:
    with pytest.raises(BadRequest, match=words):
        decode_image(data)


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    """8000x8000 grey (64 MP): 62 kB of PNG that would decode to 64 MB; 30000x30000 (900 MP) claimed by a
    header alone, past Pillow's own guard. Both refused before any pixel is decoded."""
    bomb = bomb_png(8000, 8000)
    assert len(bomb) < 100_000
    started = time.perf_counter()
    with pytest.raises(BadRequest, match=r"8000x8000 = 64,000,000 pixels, over the limit of 40,000,000"):
        decode_image(bomb)
    with pytest.raises(BadRequest, match=r"too large|over the limit"):
        decode_image(header_only_png(30000, 30000))
    assert time.perf_counter() - started < 5  # generous: decoding 64 MP would take longer; the check reads a header
    assert decode_image(bomb_png(100, 100), max_pixels=10_000).size == (100, 100)
    with pytest.raises(BadRequest, match="over the limit of 9,999"):
        decode_image(bomb_png(100, 100), max_pixels=9_999)


# ------------------------------------------------------------------ the template


@pytest.fixture(scope="module")
def vit(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = tmp_path_factory.mktemp("images") / "repo"
    models = {}
    for backend in ("auto", "pytorch"):
        folder = add_model(AddRequest("image-classification", str(tiny["image-classifier"]), repo, name=backend,
                                      backend=backend))  # fmt: skip
        models[backend] = (folder, instantiate(folder))
    return models


def _image_input(*items: bytes) -> np.ndarray:
    return np.array([[item] for item in items], dtype=object)


@pytest.mark.parametrize("backend", ["auto", "pytorch"])
def test_served_scores_equal_transformers_alone_and_bad_images_fail_alone(
    vit: dict[str, Any], tiny: dict[str, Path], backend: str
) -> None:
    folder, model = vit[backend]
    assert ("onnx" if backend == "auto" else "pytorch") in (folder / "config.pbtxt").read_text()
    oracle = ImageOracle(tiny["image-classifier"])
    rng = random.Random(4)
    images = [random_image(rng)[0] for _ in range(5)]
    requests = [
        pb.InferenceRequest(IMAGE=_image_input(images[0], images[1])),
        pb.InferenceRequest(IMAGE=_image_input(b"\x89PNG broken")),
        pb.InferenceRequest(IMAGE=_image_input(images[2]), TOP_K=np.array([[2]], dtype=np.int32)),
        pb.InferenceRequest(IMAGE=_image_input(images[3], bomb_png(7000, 7000))),
        pb.InferenceRequest(IMAGE=_image_input(images[4]), TOP_K=np.array([[0]], dtype=np.int32)),
    ]
    got = answers(model, requests)
    first = {t.name(): t.as_numpy() for t in got[0].output_tensors}
    for row in range(2):
        expected = oracle.ranked(images[row])
        assert first["LABEL"][row, 0].decode() == expected["labels"][0]
        np.testing.assert_allclose(first["SCORES"][row], expected["scores"], atol=1e-4)
    assert got[1].has_error() and "not an image" in got[1].error().message()
    third = {t.name(): t.as_numpy() for t in got[2].output_tensors}
    assert [label.decode() for label in third["LABELS"][0]] == oracle.ranked(images[2], 2)["labels"]
    assert got[3].has_error() and got[3].error().message().startswith("row 1: input 'IMAGE' is 7000x7000")
    assert got[4].has_error() and "TOP_K" in got[4].error().message()


def test_max_image_pixels_at_add_bounds_each_image_from_its_header(
    vit: dict[str, Any], tiny: dict[str, Path], tmp_path: Path
) -> None:
    """`gallery add --max-image-pixels 10000`: a 101x100 image is refused alone (its row named), a 100x100 one
    beside it answered as the default model answers it; only image tasks take the flag."""

    folder = add_model(AddRequest("image-classification", str(tiny["image-classifier"]), tmp_path / "repo",
                                  backend="pytorch", options=ModelOptions(max_image_pixels=10_000)))  # fmt: skip
    model = instantiate(folder)
    rng = random.Random(5)
    fits, over = encode(picture(rng, 100, 100)), encode(picture(rng, 101, 100))
    (limited,) = answers(model, [pb.InferenceRequest(IMAGE=_image_input(fits, over))])
    assert limited.has_error()
    assert limited.error().message().startswith("row 1: input 'IMAGE' is 101x100")
    assert "over the limit of 10,000" in limited.error().message()
    (alone,) = answers(model, [pb.InferenceRequest(IMAGE=_image_input(fits))])
    (default,) = answers(vit["pytorch"][1], [pb.InferenceRequest(IMAGE=_image_input(fits))])
    got, expected = ({t.name(): t.as_numpy() for t in r.output_tensors} for r in (alone, default))
    np.testing.assert_array_equal(got["SCORES"], expected["SCORES"])
    with pytest.raises(GalleryError, match="--max-image-pixels is for image tasks; feature-extraction"):
        add_model(AddRequest("feature-extraction", str(tiny["encoder"]), tmp_path / "other",
                             options=ModelOptions(max_image_pixels=10_000)))  # fmt: skip
    with pytest.raises(GalleryError, match="--max-audio-seconds is for speech tasks; image-classification"):
        add_model(AddRequest("image-classification", str(tiny["image-classifier"]), tmp_path / "other",
                             options=ModelOptions(max_audio_seconds=60)))  # fmt: skip


def test_image_tasks_refuse_what_they_cannot_do(tiny: dict[str, Path], tmp_path: Path) -> None:
    source = str(tiny["image-classifier"])
    with pytest.raises(GalleryError, match="--quantize int8 is for text encoders"):
        add_model(AddRequest("image-classification", source, tmp_path, quantize="int8"))
    with pytest.raises(GalleryError, match="drop --onnx-runtime native"):
        add_model(AddRequest("image-classification", source, tmp_path, backend="onnx", onnx_runtime="native"))
    clip = str(tiny["clip"])
    with pytest.raises(GalleryError, match="--quantize int8 is for text encoders"):
        add_model(AddRequest("clip", clip, tmp_path, quantize="int8"))
    with pytest.raises(GalleryError, match="its ONNX graphs inside the Python backend"):
        add_model(AddRequest("clip", clip, tmp_path, backend="onnx", onnx_runtime="native"))


# ------------------------------------------------------------------ the SDK


def test_what_a_caller_holds_becomes_the_bytes_of_a_file(tmp_path: Path) -> None:
    pixels = picture(random.Random(5), 9, 7)
    jpeg = encode(pixels, "JPEG")
    path = tmp_path / "photo.jpg"
    path.write_bytes(jpeg)
    assert encode_image(str(path)) == jpeg and encode_image(path) == jpeg and encode_image(jpeg) == jpeg
    for held in (pixels, Image.fromarray(pixels)):  # lossless: the server sees exactly these pixels
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(encode_image(held)))), pixels)
    for shape in ((7, 9), (7, 9, 1), (7, 9, 2), (7, 9, 4)):
        array = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png(array)))).reshape(shape), array)
    assert image_list(path) == ([jpeg], True)
    assert image_list([path, jpeg]) == ([jpeg, jpeg], False)
    assert len(image_list(np.stack([pixels, pixels]))[0]) == 2


@pytest.mark.parametrize(
    ("held", "words"),
    [
        ("/no/such/file.png", "cannot read '/no/such/file.png'"),
        (b"", "is empty"),
        (np.zeros((4, 4, 3), dtype=np.float32), "float32 array; images are uint8"),
        (np.zeros((4, 4, 5), dtype=np.uint8), r"shape \(4, 4, 5\)"),
        (12, "must be a path, bytes, a PIL image or a uint8 array"),
    ],
)
def test_what_is_not_an_image_is_refused_before_sending(held: object, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        encode_image(held)


def test_classify_images_sends_bytes_splits_batches_and_reads_labels() -> None:
    seen: list[list[bytes]] = []

    def handler(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        items = [bytes(item) for item in inputs["IMAGE"].reshape(-1)]
        seen.append(items)
        size = [float(len(item)) for item in items]
        return {
            "LABEL": np.array([[b"big" if s > 100 else b"small"] for s in size], dtype=object),
            "SCORE": np.array([[s / 1000] for s in size], dtype=np.float32),
            "LABELS": np.array([[b"big", b"small"] for _ in size], dtype=object),
            "SCORES": np.array([[s / 1000, 1 - s / 1000] for s in size], dtype=np.float32),
        }

    server = FakeServer()
    server.add("vit", "image-classification", handler, max_batch_size=2)
    images = [encode(picture(random.Random(i), 4 + 10 * i, 4 + 10 * i), "PNG") for i in range(5)]
    with Client(transport=MemoryTransport(server), timeout=5) as client:
        one = client.classify_images(images[0])
        many = client.classify_images(images)
        ranked = client.classify_images(images[:3], top_k=1)
    assert one.label == ("big" if len(images[0]) > 100 else "small")
    assert [round(c.score * 1000) for c in many] == [len(image) for image in images]
    assert sorted(len(chunk) for chunk in seen[1:4]) == [1, 2, 2]  # chunks go out concurrently: any order
    assert sorted(item for chunk in seen[1:4] for item in chunk) == sorted(images)
    assert [[c.label for c in row] for row in ranked] == [["big"]] * 3


# ------------------------------------------------------------------ image-text models (CLIP)


@pytest.fixture(scope="module")
def clip(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("clip") / "repo"
    folder = add_model(AddRequest("clip", str(tiny["clip"]), repo, name="clip", labels=("cat", "dog", "car")))
    return instantiate(folder)


def _labels(labels: list[bytes]) -> np.ndarray:
    return np.array([labels], dtype=object)


def _outputs(response: Any) -> dict[str, np.ndarray]:
    assert not response.has_error(), response.error().message()
    return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors}


def test_clip_images_texts_and_labels_equal_transformers_alone(clip: Any, tiny: dict[str, Path]) -> None:
    from harness.images import ClipOracle

    oracle = ClipOracle(tiny["clip"])
    rng = random.Random(6)
    images = [random_image(rng)[0] for _ in range(3)]
    long_text = "the cat sat on the mat " * 4  # past the tiny model's 32 tokens
    requests = [
        pb.InferenceRequest(IMAGE=_image_input(images[0], images[1])),
        pb.InferenceRequest(TEXT=pb.texts("a photo of a cat", long_text)),
        pb.InferenceRequest(IMAGE=_image_input(images[2]), CANDIDATE_LABELS=_labels([b"tree", b"boat"])),
        pb.InferenceRequest(TEXT=pb.texts(long_text), TRUNCATE=np.array([[False]])),
        pb.InferenceRequest(TEXT=pb.texts("x"), IMAGE=_image_input(images[0])),
        pb.InferenceRequest(IMAGE=_image_input(images[0]), CANDIDATE_LABELS=_labels([b"x" * 40])),
    ]
    got = answers(clip, requests)
    first = _outputs(got[0])
    for row in range(2):
        expected = oracle.ranked(images[row], ["cat", "dog", "car"])
        np.testing.assert_allclose(first["EMBEDDING"][row], expected["vector"], atol=1e-5)
        assert [label.decode() for label in first["LABELS"][row]] == expected["labels"]
        np.testing.assert_allclose(first["SCORES"][row], expected["scores"], atol=1e-5)
        assert abs(float(first["SCORES"][row].sum()) - 1) < 1e-5  # CLIP: a softmax over the labels
    texts = _outputs(got[1])
    np.testing.assert_allclose(texts["EMBEDDING"][0], oracle.text_vector("a photo of a cat"), atol=1e-5)
    np.testing.assert_allclose(texts["EMBEDDING"][1], oracle.text_vector(long_text), atol=1e-5)  # cut as tokenizers do
    assert texts["TRUNCATED"][:, 0].tolist() == [False, True] and texts["TOKENS"][1, 0] == 32
    third = _outputs(got[2])
    assert [label.decode() for label in third["LABELS"][0]] == oracle.ranked(images[2], ["tree", "boat"])["labels"]
    assert got[3].has_error() and "32 tokens" in got[3].error().message()
    assert got[4].has_error() and "either IMAGE" in got[4].error().message()
    assert got[5].has_error() and "Shorten the label" in got[5].error().message()


def test_zero_shot_images_and_embed_images_over_the_sdk() -> None:
    def handler(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        rows = len(inputs["IMAGE"])
        labels = inputs["CANDIDATE_LABELS"] if "CANDIDATE_LABELS" in inputs else np.zeros((rows, 0), dtype=object)
        return {
            "EMBEDDING": np.ones((rows, 4), dtype=np.float32),
            "LABELS": labels,
            "SCORES": np.full(labels.shape, 0.5, dtype=np.float32),
        }

    server = FakeServer()
    server.add("clip", "zero-shot-image-classification", handler, output_dims={"EMBEDDING": 4})
    image = encode(picture(random.Random(7), 8, 8))
    with Client(transport=MemoryTransport(server), timeout=5) as client:
        assert client.embed_images([image, image]).shape == (2, 4)
        found = client.zero_shot_images(image, labels=["cat", "dog"])
        assert found.labels == ("cat", "dog") and found.scores == (0.5, 0.5)
        with pytest.raises(InvalidInputError, match="has no default labels: pass labels"):
            client.zero_shot_images(image)
        with pytest.raises(InvalidInputError, match="labels must be a non-empty list"):
            client.zero_shot_images(image, labels=[])


def test_siglip_scores_are_sigmoids_with_its_bias_and_texts_padded_as_trained(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    from harness.images import ClipOracle

    folder = add_model(AddRequest("clip", str(tiny["siglip"]), tmp_path / "repo", name="siglip", labels=("a", "b")))
    model = instantiate(folder)
    oracle = ClipOracle(tiny["siglip"])
    assert oracle.siglip
    image = random_image(random.Random(12))[0]
    labels = ["cat", "dog", "car"]
    got = answers(
        model,
        [
            pb.InferenceRequest(
                IMAGE=_image_input(image), CANDIDATE_LABELS=_labels([label.encode() for label in labels])
            ),
            pb.InferenceRequest(TEXT=pb.texts("a photo of a dog", "x")),
        ],
    )
    found = _outputs(got[0])
    expected = oracle.ranked(image, labels)
    assert [label.decode() for label in found["LABELS"][0]] == expected["labels"]
    np.testing.assert_allclose(found["SCORES"][0], expected["scores"], atol=1e-5)
    assert abs(float(found["SCORES"][0].sum()) - 1) > 1e-3  # independent sigmoids, not a softmax
    np.testing.assert_allclose(found["EMBEDDING"][0], expected["vector"], atol=1e-5)
    texts = _outputs(got[1])
    for row, text in enumerate(["a photo of a dog", "x"]):  # one short text beside a longer one: padded alike
        np.testing.assert_allclose(texts["EMBEDDING"][row], oracle.text_vector(text), atol=1e-5)


@pytest.mark.parametrize("source", ["clip", "siglip"])
def test_image_text_towers_run_as_onnx_graphs_on_either_engine_and_match_pytorch(
    source: str, tiny: dict[str, Path], tmp_path: Path
) -> None:
    from harness.images import ClipOracle

    oracle = ClipOracle(tiny[source])
    image = random_image(random.Random(21))[0]
    labels = ["cat", "dog", "car"]
    expected = oracle.ranked(image, labels)
    engines = {"auto": None, "onnx": "OnnxModel", "openvino": "OpenVinoModel", "pytorch": None}
    for backend, engine in engines.items():
        folder = add_model(AddRequest("clip", str(tiny[source]), tmp_path / "repo", name=f"{source}-{backend}",
                                      backend=backend))  # fmt: skip
        config = (folder / "config.pbtxt").read_text()
        model = instantiate(folder)
        if backend == "pytorch":
            assert model.towers is None and "onnx_towers" not in config
        else:  # both towers exported; the PyTorch weights are not kept (scale and bias are in the config)
            assert "tritonhf.onnx_towers" in config and "logit_scale" in config
            assert not list((folder / "1" / "weights").glob("*.safetensors"))
            kept = re.search(r'key: "tritonhf.backend"\s*value\s*\{\s*string_value: "(\w+)"', config)
            assert kept and kept.group(1) in ("onnx", "openvino")
            names = {"onnx": "OnnxModel", "openvino": "OpenVinoModel"}
            assert type(model.towers[0]).__name__ == (engine or names[kept.group(1)])
            if backend == "auto":
                assert "tritonhf.engine_calibration" in config and "images/s at batch 8" in config
        request = [  # a request is answered once: new ones for each model
            pb.InferenceRequest(IMAGE=_image_input(image), CANDIDATE_LABELS=_labels([lab.encode() for lab in labels])),
            pb.InferenceRequest(TEXT=pb.texts("a photo of a dog", "x")),
        ]
        found, texts = (_outputs(response) for response in answers(model, request))
        assert [label.decode() for label in found["LABELS"][0]] == expected["labels"], backend
        np.testing.assert_allclose(found["SCORES"][0], expected["scores"], atol=1e-4)
        np.testing.assert_allclose(found["EMBEDDING"][0], expected["vector"], atol=1e-4)
        for row, text in enumerate(["a photo of a dog", "x"]):
            np.testing.assert_allclose(texts["EMBEDDING"][row], oracle.text_vector(text), atol=1e-4)
