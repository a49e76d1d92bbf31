"""The SDK's promises against a real server: one deadline per call, and cancellation that reaches the model."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import pytest

from tritonhf import AsyncClient, Client, RequestTimeoutError, ServerUnavailableError, WrongProtocolError
from tritonhf.bootstrap import Server

pytestmark = pytest.mark.integration


def _urls(served: Server) -> list[str]:
    return [served.http_url, served.grpc_url]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_timeout_bounds_a_call_to_a_model_that_does_not_answer(served: Server, protocol: str) -> None:
    url = served.http_url if protocol == "http" else served.grpc_url
    with Client(url) as client:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            client.infer("sleeper", SECONDS=[[4.0]], timeout=2)
        assert time.monotonic() - started < 2.5

    async def main() -> float:
        async with AsyncClient(url) as aclient:
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError):
                await aclient.infer("sleeper", SECONDS=[[4.0]], timeout=2)
            return time.monotonic() - started

    assert asyncio.run(main()) < 2.5


def _metric(served: Server, name: str) -> float:
    text = urllib.request.urlopen(served.metrics_url, timeout=10).read().decode()
    match = re.search(rf'^{name}{{model="writer"}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _wait_for(served: Server, name: str, above: float, seconds: float = 5.0) -> float:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = _metric(served, name)
        if value > above:
            return value
        time.sleep(0.05)
    return _metric(served, name)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_closing_a_stream_cancels_it_on_the_server(served: Server, protocol: str) -> None:
    url = served.http_url if protocol == "http" else served.grpc_url
    with Client(url) as client:
        cancelled = _metric(served, "tritonhf_cancelled_total")
        stream = client.generate("the movie", model="writer", max_tokens=100, stream=True)
        next(stream)
        stream.close()
        assert _wait_for(served, "tritonhf_cancelled_total", cancelled) == cancelled + 1

        async def main() -> None:
            async with AsyncClient(url) as aclient:
                astream = await aclient.generate("the movie", model="writer", max_tokens=100, stream=True)
                await astream.__anext__()
                await astream.aclose()

        asyncio.run(main())
        assert _wait_for(served, "tritonhf_cancelled_total", cancelled + 1) == cancelled + 2
        assert _metric(served, "tritonhf_running_sequences") == 0
        assert client.generate("the movie", model="writer", max_tokens=3)  # the model serves on


def test_a_url_at_the_other_protocols_port_fails_fast_and_says_which_port_speaks_what(served: Server) -> None:
    """An HTTP URL at the gRPC port (a URL without grpc://): a WrongProtocolError at once, naming grpc:// (it waited
    for its whole deadline); grpc:// at the HTTP port: unavailable, with the hint to use http://."""
    grpc_address = served.grpc_url.removeprefix("grpc://")
    http_address = served.http_url.removeprefix("http://")
    started = time.monotonic()
    with Client(grpc_address) as client, pytest.raises(WrongProtocolError, match=f"Use grpc://{grpc_address}"):
        client.models()
    assert time.monotonic() - started < 5, "refused at once, not retried until the call's deadline"

    async def main() -> None:
        async with AsyncClient(grpc_address) as aclient:
            with pytest.raises(WrongProtocolError, match="speaks HTTP/2, as Triton's gRPC port does"):
                await aclient.models()

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 5
    with Client(f"grpc://{http_address}", timeout=10) as client, pytest.raises(ServerUnavailableError) as caught:
        client.models()
    assert f"use http://{http_address}" in str(caught.value)
