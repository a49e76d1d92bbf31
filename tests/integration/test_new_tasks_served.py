"""Rerank, question answering, fill-mask and text2text on a real server: the SDK over both protocols,
raw HTTP and gRPC, and the bad inputs that matter for each."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tritonhf import Client, InvalidInputError
from tritonhf.bootstrap import Server

pytestmark = pytest.mark.integration
DOCS = ["the cat sat on the mat", "stock markets fell", "a kitten rests on a rug", "paris is a city"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sdk_new_tasks(served: Server, tiny: dict[str, Path], protocol: str) -> None:
    url = served.http_url if protocol == "http" else served.grpc_url
    with Client(url) as client:
        ranked = client.rerank("a cat", DOCS)
        assert sorted(r.index for r in ranked) == [0, 1, 2, 3] and ranked[0].document == DOCS[ranked[0].index]
        assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
        assert [r.index for r in client.rerank("a cat", DOCS, top_n=2)] == [r.index for r in ranked[:2]]
        found = client.answer("who visited paris", "alice visited paris with bob")
        assert "alice visited paris with bob"[found.start : found.end] == found.text
        assert len(client.answer("who", "alice visited paris with bob", top_k=3)) == 3
        candidates = client.fill_mask(["the cat [MASK] on the mat", "alice visited [MASK]"], top_k=3)
        assert [len(c) for c in candidates] == [3, 3] and all(0 < c.score <= 1 for c in candidates[0])
        tokenizer = AutoTokenizer.from_pretrained(tiny["seq2seq"])
        model = AutoModelForSeq2SeqLM.from_pretrained(tiny["seq2seq"]).eval()
        with torch.inference_mode():
            greedy = {"do_sample": False, "num_beams": 1, "forced_eos_token_id": None, "no_repeat_ngram_size": 0}
            out = model.generate(**tokenizer("the movie was great", return_tensors="pt"), max_new_tokens=8, **greedy)
        expected = tokenizer.decode(out[0], skip_special_tokens=True)
        assert client.summarize("the movie was great", max_tokens=8) == expected
        assert "".join(client.translate("the movie was great", max_tokens=8, stream=True)) == expected
        # no max_tokens: the template's default, never past the decoder's learned positions (nor may a request go)
        longest = model.config.max_position_embeddings - 1
        with torch.inference_mode():
            out = model.generate(**tokenizer("the movie", return_tensors="pt"), max_new_tokens=longest, **greedy)
        assert client.summarize("the movie") == tokenizer.decode(out[0], skip_special_tokens=True)
        with pytest.raises(InvalidInputError, match=f"from 1 to {longest}"):
            client.summarize("the movie", max_tokens=longest + 1)


def test_many_documents_are_split_over_the_batch_size_and_merged(served: Server) -> None:
    documents = [f"document number {i} about a cat" if i % 7 == 0 else f"text {i} on markets" for i in range(10_000)]
    with Client(served.grpc_url, timeout=300) as client:
        ranked = client.rerank("a cat", documents)
        assert sorted(r.index for r in ranked) == list(range(10_000))
        alone = {r.index: r.score for r in client.rerank("a cat", documents[:8])}
        merged = {r.index: r.score for r in ranked if r.index < 8}
        assert max(abs(alone[i] - merged[i]) for i in alone) < 1e-4


def test_bad_input_per_task(served: Server) -> None:
    with Client(served.http_url) as client:
        with pytest.raises(InvalidInputError, match="at least one document"):
            client.rerank("q", [])
        with pytest.raises(InvalidInputError, match=r"documents\[1\] is empty"):
            client.rerank("q", ["a", " "])
        with pytest.raises(InvalidInputError, match="question and context"):
            client.answer("who", "")
        with pytest.raises(InvalidInputError, match="has 0 \\[MASK\\]"):
            client.fill_mask("no mask here")
        with pytest.raises(InvalidInputError, match="has 2 \\[MASK\\]"):
            client.fill_mask("[MASK] and [MASK]")
        assert client.fill_mask("still [MASK]")  # the server keeps answering


def _post(served: Server, model: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"{served.http_url}/v2/models/{model}/infer", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_raw_http_and_grpc(served: Server) -> None:
    status, answer = _post(served, "reranker", {"inputs": [
        {"name": "QUERY", "shape": [1, 1], "datatype": "BYTES", "data": ["a cat"]},
        {"name": "DOCUMENTS", "shape": [1, 2], "datatype": "BYTES", "data": ["the cat", "stocks"]},
    ]})  # fmt: skip
    assert status == 200 and {o["name"] for o in answer["outputs"]} >= {"SCORES", "ORDER"}
    status, refused = _post(served, "reader", {"inputs": [
        {"name": "QUESTION", "shape": [1, 1], "datatype": "BYTES", "data": ["who"]},
    ]})  # fmt: skip
    assert status == 400 and "CONTEXT" in refused["error"], "a question without context is a 400 naming it"
    grpc = grpcclient.InferenceServerClient(served.grpc_url.removeprefix("grpc://"))
    text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"alice visited [MASK]"]], dtype=object))
    tokens = grpc.infer("filler", [text]).as_numpy("TOKENS")
    assert tokens.shape == (1, 5)
