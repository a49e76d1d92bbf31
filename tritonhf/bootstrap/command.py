"""How ``tritonserver`` is to run, as data, and its command line: no process, no I/O.

As pytriton separates ``TritonConfig`` from the process that runs it: ``ServerConfig`` holds
what the user chose (where it listens, what it exposes, the repository, model control, TLS),
``addresses()`` says where each service binds, ``argv()`` is the command line for given ports,
and ``restriction()`` the flag that closes the admin APIs of an exposed protocol. ``Server``
(process.py) resolves ports, launches, waits and stops; this module is unit-tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonhf.bootstrap.network import LOOPBACK, is_exposed, local_for, triton_address
from tritonhf.errors import BootstrapError

MODEL_CONTROL_MODES = ("none", "explicit", "poll")
EXPOSABLE = ("grpc", "http")
SERVICES = ("http", "grpc", "metrics")
ADMIN_APIS = "model-repository,shared-memory,statistics,trace,logging"
RESTRICTION_HEADER = "tritonhf-admin"


@dataclass(frozen=True)
class Tls:
    """TLS for the exposed gRPC endpoint: the server's certificate and key, and optionally a CA
    whose client certificates it requires (mutual TLS)."""

    cert: Path
    key: Path
    ca: Path | None = None

    def check(self) -> None:
        for path in (self.cert, self.key, self.ca):
            if path is not None and not path.is_file():
                raise BootstrapError(f"TLS file {path} does not exist.")


@dataclass(frozen=True)
class Installation:
    """The installed server's paths the command line names (a workspace's layout)."""

    binary: Path
    backends_dir: Path
    cache_dir: Path


@dataclass(frozen=True)
class ServerConfig:
    """What the user chose about one server; checked when made."""

    repository: str
    host: str = LOOPBACK
    expose: str = "grpc"
    expose_metrics: bool = False
    model_control: str = "explicit"
    log_verbose: int = 0
    exit_timeout: int = 10
    tls: Tls | None = None
    # Triton's default. False (--disable-auto-complete-config) where every config is complete as
    # written: Python models then load without a second stub process each (autocomplete.py).
    auto_complete: bool = True

    def __post_init__(self) -> None:
        if self.model_control not in MODEL_CONTROL_MODES:
            raise ValueError(
                f"model_control must be one of {', '.join(MODEL_CONTROL_MODES)}, not {self.model_control!r}."
            )
        if self.expose not in EXPOSABLE:
            raise ValueError(f"expose must be one of {', '.join(EXPOSABLE)}, not {self.expose!r}.")
        if self.tls is not None and self.expose != "grpc":
            raise ValueError("TLS is for the gRPC endpoint (Triton's HTTP server has none): use expose='grpc'.")

    @property
    def exposed(self) -> bool:
        return is_exposed(self.host)

    @property
    def admin_protocol(self) -> str:
        """The protocol tritonhf keeps on loopback for itself (the one not exposed)."""
        return "grpc" if self.exposed and self.expose == "http" else "http"

    def addresses(self) -> dict[str, str]:
        """Where each service listens: all on ``host`` when it is loopback; else the exposed protocol on
        ``host`` and the rest on loopback (metrics too, unless ``expose_metrics``)."""
        if not self.exposed:
            return dict.fromkeys(SERVICES, self.host)
        addresses = dict.fromkeys(SERVICES, local_for(self.host))
        addresses[self.expose] = self.host
        if self.expose_metrics:
            addresses["metrics"] = self.host
        return addresses

    def argv(self, installation: Installation, ports: dict[str, int], shm_prefix: str) -> list[str]:
        """The tritonserver command line for these ports, without the per-launch restriction."""
        addresses = self.addresses()
        command = [
            str(installation.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={installation.backends_dir}",
            f"--cache-directory={installation.cache_dir}",
            f"--model-control-mode={self.model_control}",
            f"--log-verbose={self.log_verbose}",
            f"--exit-timeout-secs={self.exit_timeout}",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        ]
        for service in SERVICES:
            command.append(f"--{service}-address={triton_address(addresses[service], service)}")
            command.append(f"--{service}-port={ports[service]}")
        if self.tls is not None:
            command += ["--grpc-use-ssl=true", f"--grpc-server-cert={self.tls.cert}"]
            command.append(f"--grpc-server-key={self.tls.key}")
            if self.tls.ca is not None:
                command += ["--grpc-use-ssl-mutual=true", f"--grpc-root-cert={self.tls.ca}"]
        if not self.auto_complete:
            command.append("--disable-auto-complete-config")
        if self.model_control == "explicit":
            command.append("--load-model=*")
        if self.model_control == "poll":
            command.append("--repository-poll-secs=5")
        return command


def restriction(host: str, admin_protocol: str, value: str) -> list[str]:
    """Beyond loopback: the flag that closes every admin API of the exposed protocol with ``value``
    (made anew at each launch and kept nowhere). On loopback: nothing."""
    if not is_exposed(host):
        return []
    exposed = "grpc" if admin_protocol == "http" else "http"
    flag = "--grpc-restricted-protocol" if exposed == "grpc" else "--http-restricted-api"
    return [f"{flag}={ADMIN_APIS}:{RESTRICTION_HEADER}={value}"]
