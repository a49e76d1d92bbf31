"""Addresses: loopback or not, IPv4 or IPv6, and the forms Triton and URLs want them in.

Triton 2.51 needs an IPv6 address as ``ipv6:ADDR`` for its HTTP and metrics services (a bare
``::1`` is read as IPv4 and binds 255.255.255.255) and as ``[ADDR]`` for gRPC (a bare ``::1``
fails with "Socket '::1:8001' already in use"). Recorded by hand; see tests/integration.
"""

from __future__ import annotations

import ipaddress
import socket

LOOPBACK = "127.0.0.1"
ANY = ("0.0.0.0", "::", "")


def is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        return False


def is_exposed(host: str) -> bool:
    """Is a service bound to ``host`` treated as reachable by others?

    Everything but the default loopback addresses counts: 0.0.0.0, a LAN address, and also
    127.0.0.2 (tests rehearse exposure there without leaving the machine).
    """
    return host not in (LOOPBACK, "localhost", "::1")


def family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if is_ipv6(host) else socket.AF_INET


def local_for(host: str) -> str:
    """The loopback address of ``host``'s family (where this machine reaches a service bound to any)."""
    return "::1" if is_ipv6(host) else LOOPBACK


def url_host(address: str) -> str:
    """``address`` as the host part of a URL: a wildcard becomes loopback, IPv6 gets brackets."""
    host = local_for(address) if address in ANY else address
    return f"[{host}]" if is_ipv6(host) else host


def triton_address(address: str, service: str) -> str:
    """``address`` as Triton's --http/--grpc/--metrics-address wants it."""
    if not is_ipv6(address):
        return address
    return f"[{address}]" if service == "grpc" else f"ipv6:{address}"
