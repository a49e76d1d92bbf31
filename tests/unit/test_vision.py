"""Image chat's pieces without a server: images sized as the model's processor sizes them, the prompt widened as it
widens it, the limits, the SDK's and the gateway's reading of image parts, and what ``gallery add`` refuses before
it exports anything."""

from __future__ import annotations

import asyncio
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.images import bomb_png, encode, header_only_png, picture
from tritonhf.errors import GalleryError, InvalidInputError, ModelSourceError
from tritonhf.gallery import AddRequest, add_model
from tritonhf.runtime.common import BadRequest
from tritonhf.runtime.vision import Vision, family_of
from tritonhf.sdk._generation import chat_text
from tritonhf.serve.errors import GatewayError
from tritonhf.serve.images import chat_content, chat_models
from tritonhf.serve.limits import Limits


@pytest.fixture(scope="module")
def vision(tiny: dict[str, Path]) -> Vision:
    return Vision(str(tiny["qwen2-vl"]), "qwen2_vl", {"max_images": "3", "max_image_bytes": "1000000"})


@pytest.mark.parametrize(("width", "height"), [(200, 150), (90, 300), (56, 56), (1000, 100), (17, 400), (3, 5)])
def test_an_image_resized_first_is_what_the_processor_makes_of_the_original(
    vision: Vision, width: int, height: int
) -> None:
    """The pixels handed to OpenVINO are the processor's own resize: the processor finds nothing left to resize in
    them (the same patches as from the original), so an engine's own resize of them has nothing to change."""
    original = Image.fromarray(picture(random.Random(width * height), width, height))
    ((pixels, tokens),) = vision.read([_png(original)])
    processor = vision.processor
    assert pixels.dtype == np.uint8 and pixels.shape[2] == 3
    assert pixels.shape[0] % 28 == 0 and pixels.shape[1] % 28 == 0  # patch 14 x merge 2
    direct = processor(images=[original], return_tensors="np")
    again = processor(images=[pixels], return_tensors="np")
    assert np.array_equal(direct["image_grid_thw"], again["image_grid_thw"])
    assert np.array_equal(direct["pixel_values"], again["pixel_values"])
    assert tokens == int(np.prod(direct["image_grid_thw"][0])) // 4


@pytest.mark.parametrize(("width", "height"), [(1000, 30), (30, 900)])
def test_an_image_whose_resize_the_processor_would_change_again_is_refused(
    vision: Vision, width: int, height: int
) -> None:
    """Very elongated: the processor keeps the short side at one row of patches, and its rule applied again to its
    own output gives another size, which the engine (applying it again) would read: refused by name."""
    image = encode(picture(random.Random(5), width, height))
    with pytest.raises(BadRequest, match=f"image 0 is {width}x{height}: the model's processor resizes it to"):
        vision.read([image])


def test_the_prompt_widens_each_placeholder_to_its_images_tokens(vision: Vision) -> None:
    prompt = "a<|vision_start|><|image_pad|><|vision_end|>b<|vision_start|><|image_pad|><|vision_end|>c"
    assert vision.widen(prompt, [2, 3]).count("<|image_pad|>") == 5
    assert vision.widen("no images", []) == "no images"
    with pytest.raises(BadRequest, match="2 image parts and input 'images' has 1 images"):
        vision.widen(prompt, [4])


def test_the_limits_are_a_bad_request_naming_the_image_and_the_parameter(vision: Vision) -> None:
    small = encode(picture(random.Random(1), 40, 40))
    with pytest.raises(BadRequest, match=r"has 4 images, more than this model's limit of 3 .* max_images"):
        vision.read([small] * 4)
    with pytest.raises(BadRequest, match=r"image 1 is 1,100,000 bytes, over the limit of 1,000,000 .*max_image_bytes"):
        vision.read([small, b"\x89PNG" + bytes(1_099_996)])
    with pytest.raises(BadRequest, match="image 0 is 8000x6000 = 48,000,000 pixels, over the limit of 40,000,000"):
        vision.read([header_only_png(8000, 6000)])  # refused from its header: nothing decoded
    with pytest.raises(BadRequest, match="image 0 is too large to decode"):  # past Pillow's own bomb guard
        vision.read([bomb_png(20_000, 20_000)])
    with pytest.raises(BadRequest, match="image 0 is not an image"):
        vision.read([b"plain text"])


