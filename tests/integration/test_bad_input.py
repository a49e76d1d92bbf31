"""Inputs nobody tested, for every template, through the sdk, raw HTTP and raw gRPC.

Each gets a correct result or a typed error naming the input; the server stays healthy;
a bad request batched with good ones does not change the good ones' answers.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tritonhf import Client, ContextLengthError, InvalidInputError, ModelNotFoundError
from tritonhf.bootstrap import Server

pytestmark = pytest.mark.integration

ODD_TEXTS = [
    "",
    "   \t\n ",
    "movie " * 20_000,  # 120,000 characters
    " ".join(["word"] * 5_000),
    "😀🎬 wonderful 👍",
    "東京で映画を見た",
    "مرحبا بالعالم",  # right-to-left
    "café naïve e\u0301",  # combining accent
]


def _raw(served: Server, model: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{served.http_url}/v2/models/{model}/infer", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_odd_texts_get_answers_from_every_template(served: Server) -> None:
    with Client(served.grpc_url, timeout=120) as client:
        assert len(client.classify(ODD_TEXTS, model="sentiment")) == len(ODD_TEXTS)
        assert len(client.zero_shot(ODD_TEXTS, model="zeroshot")) == len(ODD_TEXTS)
        assert client.embed(ODD_TEXTS, model="embed").shape == (len(ODD_TEXTS), 32)
        for text, entities in zip(ODD_TEXTS, client.ner(ODD_TEXTS, model="ner")):
            for entity in entities:
                assert 0 <= entity.start < entity.end <= len(text)  # character offsets into *this* text
        with pytest.raises(ContextLengthError, match="truncate=true"):  # nothing is cut unasked
            client.generate("movie " * 20_000, model="writer", max_tokens=3)
        stream = client.generate("movie " * 20_000, model="writer", max_tokens=3, truncate=True, stream=True)
        with stream:
            assert isinstance("".join(stream), str)
        assert stream.usage is not None and stream.usage.prompt_tokens_cut > 99_000, "the cut is said"
        assert isinstance(client.generate("", model="writer", max_tokens=3), str)


def test_wrong_python_types_are_refused_before_sending(served: Server) -> None:
    with Client(served.http_url) as client:
        for bad in (None, 3, [None], ["ok", 5], b"bytes"):
            with pytest.raises(InvalidInputError, match="texts"):
                client.classify(bad, model="sentiment")  # type: ignore[call-overload]
        with pytest.raises(InvalidInputError, match="labels"):
            client.zero_shot("x", labels=[], model="zeroshot")
        with pytest.raises(InvalidInputError, match="temperature"):
            client.generate("hi", model="writer", temperature=-1.0)
        with pytest.raises(InvalidInputError, match="max_tokens"):
            client.generate("hi", model="writer", max_tokens=10**9)
        with pytest.raises(ModelNotFoundError, match="nope"):
            client.embed("x", model="nope")


def test_wire_level_mistakes_are_400_and_the_server_stays_healthy(served: Server) -> None:
    cases = {
        "datatype": {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]},
        "shape": {"inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}]},
        "name": {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": ["a"]}]},
        "batch": {"inputs": [{"name": "TEXT", "shape": [9, 1], "datatype": "BYTES", "data": ["a"] * 9}]},
    }
    for case, body in cases.items():
        status, text = _raw(served, "sentiment", body)
        assert status == 400, (case, text)
    status, _ = _raw(
        served, "sentiment", {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["a"]}]}
    )
    assert status == 200


def test_unknown_model_or_version(served: Server) -> None:
    status, _ = _raw(served, "nope", {"inputs": []})
    assert status in (400, 404)
    request = urllib.request.Request(
        f"{served.http_url}/v2/models/sentiment/versions/7/infer",
        data=json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["a"]}]}).encode(),
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code in (400, 404)


def test_non_utf8_bytes_over_grpc_fail_only_that_request(served: Server) -> None:
    client = grpcclient.InferenceServerClient(served.grpc_url.removeprefix("grpc://"))
    for model in ("sentiment", "ner", "embed", "zeroshot"):
        tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[b"\xff\xfe not utf-8"]], dtype=object))
        with pytest.raises(InferenceServerException, match="UTF-8"):
            client.infer(model, [tensor])
    with Client(served.grpc_url) as sdk:
        assert sdk.classify("still answering", model="sentiment").label


def test_a_bad_request_in_a_batch_does_not_change_good_answers(served: Server) -> None:
    good = [f"the movie number {i} was great" for i in range(24)]
    with Client(served.grpc_url) as client:
        alone = [c.label for c in client.classify(good, model="sentiment")]
        scores_alone = [round(c.score, 5) for c in client.classify(good, model="sentiment")]
    grpc = grpcclient.InferenceServerClient(served.grpc_url.removeprefix("grpc://"))

    def send(index: int) -> object:
        tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        text = b"\xff bad" if index % 3 == 0 else good[index // 3 * 2 % len(good)].encode()
        tensor.set_data_from_numpy(np.array([[text]], dtype=object))
        inputs = [tensor]
        if index % 5 == 0:
            top_k = grpcclient.InferInput("TOP_K", [1, 1], "INT32")
            top_k.set_data_from_numpy(np.array([[0]], dtype=np.int32))  # refused: must be >= 1
            inputs.append(top_k)
        try:
            result = grpc.infer("sentiment", inputs)
        except InferenceServerException as exc:
            return ("error", str(exc))
        return (text.decode(), result.as_numpy("LABEL")[0, 0].decode(), round(float(result.as_numpy("SCORE")[0, 0]), 5))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(send, range(96)))
    answered = [r for r in results if r[0] != "error"]
    assert answered and len(answered) < len(results)
    expected = {text: (label, score) for text, label, score in zip(good, alone, scores_alone)}
    for text, label, score in answered:  # type: ignore[misc]
        assert (label, score) == expected[text]


def test_10000_texts_are_split_and_come_back_in_order(served: Server) -> None:
    texts = [f"text number {i}" for i in range(10_000)]
    with Client(served.grpc_url, timeout=300) as client:
        vectors = client.embed(texts, model="embed")
        assert vectors.shape == (10_000, 32)
        np.testing.assert_allclose(vectors[1234], client.embed(texts[1234], model="embed")[0], atol=1e-5)
