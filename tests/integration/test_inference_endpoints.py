"""A model's URL as a Hugging Face Inference Endpoint: `huggingface_hub.InferenceClient(model=
GATEWAY/models/NAME)` for every task the gallery serves, each answer equal to the SDK's on the same input, and TEI's
routes beneath the same URL. On the shared server's tiny models (and the real MiniLM and SmolLM2)."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
from huggingface_hub import InferenceClient

from harness.audio import encode as encode_audio
from harness.audio import sound
from harness.images import encode as encode_image
from harness.images import picture
from tritonhf import Client
from tritonhf.bootstrap import Stack

TEXT = "alice visited paris and loved the film"


@pytest.fixture(scope="module")
def gateway(served_stack: Stack) -> Stack:
    """The shared server's gateway (tests/integration/conftest.py): its tiny models of every task."""
    return served_stack


def _hub(stack: Stack, name: str) -> InferenceClient:
    assert stack.state is not None
    return InferenceClient(model=f"{stack.state.gateway_url.removesuffix('/v1')}/models/{name}")


def _close(got: float, expected: float) -> bool:
    return abs(got - expected) <= 1e-5


def test_every_text_task_answers_as_the_sdk_does(gateway: Stack) -> None:
    with Client(gateway.server.grpc_url) as sdk:
        labels = sdk.classify(TEXT, model="sentiment", top_k=2)
        found = _hub(gateway, "sentiment").text_classification(TEXT, top_k=2)
        assert [(x.label, round(x.score, 5)) for x in found] == [(x.label, round(x.score, 5)) for x in labels]

        entities = sdk.ner(TEXT, model="ner", aggregation="simple")
        tokens = _hub(gateway, "ner").token_classification(TEXT, aggregation_strategy="simple")
        assert [(e.entity_group, e.word, e.start, e.end) for e in tokens] == [
            (e.entity_group, e.word, e.start, e.end) for e in entities]  # fmt: skip
        assert all(_close(t.score, e.score) for t, e in zip(tokens, entities))

        vectors = sdk.embed(["a cat", "a dog"], model="minilm", normalize=True)
        hub_vectors = _hub(gateway, "minilm").feature_extraction("a cat", normalize=True)
        assert np.allclose(hub_vectors[0], vectors[0], atol=1e-5)
        similarity = _hub(gateway, "minilm").sentence_similarity("a cat", ["a dog", "a car"])
        assert len(similarity) == 2 and _close(similarity[0], float(vectors[0] @ vectors[1]))

        masked = "the film was [MASK] good"
        candidates = sdk.fill_mask(masked, model="filler", top_k=3)
        hub_candidates = _hub(gateway, "filler").fill_mask(masked, top_k=3)
        assert [c.token_str for c in hub_candidates] == [c.token for c in candidates]
        assert all(_close(h.score, c.score) for h, c in zip(hub_candidates, candidates))

        answer = sdk.answer("who visited paris?", TEXT, model="reader")
        hub_answer = _hub(gateway, "reader").question_answering(question="who visited paris?", context=TEXT)
        assert (hub_answer.answer, hub_answer.start, hub_answer.end) == (answer.text, answer.start, answer.end)

        summary = sdk.summarize(TEXT, model="summarizer", max_tokens=8)
        hub = _hub(gateway, "summarizer")
        assert hub.summarization(TEXT, generate_parameters={"max_new_tokens": 8}).summary_text == summary
        assert hub.translation(TEXT, generate_parameters={"max_new_tokens": 8}).translation_text == summary

        ranked = sdk.zero_shot(TEXT, model="zeroshot", labels=["travel", "cooking"])
        hub_ranked = _hub(gateway, "zeroshot").zero_shot_classification(TEXT, candidate_labels=["travel", "cooking"])
        assert [(h.label, round(h.score, 5)) for h in hub_ranked] == [
            (label, round(score, 5)) for label, score in zip(ranked.labels, ranked.scores)]  # fmt: skip

        text = sdk.generate("Once upon a time", model="writer", max_tokens=8)
        hub = _hub(gateway, "writer")
        assert hub.text_generation("Once upon a time", max_new_tokens=8) == text
        assert "".join(hub.text_generation("Once upon a time", max_new_tokens=8, stream=True)) == text