def test_only_families_whose_processor_rules_are_held_take_images() -> None:
    assert family_of("qwen2_vl") is family_of("qwen2_5_vl") is not None
    assert family_of("qwen3_vl") is None and family_of("llava") is None and family_of("gemma3") is None


def test_the_sdk_sends_image_parts_as_placeholders_and_their_bytes_in_order(tmp_path: Path) -> None:
    png = encode(picture(random.Random(2), 30, 20))
    path = tmp_path / "b.png"
    path.write_bytes(png)
    array = np.zeros((5, 6, 3), dtype=np.uint8)
    messages = [{"role": "user", "content": [{"type": "image", "image": png}, {"type": "text", "text": "hi"},
                                             {"type": "image", "image": path}]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "image", "image": array}]}]  # fmt: skip
    text, images = chat_text(messages)
    sent = json.loads(text)
    assert sent[0]["content"] == [{"type": "image"}, {"type": "text", "text": "hi"}, {"type": "image"}]
    assert sent[2]["content"] == [{"type": "image"}] and sent[1]["content"] == "ok"
    assert images[:2] == [png, png] and Image.open(io.BytesIO(images[2])).size == (6, 5)
    with pytest.raises(InvalidInputError, match=r"messages\[0\].content\[0\] must be"):
        chat_text([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}])
    with pytest.raises(InvalidInputError, match=r"messages\[0\].content\[0\].image must be"):
        chat_text([{"role": "user", "content": [{"type": "image", "image": 3.5}]}])


def test_the_gateway_reads_image_url_and_input_image_parts() -> None:
    png = encode(picture(random.Random(3), 10, 10))
    url = "data:image/png;base64," + __import__("base64").b64encode(png).decode()
    limits = Limits()
    chat = [{"type": "text", "text": "look: "}, {"type": "image_url", "image_url": {"url": url, "detail": "low"}}]
    content, images = asyncio.run(chat_content(chat, "messages[0].content", limits))
    assert content == [{"type": "text", "text": "look: "}, {"type": "image", "image": png}] and images == 1
    responses = [{"type": "input_image", "image_url": url, "detail": "auto"}]
    assert asyncio.run(chat_content(responses, "input[0].content", limits))[1] == 1
    text = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert asyncio.run(chat_content(text, "messages[0].content", limits)) == ("ab", 0)
    for part, field in (
        ({"type": "input_image", "file_id": "file-1"}, "input[0].content[0].file_id"),
        ({"type": "image_url", "image_url": {"url": ""}}, "input[0].content[0].image_url.url"),
        ({"type": "input_audio", "input_audio": {}}, "input[0].content[0]"),
        ({"type": "image_url", "image_url": {"url": "data:image/png,raw"}}, "input[0].content[0].image_url.url"),
    ):
        with pytest.raises(GatewayError) as caught:
            asyncio.run(chat_content([part], "input[0].content", limits))
        assert caught.value.param == field, (part, caught.value.param)
    assert chat_models("/v1/chat/completions", 1) == (("image-text-to-text",), "/v1/chat/completions with images")
    assert "text-generation" in chat_models("/v1/chat/completions", 0)[0]


def test_gallery_add_refuses_what_it_cannot_serve_before_exporting(tiny: dict[str, Path], tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    with pytest.raises(ModelSourceError, match="is a gpt2 model; image-text-to-text serves qwen2_vl, qwen2_5_vl"):
        add_model(AddRequest("image-text-to-text", str(tiny["generator"]), repo, name="not-vision"))
    for options, said in (
        ({"backend": "pytorch"}, "--backend pytorch is for automatic-speech-recognition"),
        ({"backend": "onnx"}, "--backend"),
        ({"weight_format": "int4-ir"}, "--weight-format must be one of fp16, int8, int4"),
        ({"quantize": "int8"}, "takes --weight-format"),
        ({"engine": "llamacpp"}, "--engine chooses text-generation's engine"),
    ):
        with pytest.raises(GalleryError, match=said):
            add_model(AddRequest("image-text-to-text", str(tiny["qwen2-vl"]), repo, name="refused", **options))  # type: ignore[arg-type]
    assert not (repo / "not-vision").exists() and not (repo / "refused").exists()


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()
