"""The gateway's fast answers that need no Triton: 503 when Triton is away, 413 and 429 at its limits.

A real gateway process (`tritonhf openai`, uvicorn) points at a loopback port where nothing
listens; the real `openai` package (retries off) and urllib call it. Each 503 must come within
2 s (the SDK used to retry an unreachable server until its 300 s deadline). A second gateway runs
with small limits: a body past --payload-limit, more inputs than --max-client-batch-size and a
request past --max-concurrent-requests are refused at once, each in its route family's shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from pathlib import Path
from typing import Any

import openai
import pytest

from tritonhf.bootstrap.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.alone]  # asserts how fast answers come


def _gateway(tmp_path_factory: pytest.TempPathFactory, *limits: str) -> Iterator[str]:
    dead = free_port("127.0.0.1")  # nothing listens there
    port = free_port("127.0.0.1")
    env = {**os.environ, "TRITONHF_WORKSPACE": str(tmp_path_factory.mktemp("ws"))}
    tritonhf = Path(sys.executable).with_name("tritonhf")
    command = [str(tritonhf), "openai", "--url", f"grpc://127.0.0.1:{dead}", "--port", str(port), *limits]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/docs", timeout=1)
                break
            except OSError as exc:
                if process.poll() is not None:
                    output = process.stdout.read().decode() if process.stdout else ""
                    raise AssertionError(f"the gateway exited: {output}") from exc
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def orphan_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _gateway(tmp_path_factory)


@pytest.fixture(scope="module")
def small_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    limits = ("--payload-limit", "2000", "--max-client-batch-size", "4", "--max-concurrent-requests", "2")
    yield from _gateway(tmp_path_factory, *limits)


def _post(url: str, body: object) -> tuple[int, dict[str, Any], float, Message]:
    """(status, JSON body, seconds, headers: looked up without regard to case)."""
    started = time.monotonic()
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, answer, headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        status, answer, headers = error.code, error.read(), error.headers
    return status, json.loads(answer), time.monotonic() - started, headers


def test_openai_routes_say_503_within_two_seconds(orphan_gateway: str) -> None:
    client = openai.OpenAI(base_url=orphan_gateway + "/v1", api_key="unused", max_retries=0, timeout=30)
    for call in (
        lambda: client.models.list(),
        lambda: client.embeddings.create(model="embed", input="a cat"),
        lambda: client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}]),
    ):
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as caught:
            call()
        assert time.monotonic() - started <= 2.0
        assert caught.value.status_code == 503


def test_tei_routes_say_503_within_two_seconds(orphan_gateway: str) -> None:
    for path, body in (("/embed", {"inputs": "a cat"}), ("/rerank", {"query": "q", "texts": ["a", "b"]})):
        status, answer, seconds, _ = _post(orphan_gateway + path, body)
        assert status == 503 and seconds <= 2.0, (path, status, seconds)
        assert "error" in answer and "error_type" in answer, f"TEI's error shape: {answer}"


def _curl(url: str, body: bytes, *headers: str) -> tuple[int, dict[str, Any], float]:
    """curl reads an early answer (the gateway refuses before the body is read whole; urllib would not)."""
    started = time.monotonic()
    command = ["curl", "-s", "-w", "\n%{http_code}", "-H", "Content-Type: application/json", "--data-binary", "@-"]
    for header in headers:
        command += ["-H", header]
    out = subprocess.run([*command, url], input=body, capture_output=True, timeout=60).stdout.decode()
    text, status = out.rsplit("\n", 1)
    return int(status), json.loads(text), time.monotonic() - started


def test_a_body_past_the_payload_limit_is_413_before_it_is_read_whole(small_gateway: str) -> None:
    big = json.dumps({"model": "embed", "input": ["x" * 3000]}).encode()
    for headers in ((), ("Transfer-Encoding: chunked",)):  # a declared length, and none
        status, answer, seconds = _curl(small_gateway + "/v1/embeddings", big, *headers)
        assert status == 413 and "payload-limit" in answer["error"]["message"] and seconds < 1.0, headers
    status, answer, _ = _curl(small_gateway + "/embed", json.dumps({"inputs": "x" * 3000}).encode())
    assert status == 413 and answer["error_type"] == "Validation"
    # Python's urllib sends the whole body before it reads: it reads the 413 too (the refused body is drained)
    status, answer, _, _ = _post(small_gateway + "/v1/embeddings", {"model": "embed", "input": ["x" * 300_000]})
    assert status == 413 and answer["error"]["code"] == "payload_too_large"
    huge = json.dumps({"model": "embed", "input": ["x" * 10_000_000]}).encode()  # 10 MB: drained, not parsed
    status, _, seconds = _curl(small_gateway + "/v1/embeddings", huge)
    assert status == 413 and seconds < 1.0


def test_more_inputs_than_the_client_batch_size_is_413_naming_the_input(small_gateway: str) -> None:
    status, answer, _, _ = _post(small_gateway + "/v1/embeddings", {"model": "embed", "input": ["a"] * 5})
    assert status == 413 and answer["error"]["param"] == "input"
    assert "max-client-batch-size" in answer["error"]["message"]
    for path, body in (("/embed", {"inputs": ["a"] * 5}), ("/rerank", {"query": "q", "texts": ["a"] * 5})):
        status, answer, _, _ = _post(small_gateway + path, body)
        assert status == 413 and answer["error_type"] == "Validation", path


def test_requests_past_the_concurrency_limit_get_429_with_retry_after_at_once(small_gateway: str) -> None:
    """Two requests in flight (each waits ~1.5 s for the absent Triton); a third is refused, not queued."""
    with ThreadPoolExecutor(2) as pool:
        slow = [pool.submit(_post, small_gateway + "/v1/embeddings", {"model": "embed", "input": "a"}) for _ in "ab"]
        time.sleep(0.5)
        status, answer, seconds, headers = _post(small_gateway + "/v1/embeddings", {"model": "embed", "input": "a"})
        assert status == 429 and headers.get("Retry-After") == "1" and seconds < 0.5
        assert answer["error"]["code"] == "rate_limit_exceeded"
        status, answer, _, _ = _post(small_gateway + "/embed", {"inputs": "a"})
        assert status == 429 and answer["error_type"] == "Overloaded"
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(small_gateway + "/health", timeout=10)
        assert health.value.code == 503, "/health is never refused for load (it says Triton is away)"
        assert [future.result()[0] for future in slow] == [503, 503]
    status, _, _, _ = _post(small_gateway + "/v1/embeddings", {"model": "embed", "input": "a"})
    assert status == 503, "admitted again once the others finished"
