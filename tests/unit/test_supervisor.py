"""Supervisor pieces that need no server: policy, names, and reading the log for unhealthy stubs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.stubs import instance_model
from tritonhf.bootstrap.supervisor import Policy, Supervisor


def test_backoff_doubles_up_to_a_cap() -> None:
    policy = Policy(backoff_base=1.0, backoff_max=5.0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_instance_names_map_to_models() -> None:
    assert instance_model("clf_0_0") == "clf"
    assert instance_model("my_model_v2_1_3") == "my_model_v2"


def test_unhealthy_lines_logged_after_start_are_reported_once(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    workspace.create_folders()
    workspace.server_log.write_text("E1 old line: Stub process 'stale_0_0' is not healthy.\n")
    supervisor = Supervisor(SimpleNamespace(workspace=workspace, state=None))  # type: ignore[arg-type]
    with workspace.server_log.open("a") as log:
        log.write(
            "E2 python_be.cc] Failed to process the request(s) for model 'clf_0_0', message: "
            "Stub process 'clf_0_0' is not healthy.\n"
        )
    assert supervisor._reported_unhealthy() == {"clf"}
    assert supervisor._reported_unhealthy() == set(), "each line counts once"


class FakeServer:
    """A ServerHandle: one Python model with its stub alive, one native part with no stub."""

    def __init__(self, workspace: Workspace, probe_error: str | None = None) -> None:
        from tritonhf.bootstrap.admin import ModelStatus

        self.workspace = workspace
        self.state = SimpleNamespace(pid=1, shm_prefix="triton_python_backend_shm_region_thfnone_")
        self.reloaded: list[str] = []
        self.probed: list[str] = []
        self.probe_error = probe_error
        self._models = [ModelStatus("emb", "1", "READY"), ModelStatus("emb__onnx", "1", "READY")]

    def exit_code(self) -> int | None:
        return None

    def models(self) -> list:  # type: ignore[type-arg]
        return self._models

    def instance_count(self, name: str) -> int:
        return 1

    def backend(self, name: str) -> str:
        return "onnxruntime" if name.endswith("__onnx") else "python"

    def reload_model(self, name: str, timeout: float = 120.0) -> bool:
        self.reloaded.append(name)
        return True

    def probe(self, name: str) -> str | None:
        self.probed.append(name)
        return self.probe_error

    def relaunch(self) -> None:
        raise AssertionError("not expected")


def test_a_native_part_is_probed_not_counted_as_a_missing_stub(tmp_path: Path, monkeypatch: object) -> None:
    import tritonhf.bootstrap.supervisor as supervisor_module
    from tritonhf.bootstrap.stubs import Stub

    workspace = Workspace(tmp_path)
    workspace.create_folders()
    stub = Stub(10, "emb_0_0", "triton_python_backend_shm_region_thfnone_emb", True, 1)
    monkeypatch.setattr(supervisor_module, "stubs_of", lambda prefix: [stub])  # type: ignore[attr-defined]
    healthy = FakeServer(workspace)
    supervisor = Supervisor(healthy, Policy(probe_interval=0.0))  # type: ignore[arg-type]
    for _ in range(8):
        supervisor.check_once()
    assert healthy.reloaded == [], "a model without a stub is not 'repaired' in a loop"
    assert healthy.probed.count("emb__onnx") == 8 and "emb" not in healthy.probed
    broken = FakeServer(workspace, probe_error="connection reset")
    Supervisor(broken, Policy(probe_interval=0.0)).check_once()  # type: ignore[arg-type]
    assert broken.reloaded == ["emb__onnx"]


def test_a_stack_from_its_state_file_keeps_its_gateway_and_limits(tmp_path: Path) -> None:
    from tritonhf.bootstrap.stack import Gateway, Stack
    from tritonhf.bootstrap.state import ServerState

    workspace = Workspace.at(tmp_path / "ws")
    workspace.create_folders()
    state = ServerState(pid=1, started=1, binary="/bin/true", host="127.0.0.1", http_address="127.0.0.1",
                        grpc_address="127.0.0.1", metrics_address="127.0.0.1", http_port=1, grpc_port=2,
                        metrics_port=3, admin_protocol="http", tls=False, shm_prefix="x", log="l", repository="r",
                        model_control="explicit", started_at=0.0, command=[])  # fmt: skip
    state.gateway_host, state.gateway_port, state.gateway_args = "127.0.0.1", 9123, ["--max-concurrent-requests", "2"]
    state.save(workspace.state_file)
    stack = Stack.from_state(workspace)
    assert stack.gateway == Gateway("127.0.0.1", 9123, ("--max-concurrent-requests", "2"))
    assert stack.gateway_url == "http://127.0.0.1:9123/v1"
    assert not stack.supervise, "the daemon is the supervisor: it does not start another"
