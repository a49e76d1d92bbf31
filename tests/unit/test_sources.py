"""Server sources lay out the usual Triton install shape; bad sources say what is wrong."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from tritonhf._progress import SilentProgress
from tritonhf.bootstrap.installation.sources import (
    DirSource,
    PipWheelSource,
    TarballSource,
    WheelSource,
    choose_source,
    python_version_tag,
)
from tritonhf.errors import BootstrapError


def _fake_wheel(path: Path, stub_versions: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:

        def add(name: str, mode: int = 0o644) -> None:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            archive.writestr(info, b"x")

        add("pytriton/tritonserver/bin/tritonserver", 0o755)
        add("pytriton/tritonserver/backends/python/libtriton_python.so")
        add("pytriton/tritonserver/caches/local/libtritoncache_local.so")
        add("pytriton/__init__.py")
        add("nvidia_pytriton.libs/libtritonserver-1.so")
        for version in stub_versions:
            add(f"pytriton/tritonserver/python_backend_stubs/{version}/triton_python_backend_stub", 0o644)
    return path


def test_wheel_is_laid_out_with_this_pythons_stub(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "w.whl", ["3.8", python_version_tag()])
    dest = tmp_path / "out"
    dest.mkdir()
    assert WheelSource(wheel).populate(dest, SilentProgress()) == python_version_tag()
    assert (dest / "bin/tritonserver").stat().st_mode & 0o111
    assert (dest / "lib/libtritonserver-1.so").is_file()
    assert (dest / "backends/python/libtriton_python.so").is_file()
    stub = dest / "backends/python/triton_python_backend_stub"
    assert stub.stat().st_mode & 0o111, "exec bit must be restored on the stub"
    assert not (dest / "python_backend_stubs").exists()
    assert not (dest / "__init__.py").exists()


def test_wheel_without_this_pythons_stub_names_the_versions(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "w.whl", ["3.8"])
    with pytest.raises(BootstrapError, match=r"3\.8.*not for this interpreter"):
        WheelSource(wheel).populate(tmp_path, SilentProgress())


def test_missing_wheel_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError, match="does not exist"):
        WheelSource(tmp_path / "nope.whl").fingerprint()


def _fake_install(root: Path) -> Path:
    for name in ("bin/tritonserver", "lib/libtritonserver.so", "backends/python/triton_python_backend_stub"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    return root


def test_dir_source_copies_an_install(tmp_path: Path) -> None:
    source = _fake_install(tmp_path / "opt" / "tritonserver")
    dest = tmp_path / "out"
    dest.mkdir()
    DirSource(source).populate(dest, SilentProgress())
    assert (dest / "lib/libtritonserver.so").is_file()
    assert (dest / "bin/tritonserver").stat().st_mode & 0o111


def test_dir_source_without_binary_says_where_to_point(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError, match="bin/tritonserver"):
        DirSource(tmp_path).fingerprint()


def test_tarball_top_folder_is_stripped(tmp_path: Path) -> None:
    source = _fake_install(tmp_path / "src" / "tritonserver")
    tarball = tmp_path / "triton.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(source, arcname="tritonserver")
    dest = tmp_path / "out"
    dest.mkdir()
    TarballSource(tarball).populate(dest, SilentProgress())
    assert (dest / "bin/tritonserver").is_file()


def test_choose_source() -> None:
    assert isinstance(choose_source(), PipWheelSource)
    assert isinstance(choose_source(from_wheel=Path("a.whl")), WheelSource)
    with pytest.raises(BootstrapError, match="at most one"):
        choose_source(from_wheel=Path("a"), from_dir=Path("b"))


def test_pip_source_reuses_the_cached_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = tmp_path / "tritonhf" / "wheels" / "nvidia_pytriton-0.7.0-py3-none-any.whl"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(io.BytesIO(b"x").read())
    assert PipWheelSource().download(SilentProgress()) == cached


def test_pips_own_output_goes_to_a_log_not_among_tritonhfs_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """pip's lines (its index, its progress bar) are kept in the cache's download.log, not printed between tritonhf's
    own; a download that fails names the log and pip's last words."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(
        BootstrapError, match=r"pip could not download tritonhf-no-such-package==0\.0\.1 .*download\.log"
    ):
        PipWheelSource("tritonhf-no-such-package==0.0.1").download(SilentProgress())
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == ""
    log = tmp_path / "tritonhf" / "wheels" / "download.log"
    assert "tritonhf-no-such-package" in log.read_text()
