"""The server's command line from its configuration alone: no process, no ports opened."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tritonhf.bootstrap.autocomplete import needs_auto_complete
from tritonhf.bootstrap.command import Installation, ServerConfig, Tls, restriction
from tritonhf.gallery import AddRequest, add_model

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


PYTHON_CONFIG = """backend: "python"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def _model(repository: Path, name: str, config: str | None, source: str = "class TritonPythonModel: ...\n") -> Path:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "1" / "model.py").write_text(source)
    if config is not None:
        (repository / name / "config.pbtxt").write_text(config)
    return repository / name


def test_auto_complete_is_skipped_only_where_every_config_is_complete_as_written(
    tmp_path: Path, tiny: dict[str, Path]
) -> None:
    """Triton's auto-complete costs every Python model a second stub process at load; it is turned
    off only for a local repository whose every model needs nothing filled in."""
    repository = tmp_path / "models"
    repository.mkdir()
    assert not needs_auto_complete(repository), "an empty repository"
    add_model(AddRequest("text-classification", str(tiny["classifier"]), repository, name="clf"))
    _model(repository, "raiser", PYTHON_CONFIG)  # hand-written, inputs and outputs declared
    (repository / ".hidden").mkdir()  # gallery add's staging folders are not models
    assert not needs_auto_complete(repository)
    argv = ServerConfig(str(repository), auto_complete=False).argv(INSTALLED, PORTS, "p")
    assert "--disable-auto-complete-config" in argv
    assert "--disable-auto-complete-config" not in ServerConfig(str(repository)).argv(INSTALLED, PORTS, "p")

    for name, config, source in (
        ("bare", None, "class TritonPythonModel: ...\n"),  # no config.pbtxt
        ("asks", PYTHON_CONFIG, "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(c):\n"),
        ("no-outputs", PYTHON_CONFIG.split("output")[0], "class TritonPythonModel: ...\n"),
        ("onnx", 'platform: "onnxruntime_onnx"\nmax_batch_size: 4\n', ""),  # Triton reads its inputs from the file
        ("broken", "backend: python {", ""),
    ):
        made = _model(repository, name, config, source)
        assert needs_auto_complete(repository), name
        shutil.rmtree(made)
    assert not needs_auto_complete(repository)
    assert needs_auto_complete("s3://bucket/models") and needs_auto_complete(tmp_path / "missing")


def test_a_server_takes_its_config_whole_or_from_keywords(tmp_path: Path) -> None:
    """pytriton's shape: ``Server(workspace, ServerConfig(...))`` keeps that config, and no copy of its
    fields; the keywords make the same config."""
    from tritonhf.bootstrap import Server

    chosen = ServerConfig(str(tmp_path / "models"), log_verbose=1, model_control="poll")
    server = Server(tmp_path / "ws", chosen)
    assert server.config is chosen and server.repository == chosen.repository
    keywords = Server(tmp_path / "ws", repository=tmp_path / "models", log_verbose=1, model_control="poll")
    assert keywords.config == chosen
    default = Server(tmp_path / "ws")
    assert default.config.repository == str(default.workspace.model_repository)
    assert not hasattr(default, "host") and not hasattr(default, "tls"), "the config's fields live in the config"
    with pytest.raises(ValueError, match="log_verbose, repository given beside it would be dropped"):
        Server(tmp_path / "ws", chosen, log_verbose=2, repository=tmp_path / "other")