def test_image_and_speech_tasks_take_raw_bytes(gateway: Stack) -> None:
    image = encode_image(picture(random.Random(5), 32, 24), "PNG")
    audio = encode_audio(sound(random.Random(3), 2.0, 16000, 1), 16000, "FLAC")
    with Client(gateway.server.grpc_url) as sdk:
        labels = sdk.classify_images(image, model="vit", top_k=2)
        for found in (_hub(gateway, "vit").image_classification(image, top_k=2),):  # base64 inside JSON
            assert [(x.label, round(x.score, 5)) for x in found] == [(x.label, round(x.score, 5)) for x in labels]
        raw = _hub(gateway, "vit").image_classification(image)  # the bytes as the body
        assert raw[0].label == labels[0].label
        ranked = sdk.zero_shot_images(image, model="clip", labels=["cat", "dog"])
        hub_ranked = _hub(gateway, "clip").zero_shot_image_classification(image, candidate_labels=["cat", "dog"])
        assert [(h.label, round(h.score, 5)) for h in hub_ranked] == [
            (label, round(score, 5)) for label, score in zip(ranked.labels, ranked.scores)]  # fmt: skip
        heard = sdk.transcribe(audio, model="asr-ct2")
        assert _hub(gateway, "asr-ct2").automatic_speech_recognition(audio).text == heard.text


def _post(url: str, body: Any, method: str = "POST") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_tei_routes_beneath_a_model_url_and_named_refusals(gateway: Stack) -> None:
    assert gateway.state is not None
    base = f"{gateway.state.gateway_url.removesuffix('/v1')}/models"
    status, vectors = _post(f"{base}/minilm/embed", {"inputs": ["a cat"]})
    assert status == 200 and len(vectors[0]) == 384
    status, ranked = _post(f"{base}/reranker/rerank", {"query": "a cat", "texts": ["a cat", "a car"]})
    assert status == 200 and {r["index"] for r in ranked} == {0, 1}
    status, info = _post(f"{base}/minilm/info", None, method="GET")
    assert status == 200 and info["model_id"] == "minilm"
    status, ids = _post(f"{base}/minilm/tokenize", {"inputs": "a cat"})
    assert status == 200 and ids[0]
    for url, body, field in (
        (f"{base}/sentiment", {"inputs": TEXT, "parameters": {"top_k": 1, "temperature": 2}}, "parameters.temperature"),
        (f"{base}/zeroshot", {"inputs": TEXT, "parameters": {"candidate_labels": ["a"], "multi_label": True}},
         "parameters.multi_label"),
        (f"{base}/reader", {"inputs": "not a question"}, "inputs"),
        (f"{base}/writer", {"inputs": "hi", "parameters": {"details": True}}, "parameters.details"),
        (f"{base}/nope", {"inputs": "hi"}, "model"),
        (f"{base}/minilm/predictt", {"inputs": "hi"}, "route"),
    ):  # fmt: skip
        status, error = _post(url, body)
        assert 400 <= status < 500 and field in error["error"] + str(error.get("error_type")), (url, error)
    status, labels = _post(f"{base}/sentiment", {"inputs": TEXT})
    assert status == 200 and labels[0], "the next request is answered as before"


def test_llama_index_tei_client_against_a_model_url(gateway: Stack) -> None:
    """LlamaIndex's TEI embeddings posting to ``/models/minilm/embed`` (its ``base_url`` the model's URL, as a TEI
    server of one model would be): the SDK's vectors."""
    from llama_index.embeddings.text_embeddings_inference import TextEmbeddingsInference

    assert gateway.state is not None
    base = f"{gateway.state.gateway_url.removesuffix('/v1')}/models/minilm"
    embedder = TextEmbeddingsInference(model_name="minilm", base_url=base, timeout=60)
    found = embedder.get_text_embedding_batch(["a cat", "a dog"])
    with Client(gateway.server.grpc_url) as sdk:
        assert np.allclose(np.asarray(found), sdk.embed(["a cat", "a dog"], model="minilm", normalize=True), atol=1e-5)


def test_embed_all_gives_every_tokens_vector(gateway: Stack) -> None:
    """TEI's /embed_all, at the root with 'model' and beneath a model's URL: the SDK's embed_tokens, whose
    mean is the model's pooled vector (MiniLM pools by mean)."""
    assert gateway.state is not None
    root = gateway.state.gateway_url.removesuffix("/v1")
    with Client(gateway.server.grpc_url) as sdk:
        tokens = sdk.embed_tokens(["a cat", "a cat sat on the mat"], model="minilm")
        pooled = sdk.embed(["a cat", "a cat sat on the mat"], model="minilm", normalize=False)
    assert [t.shape[1] for t in tokens] == [384, 384] and tokens[0].shape[0] < tokens[1].shape[0]
    assert np.allclose([t.mean(0) for t in tokens], pooled, atol=1e-4)
    for url, body in ((f"{root}/embed_all", {"inputs": ["a cat", "a cat sat on the mat"], "model": "minilm"}),
                      (f"{root}/models/minilm/embed_all", {"inputs": ["a cat", "a cat sat on the mat"]})):  # fmt: skip
        status, found = _post(url, body)
        assert status == 200 and [np.asarray(f).shape for f in found] == [t.shape for t in tokens]
        assert all(np.allclose(np.asarray(f), t, atol=1e-5) for f, t in zip(found, tokens))
    status, error = _post(f"{root}/models/minilm/embed_all", {"inputs": "a cat", "normalize": True})
    assert status == 400 and "normalize" in error["error"]
