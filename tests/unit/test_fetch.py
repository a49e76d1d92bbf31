"""Fetching an image named by URL (``--allow-image-urls``): public addresses only, no redirects, limits.

The address rule is tested on addresses; the fetch itself against a real HTTP server on loopback,
with the rule widened for the test only (the gateway always passes the public-only rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import ipaddress
import threading
import time
from collections.abc import Iterator

import pytest

from tritonhf.serve.fetch import FetchRefused, fetch, public
from tritonhf.serve.limits import Limits

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 200


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # the standard library's name for it
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
            return
        if self.path == "/slow":
            time.sleep(2)
        if self.path == "/missing":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(PNG)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (the time limit)
            self.wfile.write(PNG)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def anywhere(address: object) -> bool:
    return True


LOCAL = ["127.0.0.1", "10.1.2.3", "172.16.0.9", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
         "224.0.0.1", "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1"]  # fmt: skip


@pytest.mark.parametrize("address", LOCAL)
def test_local_private_and_special_addresses_are_not_public(address: str) -> None:
    assert not public(ipaddress.ip_address(address))


def test_public_addresses_are() -> None:
    assert public(ipaddress.ip_address("8.8.8.8")) and public(ipaddress.ip_address("2606:4700:4700::1111"))


def test_loopback_and_other_schemes_are_refused_by_the_gateways_rule(site: str) -> None:
    for url, words in (
        (f"{site}/cat.png", "local or private address (127.0.0.1)"),
        ("http://[::1]:9/cat.png", "local or private address"),
        ("http://169.254.169.254/latest/meta-data/", "local or private address"),
        ("ftp://example.com/cat.png", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("http://name.invalid/cat.png", "does not resolve|not fetched within"),  # however the resolver fails
    ):
        with pytest.raises(FetchRefused, match=words.replace("(", r"\(").replace(")", r"\)")):
            asyncio.run(fetch(url, 1000))


@pytest.mark.alone  # a 0.5 s fetch deadline is checked to a second
def test_a_fetch_reads_the_body_and_refuses_redirects_errors_size_and_time(site: str) -> None:
    assert asyncio.run(fetch(f"{site}/cat.png", 1000, allowed=anywhere)) == PNG
    with pytest.raises(FetchRefused, match=r"redirect .HTTP 302.; redirects are not followed"):
        asyncio.run(fetch(f"{site}/moved", 1000, allowed=anywhere))
    with pytest.raises(FetchRefused, match="answered HTTP 404"):
        asyncio.run(fetch(f"{site}/missing", 1000, allowed=anywhere))
    with pytest.raises(FetchRefused, match="over the limit of 100"):
        asyncio.run(fetch(f"{site}/cat.png", 100, allowed=anywhere))
    started = time.monotonic()
    with pytest.raises(FetchRefused, match=r"not fetched within 0\.5 s"):
        asyncio.run(fetch(f"{site}/slow", 1000, allowed=anywhere, seconds=0.5))
    assert time.monotonic() - started < 1.5


def test_the_switch_travels_with_the_limits_to_the_gateway_process() -> None:
    import argparse

    assert "--allow-image-urls" not in Limits().argv()
    assert "--allow-image-urls" in Limits(allow_image_urls=True).argv()
    parser = argparse.ArgumentParser()
    Limits.add_arguments(parser)
    assert Limits.from_arguments(parser.parse_args(Limits(allow_image_urls=True).argv())).allow_image_urls
    assert not Limits.from_arguments(parser.parse_args([])).allow_image_urls


def test_the_gateway_fetches_only_when_allowed_and_says_why_not(site: str) -> None:
    """Refusals come before any model is looked up, so no Triton is needed to see them."""
    from fastapi.testclient import TestClient

    from tritonhf.serve.app import create_app

    body = {"model": "clip", "modality": "image", "input": f"{site}/cat.png"}
    with TestClient(create_app("grpc://127.0.0.1:9")) as client:
        answer = client.post("/v1/embeddings", json=body)
    assert answer.status_code == 400 and "started without --allow-image-urls" in answer.json()["error"]["message"]
    with TestClient(create_app("grpc://127.0.0.1:9", limits=Limits(allow_image_urls=True))) as client:
        answer = client.post("/v1/embeddings", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "input[0]" and "local or private address (127.0.0.1)" in error["message"]
