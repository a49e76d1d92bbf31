"""Server-layer pieces that need no server: process identity, archives, wheel cache, addresses, doctor."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tritonhf.bootstrap import network
from tritonhf.bootstrap.doctor import elf_machine
from tritonhf.bootstrap.installation.sources import safe_extract, wheel_fits
from tritonhf.bootstrap.spawn import Identity, identity_of


def test_identity_tells_a_reused_pid_from_the_process_we_started() -> None:
    process = subprocess.Popen(["sleep", "30"])
    try:
        identity = identity_of(process)
        assert identity is not None and identity.alive() and identity.executable == "sleep"
        impostor = Identity(process.pid, identity.started + 1, identity.executable)
        assert not impostor.alive() and not impostor.signal(9), "another start time: not ours, not signalled"
        assert process.poll() is None
        assert identity.stop(grace=5) and process.wait(5) is not None
    finally:
        process.kill()
    assert Identity.of(process.pid) is None or not identity.alive()


def _tar(members: dict[str, bytes], links: dict[str, str] | None = None) -> tarfile.TarFile:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    buffer.seek(0)
    return tarfile.open(fileobj=buffer)


@pytest.mark.parametrize("filters", [True, False], ids=["python-with-filters", "older-python"])
def test_tarballs_never_write_outside_their_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filters: bool
) -> None:
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter")  # as on Python < 3.10.12 / 3.11.4
    safe_extract(_tar({"tritonserver/bin/tritonserver": b"x"}), tmp_path / "ok")
    assert (tmp_path / "ok" / "tritonserver" / "bin" / "tritonserver").read_bytes() == b"x"
    for bad in (_tar({"../escape": b"x"}), _tar({"/abs-tritonhf-test": b"x"}), _tar({}, {"link": "/etc/passwd"})):
        with contextlib.suppress(tarfile.TarError):  # refused, or made safe (Python's filter strips a leading /)
            safe_extract(bad, tmp_path / "bad")
    assert not (tmp_path / "escape").exists() and not Path("/abs-tritonhf-test").exists()
    link = tmp_path / "bad" / "link"
    assert not link.is_symlink() or link.resolve().is_relative_to(tmp_path), "a link out of the folder was made"


def test_the_wheel_cache_only_offers_wheels_for_this_platform() -> None:
    ours = frozenset({"py3-none-manylinux_2_35_x86_64"})
    assert wheel_fits("nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl", ours)
    assert not wheel_fits("nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_aarch64.whl", ours)
    assert not wheel_fits("not-a-wheel.whl", ours)


def test_addresses_in_the_forms_triton_and_urls_want() -> None:
    assert network.triton_address("::1", "http") == "ipv6:::1"
    assert network.triton_address("::1", "grpc") == "[::1]"
    assert network.triton_address("127.0.0.1", "grpc") == "127.0.0.1"
    assert network.url_host("0.0.0.0") == "127.0.0.1" and network.url_host("::") == "[::1]"
    assert network.is_exposed("0.0.0.0") and network.is_exposed("127.0.0.2") and not network.is_exposed("::1")


def test_doctor_reads_the_architecture_of_a_binary() -> None:
    assert elf_machine(Path(sys.executable).resolve()) in ("x86_64", "aarch64")
    assert elf_machine(Path(__file__)) is None


@pytest.mark.slow  # seconds of CPU: `make test` runs it, `make test-fast` leaves it out
def test_templates_import_nothing_of_tritonclient_grpc_or_protobuf(tmp_path: Path, tiny: dict[str, Path]) -> None:
    """What the stub imports for a template: model.py and the tritonhf_runtime package (python -X importtime)."""
    import tritonhf.gallery.stub
    from tritonhf.gallery import AddRequest, add_model

    stub = tritonhf.gallery.stub.__file__  # the stand-in pb_utils, loaded alone: it imports numpy only
    engine = {"text-generation": "transformers"}  # the tiny GPT-2 as it is (auto would export it to OpenVINO IR)
    folders = [
        add_model(AddRequest(task, str(tiny[source]), tmp_path / "repo", name=task, engine=engine.get(task, "auto")))
        / "1"
        for task, source in (("text-classification", "classifier"), ("text-generation", "generator"), ("ner", "ner"))
    ]
    # one interpreter imports the three (torch and transformers once), each model.py under its own name
    code = (
        "import sys, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('triton_python_backend_utils', {stub!r})\n"
        "sys.modules['triton_python_backend_utils'] = stub = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(stub)\n"
        "for index, folder in enumerate(sys.argv[1:]):\n"
        "    spec = importlib.util.spec_from_file_location(f'model{index}', folder + '/model.py')\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "import transformers_engine  # what the generation template loads (tritonhf.engine)\n"
        "print('LOADED', index + 1)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tritonclient', 'grpc', 'tritonhf') "
        "or m.startswith('google.protobuf')); print('BAD', bad)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, folders))}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *map(str, folders)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "BAD []" in result.stdout, result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "tritonhf_runtime" in imported and not any(name.startswith("tritonclient") for name in imported)
    assert "LOADED 3" in result.stdout and "transformers_engine" in imported  # the three templates and the engine
