"""The server's command line from its configuration alone: no process, no ports opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonhf.bootstrap.command import Installation, ServerConfig, Tls, restriction

INSTALLED = Installation(Path("/ws/bin/tritonserver"), Path("/ws/backends"), Path("/ws/caches"))
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}


def test_loopback_binds_everything_there_and_loads_every_model() -> None:
    config = ServerConfig("/ws/models")
    argv = config.argv(INSTALLED, PORTS, "tritonhf_abc")
    assert argv[0] == "/ws/bin/tritonserver" and "--model-repository=/ws/models" in argv
    assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"} <= set(argv)
    assert "--backend-config=python,shm-region-prefix-name=tritonhf_abc" in argv and "--load-model=*" in argv
    assert config.admin_protocol == "http" and not config.exposed
    assert restriction(config.host, config.admin_protocol, "secret") == []


def test_exposing_grpc_keeps_the_rest_on_loopback_and_closes_its_admin_apis() -> None:
    config = ServerConfig("s3://bucket/repo", host="0.0.0.0", tls=Tls(Path("c.pem"), Path("k.pem")))
    assert config.addresses() == {"http": "127.0.0.1", "grpc": "0.0.0.0", "metrics": "127.0.0.1"}
    argv = config.argv(INSTALLED, PORTS, "p")
    assert "--grpc-use-ssl=true" in argv and "--grpc-server-key=k.pem" in argv
    assert "--grpc-use-ssl-mutual=true" not in argv
    (flag,) = restriction(config.host, config.admin_protocol, "v")
    assert flag.startswith("--grpc-restricted-protocol=model-repository,") and flag.endswith(":tritonhf-admin=v")
    http = ServerConfig("/r", host="10.0.0.5", expose="http", expose_metrics=True, model_control="poll")
    assert http.admin_protocol == "grpc" and http.addresses()["metrics"] == "10.0.0.5"
    assert "--repository-poll-secs=5" in http.argv(INSTALLED, PORTS, "p")
    assert restriction(http.host, http.admin_protocol, "v")[0].startswith("--http-restricted-api=")


@pytest.mark.parametrize(
    ("options", "word"),
    [
        ({"model_control": "sometimes"}, "model_control"),
        ({"expose": "udp"}, "expose"),
        ({"expose": "http", "tls": Tls(Path("c"), Path("k"))}, "TLS"),
    ],
)
def test_a_bad_choice_is_refused_when_made(options: dict[str, object], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        ServerConfig("/r", **options)  # type: ignore[arg-type]
