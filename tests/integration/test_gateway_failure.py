"""The gateway with no Triton behind it answers 503 fast, on every route family, in that family's shape.

A real gateway process (`tritonhf openai`, uvicorn) points at a loopback port where nothing
listens; the real `openai` package (retries off) and urllib call it. Each answer must come within
2 s (the SDK used to retry an unreachable server until its 300 s deadline).
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
from pathlib import Path

import openai
import pytest

from tritonhf.bootstrap.ports import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def orphan_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dead = free_port("127.0.0.1")  # nothing listens there
    port = free_port("127.0.0.1")
    env = {**os.environ, "TRITONHF_WORKSPACE": str(tmp_path_factory.mktemp("ws"))}
    tritonhf = Path(sys.executable).with_name("tritonhf")
    command = [str(tritonhf), "openai", "--url", f"grpc://127.0.0.1:{dead}", "--port", str(port)]
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


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object], float]:
    started = time.monotonic()
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw), time.monotonic() - started


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
        status, answer, seconds = _post(orphan_gateway + path, body)
        assert status == 503 and seconds <= 2.0, (path, status, seconds)
        assert "error" in answer and "error_type" in answer, f"TEI's error shape: {answer}"
