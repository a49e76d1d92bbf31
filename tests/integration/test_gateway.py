"""The OpenAI/TEI gateway against a real Triton, driven by the real `openai` package and curl.

The gateway runs over the shared server of the served modules (tests/integration/conftest.py).
SmolLM2-135M-Instruct (chat) and all-MiniLM-L6-v2 (embeddings) come from the packages `make
setup` installs; a tiny classifier and a tiny cross-encoder serve /predict and /rerank. A request
that names no model is tested where it has one to go to: a server with one embedding model (``up``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from tritonhf import Client
from tritonhf.bootstrap import Stack, Workspace
from tritonhf.bootstrap.gateway import start_gateway
from tritonhf.bootstrap.ports import free_port
from tritonhf.bootstrap.state import ServerState, ensure_api_key
from tritonhf.gallery import AddRequest, add_model
from tritonhf.tasks import CHOICES_MAX

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CHAT = [{"role": "user", "content": "Say hello in five words."}]


@pytest.fixture(scope="module")
def gateway(served_stack: Stack) -> Stack:
    """The shared server's gateway (tests/integration/conftest.py): these tests use ``smollm2``, ``minilm``,
    ``sentiment``, ``reranker``, ``clip`` and the CTranslate2 Whisper models ``asr-ct2`` and ``asr-stream``."""
    return served_stack


def _base(server: Stack) -> str:
    assert server.state is not None
    return server.state.gateway_url


def test_openai_sync_client_chat_completions_and_embeddings(gateway: Stack) -> None:
    client = openai.OpenAI(base_url=_base(gateway), api_key="unused-on-loopback")
    ids = {model.id: getattr(model, "task", None) for model in client.models.list()}
    assert ids["smollm2"] == "text-generation" and ids["minilm"] == "feature-extraction"
    answer = client.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=12, temperature=0)
    assert answer.choices[0].message.content and answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage is not None and answer.usage.prompt_tokens > 5 and 0 < answer.usage.completion_tokens <= 12
    with Client(gateway.server.grpc_url) as sdk:
        direct = sdk.chat(CHAT, model="smollm2", max_tokens=12, temperature=0)
    assert answer.choices[0].message.content == direct, "the gateway adds nothing to the text"
    chunks = client.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True})  # fmt: skip
    parts, usage = [], None
    for chunk in chunks:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == direct and usage is not None and usage.completion_tokens > 0
    completion = client.completions.create(
        model="smollm2", prompt=["The sea is", "Paris is"], max_tokens=5, temperature=0
    )
    assert [c.index for c in completion.choices] == [0, 1] and all(c.text for c in completion.choices)
    floats = client.embeddings.create(model="minilm", input=["a cat", "a kitten"])
    packed = client.embeddings.create(model="minilm", input="a cat", encoding_format="base64")
    vector = np.array(floats.data[0].embedding, dtype=np.float32)
    with Client(gateway.server.grpc_url) as sdk:
        np.testing.assert_allclose(vector, sdk.embed("a cat", model="minilm", normalize=True)[0], atol=1e-5)
    raw = packed.data[0].embedding
    decoded = np.frombuffer(base64.b64decode(raw), dtype="<f4") if isinstance(raw, str) else np.array(raw)
    np.testing.assert_allclose(decoded, vector, atol=1e-5)
    assert floats.usage.prompt_tokens > 0 and len(vector) == 384


def test_openai_errors_are_openai_shaped(gateway: Stack) -> None:
    client = openai.OpenAI(base_url=_base(gateway), api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="nope", messages=CHAT)
    for bad in ({"n": CHOICES_MAX + 1}, {"tools": [{"type": "function", "function": {"parameters": {}}}]},  # no name
                {"temperature": 5}, {"max_tokens": 100_000}, {"logit_bias": {"1": 101}}):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="smollm2", messages=CHAT, **bad)  # type: ignore[arg-type]
        assert info.value.body and "message" in info.value.body  # type: ignore[operator]
    with pytest.raises(openai.BadRequestError, match="token ids"):
        client.embeddings.create(model="minilm", input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match="text-generation"):
        client.chat.completions.create(model="minilm", messages=CHAT)


def test_openai_async_client_streams(gateway: Stack) -> None:
    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=_base(gateway), api_key="x")
        stream = await client.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=8, temperature=0,
                                                      stream=True)  # fmt: skip
        parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        await client.close()
        return "".join(parts)

    with Client(gateway.server.grpc_url) as sdk:
        assert asyncio.run(main()) == sdk.chat(CHAT, model="smollm2", max_tokens=8, temperature=0)


def _model_metric(stack: Stack, name: str, model: str = "smollm2") -> float:
    text = urllib.request.urlopen(stack.server.metrics_url, timeout=10).read().decode()
    match = re.search(rf'^{name}\{{model="{model}"\}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _cancelled(stack: Stack, model: str = "smollm2") -> float:
    return _model_metric(stack, "tritonhf_cancelled_total", model)


def _started(stack: Stack) -> float:
    """Sequences that produced their first token (a counter, unlike the running gauge)."""
    return _model_metric(stack, "tritonhf_time_to_first_token_seconds_count")


def test_a_client_that_disconnects_mid_stream_cancels_the_generation(gateway: Stack) -> None:
    before = _cancelled(gateway)
    host, port = gateway.state.gateway_host, gateway.state.gateway_port  # type: ignore[union-attr]
    body = json.dumps({"model": "smollm2", "messages": CHAT, "max_tokens": 120, "stream": True}).encode()
    with socket.create_connection((host, port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while received.count(b"data:") < 2:
            received += sock.recv(4096)
    deadline = time.monotonic() + 20
    while _cancelled(gateway) <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _cancelled(gateway) == before + 1, "the Triton request was cancelled when the client went away"


def test_a_client_that_leaves_a_non_streamed_answer_cancels_the_generation(gateway: Stack) -> None:
    """No stream to close: the gateway watches the connection and cancels the Triton request when it drops."""
    before, started = _cancelled(gateway), _started(gateway)
    host, port = gateway.state.gateway_host, gateway.state.gateway_port  # type: ignore[union-attr]
    # Counting goes on for far longer than the client waits (greedy: no early end-of-text by chance).
    long = {"model": "smollm2", "max_tokens": 2000, "temperature": 0}
    count = [{"role": "user", "content": "Count from 1 to 1000, separated by commas."}]
    for path, body, sequences in (
        ("/v1/chat/completions", {**long, "messages": count}, 1),
        ("/v1/completions", {**long, "prompt": ["1, 2, 3, 4, 5, 6, 7, 8,", "10, 20, 30, 40, 50,"]}, 2),
    ):
        raw = json.dumps(body).encode()
        with socket.create_connection((host, port)) as sock:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
                + f"Content-Length: {len(raw)}\r\n\r\n".encode()
                + raw
            )
            # Leave once the model is generating this request's answers: a fixed 1 s sleep assumed it,
            # and on two fresh machines one of the three was not cancelled (not counted, at least).
            started += sequences
            deadline = time.monotonic() + 60
            while _started(gateway) < started and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _started(gateway) >= started, f"{path} started generating"
            time.sleep(0.5)  # generating, nothing sent yet
    expected = before + 3  # one chat, two prompts
    deadline = time.monotonic() + 10
    while _cancelled(gateway) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {name: _model_metric(gateway, f"tritonhf_{name}_sequences") for name in ("running", "waiting")}
    with urllib.request.urlopen(f"{_base(gateway).removesuffix('/v1')}/metrics", timeout=30) as response:
        # which route answered 499 (it saw the client leave), and whether one is still being answered
        seen = [line for line in response.read().decode().splitlines()
                if line.startswith("tritonhf_gateway_requests_in_flight") or 'status="499"' in line]  # fmt: skip
    assert _cancelled(gateway) == expected, f"every generation of a client that left was cancelled ({left}, {seen})"


def test_a_refused_generation_cancels_the_other_generations_of_its_request(gateway: Stack) -> None:
    """Ten prompts of eight choices each ask ``writer`` for 80 generations at once, beyond what its queue takes (8
    running and 64 waiting): the first refused one ends the request with a 429, and every other one is cancelled
    then, not left generating answers no one will read while the next requests wait behind them. Counted in tokens:
    after the 429, at most what the running ones could still make (cancelled ones may also end before the template
    sees them, so the cancelled count alone would not tell)."""
    body = {"model": "writer", "prompt": [f"prompt {index}" for index in range(10)], "n": 8, "max_tokens": 120,
            "temperature": 0}  # fmt: skip
    request = urllib.request.Request(f"{_base(gateway)}/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    before = _cancelled(gateway, "writer")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=120)
    generated = _model_metric(gateway, "tritonhf_generated_tokens_total", "writer")
    assert refused.value.code == 429 and json.loads(refused.value.read())["error"]["code"] == "model_overloaded"
    # until the model is idle: no sequence left (the gauges are set at each step) and no token for half a second
    deadline, last, idle = time.monotonic() + 60, -1.0, False
    while not idle and time.monotonic() < deadline:
        tokens = _model_metric(gateway, "tritonhf_generated_tokens_total", "writer")
        left = [_model_metric(gateway, f"tritonhf_{name}_sequences", "writer") for name in ("running", "waiting")]
        idle, last = tokens == last and not any(left), tokens
        time.sleep(0.5)
    assert idle, "the model was still generating a minute after the 429"
    after = last - generated
    # left running, the 64 waiting would each have made up to 120 more (thousands); stopped, a few steps' worth
    assert after <= 8 * 120, f"{after:.0f} tokens generated after the 429"
    assert _cancelled(gateway, "writer") > before, "the request's generations were cancelled"


def test_n_choices_among_other_traffic_each_equal_their_seed_alone(gateway: Stack) -> None:
    """OpenAI's n on the real SmolLM2 (OpenVINO): choice i of n=4, sampled with top_k, min_p and penalties from
    seed s, is the answer n=1 gives alone with seed s + i, whole and streamed, while its siblings, another n and
    greedy chats run beside it in one batch."""
    from concurrent.futures import ThreadPoolExecutor

    client = openai.OpenAI(base_url=_base(gateway), api_key="unused-on-loopback")
    messages = [{"role": "user", "content": "Write one sentence about a river."}]
    options: dict[str, Any] = {"model": "smollm2", "messages": messages, "max_tokens": 32, "temperature": 0.9,
                               "presence_penalty": 0.5, "frequency_penalty": 0.3,
                               "extra_body": {"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1}}  # fmt: skip

    def one(seed: int) -> str:
        return client.chat.completions.create(n=1, seed=seed, **options).choices[0].message.content or ""

    def streamed(seed: int) -> dict[int, str]:
        texts: dict[int, str] = {}
        for chunk in client.chat.completions.create(n=4, seed=seed, stream=True, **options):
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
        return texts

    alone = [one(seed) for seed in range(21, 28)]
    with ThreadPoolExecutor(6) as pool:
        counts = [[{"role": "user", "content": f"Count from 1 to {k}."}] for k in (9, 14)]
        busy = [pool.submit(client.chat.completions.create, model="smollm2", max_tokens=48, temperature=0,
                            messages=count) for count in counts]  # fmt: skip
        whole = pool.submit(lambda: client.chat.completions.create(n=4, seed=21, **options))
        parts = pool.submit(streamed, 24)
        found = {choice.index: choice.message.content for choice in whole.result().choices}
        assert found == dict(enumerate(alone[:4])), "whole answer's choices against n=1 alone, by seed"
        assert parts.result() == dict(enumerate(alone[3:])), "streamed choices against n=1 alone, by seed"
        assert all(future.result().choices[0].message.content for future in busy)
    assert len(set(alone)) >= 3, "seeds this far apart sample different answers"


def test_openai_shapes_nulls_unicode_models_and_usage(gateway: Stack) -> None:
    base = _base(gateway)
    client = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
    nulls = {"model": "smollm2", "messages": CHAT, "max_tokens": 4, "temperature": None, "top_p": None, "n": None,
             "stream": None, "stop": None, "seed": None, "presence_penalty": None, "stream_options": None}  # fmt: skip
    status, answer = _curl(f"{base}/chat/completions", nulls)
    assert status == 200 and answer["choices"][0]["message"]["content"] is not None  # type: ignore[index]
    request = urllib.request.Request(f"{base}/embeddings", b'{"model": "minilm", "input": ["ok", "\\ud800"]}',
                                     {"content-type": "application/json"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    body = json.loads(refused.value.read())
    assert refused.value.code == 400 and "input[1] is not valid Unicode" in body["error"]["message"]
    assert client.models.retrieve("minilm").id == "minilm"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")
    for method, path, code in (("GET", "/v1/no-such-route", 404), ("GET", "/v1/embeddings", 405)):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(urllib.request.Request(base.removesuffix("/v1") + path, method=method), timeout=30)
        assert info.value.code == code and "message" in json.loads(info.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(base.removesuffix("/v1") + "/embed", timeout=30)
    assert info.value.code == 405 and set(json.loads(info.value.read())) == {"error", "error_type"}, "TEI's shape"
    chunks = list(client.completions.create(model="smollm2", prompt="The sea", max_tokens=4, stream=True,
                                            stream_options={"include_usage": True}))  # fmt: skip
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    prompts = ["The sea", "Once upon a time", "Paris is"]
    together = client.completions.create(model="smollm2", prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in together.choices] == [0, 1, 2]
    for prompt, choice in zip(prompts, together.choices):
        alone = client.completions.create(model="smollm2", prompt=prompt, max_tokens=6, temperature=0)
        assert choice.text == alone.choices[0].text


def _curl(url: str, body: dict[str, object], key: str | None = None) -> tuple[int, object]:
    command = [
        "curl",
        "-s",
        "-w",
        "\n%{http_code}",
        "-H",
        "Content-Type: application/json",
        "-d",
        json.dumps(body),
        url,
    ]
    if key:
        command[3:3] = ["-H", f"Authorization: Bearer {key}"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    text, status = out.rsplit("\n", 1)
    return int(status), json.loads(text)


def test_tei_routes_with_curl(gateway: Stack) -> None:
    root = _base(gateway).removesuffix("/v1")
    status, vectors = _curl(f"{root}/embed", {"inputs": ["a cat", "a dog"], "model": "minilm"})
    assert status == 200 and len(vectors) == 2 and len(vectors[0]) == 384  # type: ignore[arg-type]
    status, labels = _curl(f"{root}/predict", {"inputs": "a great film", "model": "sentiment"})
    assert status == 200 and sorted(item["label"] for item in labels) == ["negative", "neutral", "positive"]  # type: ignore[union-attr]
    status, ranked = _curl(f"{root}/rerank", {"query": "a cat", "texts": ["the cat", "stocks", "a kitten"],
                                             "return_text": True})  # fmt: skip
    assert status == 200 and sorted(r["index"] for r in ranked) == [0, 1, 2] and "text" in ranked[0]  # type: ignore[union-attr]
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)  # type: ignore[union-attr]
    status, error = _curl(f"{root}/predict", {"inputs": "x", "model": "sentiment", "raw_scores": True})
    assert status == 400 and error["error_type"] == "Validation"  # type: ignore[index]
    with urllib.request.urlopen(f"{root}/health", timeout=10) as response:
        assert response.status == 200


def test_beyond_loopback_the_gateway_requires_the_key(gateway: Stack) -> None:
    workspace = gateway.workspace
    key = ensure_api_key(workspace)
    port = free_port("127.0.0.2")
    identity = start_gateway(workspace, "127.0.0.2", port, die_with_parent=True, env=dict(__import__("os").environ))
    try:
        base = f"http://127.0.0.2:{port}/v1"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
        assert [m.id for m in openai.OpenAI(base_url=base, api_key=key).models.list()]
        assert key.encode() not in Path(f"/proc/{identity.pid}/cmdline").read_bytes()
        with urllib.request.urlopen(f"http://127.0.0.2:{port}/health", timeout=10) as response:
            assert response.status == 200, "/health needs no key"
    finally:
        identity.stop(5)


def test_up_runs_the_gateway_under_the_supervisor(
    make_workspace: Callable[[str], Workspace], tiny: dict[str, Path]
) -> None:
    workspace = make_workspace("up-gateway")
    add_model(AddRequest("feature-extraction", str(tiny["encoder"]), workspace.model_repository, name="emb"))
    ws = str(workspace.root)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tritonhf", *args, "-w", ws], capture_output=True, text=True,
                              timeout=300)  # fmt: skip

    up = cli("up", "--http-port", "auto", "--grpc-port", "auto", "--metrics-port", "auto", "--openai-port", "auto")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        state = ServerState.load(workspace.state_file)
        assert state is not None and state.gateway is not None and state.gateway.alive()
        assert "OpenAI" in cli("status").stdout
        state.gateway.signal(9)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            latest = ServerState.load(workspace.state_file)
            if latest and latest.gateway and latest.gateway.alive() and latest.gateway_pid != state.gateway_pid:
                break
            time.sleep(0.5)
        latest = ServerState.load(workspace.state_file)
        assert latest is not None and latest.gateway_pid != state.gateway_pid, "the supervisor restarted the gateway"
        vectors = openai.OpenAI(base_url=latest.gateway_url, api_key="x").embeddings.create(model="emb", input="a cat")
        assert len(vectors.data[0].embedding) == 32
        # TEI's routes need no model where the server has one for the route (TEI serves one model)
        root = latest.gateway_url.removesuffix("/v1")
        status, headers, cut = _post(f"{root}/embed", {"inputs": ["ok", LONG], "truncate": True})
        assert status == 200 and len(cut) == 2 and headers.get("x-truncated-inputs") == "1"  # type: ignore[arg-type]
        # Hugging Face's own client, given the root URL as a TEI endpoint: it posts to "/"
        from huggingface_hub import InferenceClient

        hub = InferenceClient(model=root)
        vector = hub.feature_extraction("a cat")
        with Client(latest.http_url) as sdk:
            expected = sdk.embed("a cat", model="emb")[0]
        assert np.allclose(np.asarray(vector).reshape(-1), expected, atol=1e-5)
        scores = hub.sentence_similarity("a cat", other_sentences=["a cat", "a dog"])
        assert len(scores) == 2 and abs(scores[0] - 1) < 1e-4 and scores[1] < scores[0]
    finally:
        down = cli("down")
    assert down.returncode == 0
    assert latest.gateway is not None and not latest.gateway.alive(), "down stops the gateway"


def _post(url: str, body: object) -> tuple[int, dict[str, str], object]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, json.loads(error.read())


LONG = "the movie was good and " * 120  # ~600 tokens: past MiniLM's and the tiny classifier's windows


def test_nothing_is_cut_unasked_and_a_cut_is_said(gateway: Stack) -> None:
    from tritonhf import ContextLengthError

    root = _base(gateway).removesuffix("/v1")
    status, _, error = _post(f"{root}/embed", {"inputs": ["ok", LONG], "model": "minilm"})
    assert status == 413 and error["error_type"] == "Validation" and "context length" in error["error"]  # type: ignore[index]
    status, headers, vectors = _post(f"{root}/embed", {"inputs": ["ok", LONG], "truncate": True, "model": "minilm"})
    assert status == 200 and len(vectors) == 2 and headers.get("x-truncated-inputs") == "1"  # type: ignore[arg-type]
    status, headers, _ = _post(f"{root}/embed", {"inputs": ["ok"], "truncate": True, "model": "minilm"})
    assert status == 200 and "x-truncated-inputs" not in headers, "only a cut is announced"
    client = openai.OpenAI(base_url=_base(gateway), api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="minilm", input=["ok", LONG])
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "input"
    cut = client.embeddings.create(model="minilm", input=["ok", LONG], extra_body={"truncate": True})
    assert [(item.model_extra or {}).get("truncated") for item in cut.data] == [None, True]
    for request in (
        {"model": "smollm2", "messages": CHAT, "max_tokens": 8190},  # fits alone, not with the prompt
        {"model": "smollm2", "messages": [{"role": "user", "content": "word " * 9000}], "max_tokens": 4},
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**request)  # type: ignore[call-overload]
        assert refused.value.code == "context_length_exceeded" and "8192" in refused.value.message
        assert refused.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="smollm2", prompt="word " * 9000, max_tokens=4)
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "prompt"
    # a max_tokens past the model's own bound, refused by the template: each route names its own field
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="writer", prompt="a short text", max_tokens=5000)
    assert refused.value.param == "max_tokens", refused.value.body
    with Client(gateway.server.grpc_url) as sdk, pytest.raises(ContextLengthError, match="truncate=true"):
        sdk.generate("word " * 9000, model="smollm2", max_tokens=4)


def _triton_requests(stack: Stack, model: str) -> int:
    """Requests Triton has answered for ``model`` (its own Prometheus counter)."""
    with urllib.request.urlopen(stack.server.metrics_url, timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf'nv_inference_request_success{{model="{model}",version="1"}} (\d+)', text)
    return int(found.group(1)) if found else 0


def test_concurrent_embeddings_go_together_each_answered_as_alone_and_a_bad_one_fails_alone(gateway: Stack) -> None:
    texts = [f"sentence number {i} about " + "cats " * (i % 7) for i in range(24)]
    with Client(gateway.server.grpc_url) as sdk:
        alone = [sdk.embed(text, model="minilm", normalize=True).reshape(-1) for text in texts]

    async def together(bad: bool) -> list[object]:
        client = openai.AsyncOpenAI(base_url=_base(gateway), api_key="x", max_retries=0)
        calls = [client.embeddings.create(model="minilm", input=text) for text in texts]
        if bad:
            calls.insert(9, client.embeddings.create(model="minilm", input=["fine", LONG]))
        try:
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.close()

    before = _triton_requests(gateway, "minilm")
    first = asyncio.run(together(bad=False))
    sent = _triton_requests(gateway, "minilm") - before
    assert sent < len(texts), f"{len(texts)} concurrent requests reached Triton as {sent}: nothing went together"
    second = asyncio.run(together(bad=True))
    refused = second.pop(9)
    assert isinstance(refused, openai.BadRequestError) and refused.code == "context_length_exceeded"
    for answers in (first, second):
        for answer, expected in zip(answers, alone, strict=True):
            assert not isinstance(answer, BaseException), answer
            got = np.array(answer.data[0].embedding, dtype=np.float32)  # type: ignore[attr-defined]
            np.testing.assert_allclose(got, expected, atol=1e-5)


def test_tei_pairs_tokenize_info_limits_empties_and_metrics(gateway: Stack) -> None:
    root = _base(gateway).removesuffix("/v1")
    pairs = [["a great film", "it was fun"], ["dull", "very boring"]]
    status, _, ranked = _post(f"{root}/predict", {"inputs": pairs, "model": "sentiment"})
    with Client(gateway.server.grpc_url) as sdk:
        direct = sdk.classify_pairs([(a, b) for a, b in pairs], model="sentiment")
        single = sdk.classify("a great film", model="sentiment", top_k=3)
    assert status == 200 and [[c["label"] for c in row] for row in ranked] == [[c.label for c in row] for row in direct]  # type: ignore[union-attr]
    assert [c.score for c in direct[0]] != [c.score for c in single], "the pair is read as a pair"
    status, _, error = _post(f"{root}/predict", {"inputs": [["a", "b"], ["c"]], "model": "sentiment"})
    assert status == 400 and "mixes" in error["error"]  # type: ignore[index]
    status, _, tokens = _post(f"{root}/tokenize", {"inputs": ["a cat"], "model": "minilm"})
    assert status == 200 and tokens[0][0]["special"] and tokens[0][-1]["special"]  # type: ignore[index]
    words = [(t["text"], t["start"], t["stop"]) for t in tokens[0] if not t["special"]]  # type: ignore[index]
    assert words == [("a", 0, 1), ("cat", 2, 5)]
    with urllib.request.urlopen(f"{root}/info?model=minilm", timeout=30) as response:
        info = json.loads(response.read())
    assert info["model_id"] == "minilm" and info["max_input_length"] == 512 and info["max_batch_tokens_counted"]
    too_many = {"inputs": [LONG] * 40, "truncate": True, "model": "minilm"}  # 40 x 512 tokens > 16384
    status, _, error = _post(f"{root}/embed", too_many)
    assert status == 413 and "--max-batch-tokens" in error["error"]  # type: ignore[index]
    for route, body in (
        ("/embed", {"inputs": []}),
        ("/embed", {"inputs": ["a", ""]}),
        ("/rerank", {"query": "", "texts": ["a"]}),
        ("/rerank", {"query": "a", "texts": []}),
        ("/v1/embeddings", {"model": "minilm", "input": ""}),
    ):
        status, _, error = _post(root + route, body)
        message = error["error"]["message"] if route.startswith("/v1") else error["error"]  # type: ignore[index]
        assert status == 400 and "cannot be empty" in message, (route, body, error)
    status, _, error = _post(f"{root}/embed", {"inputs": "x", "model": "sentiment"})
    assert status == 400 and "is a text-classification model; /embed needs feature-extraction" in error["error"]  # type: ignore[index]
    with urllib.request.urlopen(f"{root}/metrics", timeout=30) as response:
        metrics = response.read().decode()
    for line in ('tritonhf_gateway_requests_total{route="/embed",status="413"}',
                 'tritonhf_gateway_requests_total{route="/predict",status="200"}',
                 'tritonhf_gateway_request_duration_seconds_bucket{le="0.005",route="/embed"}',
                 "tritonhf_gateway_requests_in_flight 1.0"):  # fmt: skip
        assert line in metrics, line


def test_embeddings_take_images_for_an_image_text_model(gateway: Stack) -> None:
    """Infinity's shape with the real openai client: ``"modality": "image"``, inputs as data: URIs or plain
    base64; the vectors equal the SDK's embed_images; texts to the same model land in the same space; a URL
    is never fetched (400), nor is a broken image or a text model taken for images."""
    import random

    from harness.images import encode, picture

    image = encode(picture(random.Random(13), 30, 20), "PNG")
    plain = base64.b64encode(image).decode()
    client = openai.OpenAI(base_url=_base(gateway), api_key="unused-on-loopback")
    got = client.embeddings.create(
        model="clip", input=[f"data:image/png;base64,{plain}", plain], extra_body={"modality": "image"}
    )
    texts = client.embeddings.create(model="clip", input="a photo of a cat")
    with Client(gateway.server.grpc_url) as sdk:
        expected = sdk.embed_images(image, model="clip")[0]
        text_expected = sdk.embed("a photo of a cat", model="clip")[0]
    for item in got.data:
        np.testing.assert_allclose(np.array(item.embedding, dtype=np.float32), expected, atol=1e-6)
    np.testing.assert_allclose(np.array(texts.data[0].embedding, dtype=np.float32), text_expected, atol=1e-6)
    assert got.usage.prompt_tokens == 0
    for body, words in (
        ({"input": "http://127.0.0.1/cat.png"}, "does not fetch URLs"),
        ({"input": "data:image/png;base64,!!!"}, "is not base64"),
        ({"input": base64.b64encode(b"not an image").decode()}, "not an image"),
        ({"input": plain, "model": "minilm"}, "needs zero-shot-image-classification"),
    ):
        request = {"model": "clip", "modality": "image", **body}
        status, _, answer = _post(_base(gateway) + "/embeddings", request)
        assert status == 400, (body, answer)
        assert words in json.dumps(answer), answer
    # A decompression bomb (8000 x 8000 pixels in a few kB) is a 413, refused from its header before decoding.
    import io

    from PIL import Image

    bomb = io.BytesIO()
    Image.new("1", (8000, 8000)).save(bomb, "PNG")
    started = time.monotonic()
    request = {"model": "clip", "modality": "image", "input": base64.b64encode(bomb.getvalue()).decode()}
    status, _, answer = _post(_base(gateway) + "/embeddings", request)
    assert status == 413 and answer["error"]["code"] == "input_too_large", answer  # type: ignore[index]
    assert "64,000,000 pixels, over the limit of 40,000,000" in answer["error"]["message"]  # type: ignore[index]
    assert time.monotonic() - started < 5, "refused without decoding"


def test_audio_transcriptions_and_translations_with_the_openai_client(gateway: Stack) -> None:
    """OpenAI's speech routes with the real openai client: a multipart file in, the SDK's transcription out
    (json, text, verbose_json with segments, srt, vtt); translations into English; what the server cannot
    do (word timestamps, streaming) and files it cannot read are 400s naming the parameter."""
    import random

    from harness.audio import encode, sound

    data = encode(sound(random.Random(3), 3.0, 44100, 2), 44100, "FLAC")
    client = openai.OpenAI(base_url=_base(gateway), api_key="unused-on-loopback")
    with Client(gateway.server.grpc_url) as sdk:
        untimed = sdk.transcribe(data, model="asr-ct2", language="en")
        expected = sdk.transcribe(data, model="asr-ct2", language="en", timestamps=True)  # what srt/vtt/verbose ask
        translated = sdk.transcribe(data, model="asr-ct2", task="translate")
    plain = client.audio.transcriptions.create(model="asr-ct2", file=("a.flac", data), language="en")
    assert plain.text == untimed.text and plain.text
    verbose = client.audio.transcriptions.create(
        model="asr-ct2", file=("a.flac", data), language="en", response_format="verbose_json",
        timestamp_granularities=["segment"],
    )  # fmt: skip
    assert verbose.text == expected.text and verbose.language == "en" and abs(verbose.duration - 3.0) < 1e-3
    assert [(s.start, s.end, s.text) for s in verbose.segments or []] == [
        (s.start, s.end, s.text) for s in expected.segments
    ]
    srt = client.audio.transcriptions.create(
        model="asr-ct2", file=("a.flac", data), language="en", response_format="srt"
    )
    vtt = client.audio.transcriptions.create(
        model="asr-ct2", file=("a.flac", data), language="en", response_format="vtt"
    )
    assert str(srt).startswith("1\n00:00:") and expected.segments[0].text in str(srt)
    assert str(vtt).startswith("WEBVTT\n\n00:00:")
    text = client.audio.transcriptions.create(
        model="asr-ct2", file=("a.flac", data), language="en", response_format="text"
    )
    assert str(text).strip() == untimed.text
    assert client.audio.translations.create(model="asr-ct2", file=("a.flac", data)).text == translated.text
    for call, words in (
        (lambda: client.audio.transcriptions.create(model="asr-ct2", file=("a.wav", b"RIFF junk" * 20)), "not audio"),
        (lambda: client.audio.transcriptions.create(model="asr-ct2", file=("a.flac", data), language="xx"), "'xx'"),
        (
            lambda: client.audio.transcriptions.create(
                model="asr-ct2", file=("a.flac", data), response_format="verbose_json", timestamp_granularities=["word"]
            ),
            "word timestamps",
        ),
        (lambda: client.audio.transcriptions.create(model="minilm", file=("a.flac", data)), "needs automatic-speech"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        assert words in str(caught.value), caught.value
    status, _, answer = _post_form(
        _base(gateway) + "/audio/transcriptions", {"model": "asr-ct2", "stream": "true"}, data
    )
    assert status == 400 and "--stream" in answer["error"]["message"], answer
    assert answer["error"]["param"] == "stream", answer  # type: ignore[index]


def test_a_streaming_speech_model_sends_windows_as_they_are_read(gateway: Stack) -> None:
    """A model added with --stream, served: OpenAI's transcript events with the real openai client, the SDK's parts
    over gRPC and HTTP (the generate route, the file as a data: URI), and whole answers on both protocols, all
    equal to the same model added without --stream; a bad file is a real 400 before any event."""
    import random

    from harness.audio import encode, sound

    data = encode(sound(random.Random(4), 65.0), 16000, "FLAC")  # three 30 s windows
    with Client(gateway.server.grpc_url) as sdk:
        expected = sdk.transcribe(data, model="asr-ct2", language="en", timestamps=True)
        plain = sdk.transcribe(data, model="asr-ct2", language="en")
    client = openai.OpenAI(base_url=_base(gateway), api_key="unused-on-loopback")
    events = list(client.audio.transcriptions.create(model="asr-stream", file=("a.flac", data), language="en",
                                                     stream=True))  # fmt: skip
    deltas = [event.delta for event in events if event.type == "transcript.text.delta"]
    assert [event.type for event in events[len(deltas) :]] == ["transcript.text.done"]
    assert len(deltas) >= 2, "each window is sent as it is read"
    assert events[-1].text == plain.text and "".join(deltas).strip() == plain.text  # type: ignore[union-attr]
    for url in (gateway.server.grpc_url, gateway.server.http_url):
        with Client(url) as sdk:
            with sdk.transcribe(data, model="asr-stream", language="en", timestamps=True, stream=True) as parts:
                segments = [segment for part in parts for segment in part.segments]
            assert parts.result == expected and tuple(segments) == expected.segments, url
            assert sdk.transcribe([data, data], model="asr-stream", language="en") == [plain, plain], url
    with pytest.raises(openai.BadRequestError, match="not audio") as caught:
        list(client.audio.transcriptions.create(model="asr-stream", file=("a.wav", b"RIFF junk" * 20), stream=True))
    assert caught.value.status_code == 400


def _post_form(url: str, fields: dict[str, str], data: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    """A multipart/form-data POST with one file, by hand (what curl -F sends)."""
    boundary = "tritonhf-test-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.flac"\r\n'
        "Content-Type: audio/flac\r\n\r\n".encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(url, data=b"".join(parts), method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def test_every_64_bit_seed_is_a_seed_and_roles_are_openai_s(gateway: Stack) -> None:
    """A seed from 2**63 up was a plain-text 500. Every seed a client draws with getrandbits(64) is one, the
    same seed gives the same text (over the gateway and the SDK alike), and a role OpenAI does not have is a 400."""
    client = openai.OpenAI(base_url=_base(gateway), api_key="unused-on-loopback")
    sample = {"model": "smollm2", "messages": CHAT, "max_tokens": 8, "temperature": 1.0}
    texts = {}
    for seed in (2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1):
        texts[seed] = client.chat.completions.create(seed=seed, **sample).choices[0].message.content  # type: ignore[call-overload]
        assert client.chat.completions.create(seed=seed, **sample).choices[0].message.content == texts[seed]  # type: ignore[call-overload]
    with Client(gateway.server.grpc_url) as sdk:
        assert sdk.chat(CHAT, model="smollm2", max_tokens=8, temperature=1.0, seed=2**64 - 1) == texts[2**64 - 1]
    for bad in ({"seed": 2**64}, {"messages": [{"role": "robot", "content": "hi"}]}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**{**sample, **bad})  # type: ignore[call-overload]
        assert refused.value.body["param"] in ("seed", "messages.0.role")  # type: ignore[index]
    developer = [{"role": "developer", "content": "Answer briefly."}, *CHAT]
    assert client.chat.completions.create(model="smollm2", messages=developer, max_tokens=4).choices  # type: ignore[arg-type]


def test_cohere_s_client_reranks_as_the_sdk_does(gateway: Stack) -> None:
    """POST /v1/rerank (Cohere's and Jina's body) and /v2/rerank, called by the real cohere package; the
    scores are the template's (the SDK's)."""
    import cohere

    documents = ["the cat sat", "stock markets fell", "a kitten sleeps"]
    with Client(gateway.server.grpc_url) as sdk:
        expected = {r.index: r.score for r in sdk.rerank("a cat", documents, model="reranker")}
    root = _base(gateway).removesuffix("/v1")
    v2 = cohere.ClientV2(base_url=root, api_key="unused-on-loopback").rerank(
        model="reranker", query="a cat", documents=documents, top_n=2
    )
    assert len(v2.results) == 2 and all(abs(r.relevance_score - expected[r.index]) < 1e-5 for r in v2.results)
    assert [r.index for r in v2.results] == sorted(expected, key=lambda i: -expected[i])[:2]
    v1 = cohere.Client(base_url=root, api_key="unused-on-loopback").rerank(
        model="reranker", query="a cat", documents=[{"text": d} for d in documents], return_documents=True
    )
    assert {r.index: r.document.text for r in v1.results if r.document} == dict(enumerate(documents))
    status, _, error = _post(f"{root}/v1/rerank", {"model": "reranker", "query": "a cat", "documents": []})
    assert status == 400 and error["error"]["param"] == "documents"  # type: ignore[index]
