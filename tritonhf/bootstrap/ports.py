"""Ports: pick free ones, check that the chosen ones are free, and name who holds a taken one."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from tritonhf.bootstrap.network import family
from tritonhf.errors import PortInUseError

AUTO = "auto"


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free right now on ``host``."""
    with socket.socket(family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def parse_port(value: str | int, service: str) -> int | None:
    """A port number, or None for ``auto``; anything else is a clear error."""
    if isinstance(value, int) or value != AUTO:
        try:
            port = int(value)
        except ValueError:
            port = -1
        if not 1 <= port <= 65535:
            raise ValueError(f"--{service}-port must be a number from 1 to 65535 or 'auto', not {value!r}.")
        return port
    return None


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def holder_of(port: int) -> str | None:
    """``name (pid N)`` of the process listening on ``port``, where /proc lets us see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fd_dir = Path("/proc", pid, "fd")
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        name = Path("/proc", pid, "comm").read_text().strip()
                        return f"{name} (pid {pid})"
    return None


def ensure_free(port: int, service: str, host: str = "127.0.0.1") -> None:
    """Raise ``PortInUseError`` naming the port, the service and the holder when taken."""
    if is_free(port, host):
        return
    holder = holder_of(port)
    by = f" by {holder}" if holder else ""
    raise PortInUseError(
        f"The {service} port {port} on {host} is already in use{by}. Stop that process, "
        f"or choose another port (--{service}-port N, or --{service}-port auto).",
        port=port,
    )
