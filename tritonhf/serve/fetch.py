"""Images named by URL, fetched only when the gateway was started with ``--allow-image-urls``.

Why so guarded: a server that fetches whatever URL a caller names can be made to reach hosts
only it can see (a cloud's metadata service at 169.254.169.254, admin ports on loopback, the
private network): server-side request forgery. So a fetch takes http and https only; the host
is resolved once and every address it resolves to must be public (not loopback, private,
link-local, shared, multicast, reserved or unspecified), and the connection goes to those very
addresses, so a second DNS answer cannot swap a private one in; redirects are not followed
(each hop would need the same checks); the body is read up to ``limit`` bytes (the gateway's
``--payload-limit``) and the whole fetch ends within ``FETCH_SECONDS``. Refusals say which of
these the URL failed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.parse
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from tritonhf._wire.aio_transport import bounded

FETCH_SECONDS = 10.0
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class FetchRefused(ValueError):
    """The URL was not fetched, or its answer not taken; the message says why (for a 400)."""


def public(address: Address) -> bool:
    """An address on the public internet: ``is_global`` leaves out loopback, private, link-local,
    shared (100.64/10), reserved and unspecified ranges; multicast is left out too."""
    return address.is_global and not address.is_multicast


async def fetch(
    url: str, limit: int, *, allowed: Callable[[Address], bool] = public, seconds: float = FETCH_SECONDS
) -> bytes:
    """The body of ``url`` (at most ``limit`` bytes), fetched under the rules above."""
    try:
        return await bounded(_fetch(url, limit, allowed, seconds), seconds)
    except TimeoutError:
        raise FetchRefused(f"was not fetched within {seconds:g} s.") from None


async def _fetch(url: str, limit: int, allowed: Callable[[Address], bool], seconds: float) -> bytes:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchRefused("must be an http or https URL with a host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise FetchRefused(f"has a bad port ({exc}).") from None
    try:
        found = await asyncio.get_running_loop().getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise FetchRefused(f"names a host that does not resolve ({exc}).") from None
    addresses = sorted({str(info[4][0]) for info in found})
    refused = [address for address in addresses if not allowed(ipaddress.ip_address(address.split("%")[0]))]
    if refused or not addresses:
        raise FetchRefused(f"resolves to a local or private address ({', '.join(refused) or 'none'}); this server "
                           "fetches public addresses only.")  # fmt: skip
    connector = aiohttp.TCPConnector(resolver=_Pinned(parts.hostname, found), use_dns_cache=False)
    timeout = aiohttp.ClientTimeout(total=seconds)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        try:
            async with session.get(url, allow_redirects=False) as response:
                if 300 <= response.status < 400:
                    raise FetchRefused(f"answered a redirect (HTTP {response.status}); redirects are not followed.")
                if response.status != 200:
                    raise FetchRefused(f"answered HTTP {response.status}.")
                if response.content_length is not None and response.content_length > limit:
                    raise FetchRefused(f"is {response.content_length} bytes, over the limit of {limit}.")
                body = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > limit:
                        raise FetchRefused(f"is over the limit of {limit} bytes.")
                return bytes(body)
        except aiohttp.ClientError as exc:
            raise FetchRefused(f"could not be fetched ({exc}).") from None


class _Pinned(AbstractResolver):
    """aiohttp's resolver, answering only with the addresses that were checked (no second lookup)."""

    def __init__(self, host: str, found: list[Any]) -> None:
        self.host, self.found = host, found

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != self.host:
            raise OSError(f"{host} was not checked")
        return [
            ResolveResult(
                hostname=host,
                host=str(info[4][0]),
                port=port,
                family=info[0],
                proto=info[2],
                flags=socket.AI_NUMERICHOST,
            )
            for info in self.found
        ]

    async def close(self) -> None:
        """Nothing to release."""
