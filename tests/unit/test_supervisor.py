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
