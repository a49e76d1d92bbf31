"""The environment the Python backend stub runs in, and the wiring it needs.

The stub is a separate process that embeds libpython. What it needs was found by
hand (see the project's facts file); each need below names the failure it prevents:

* the server's ``lib/`` on ``LD_LIBRARY_PATH``: else the stub cannot load libcudart and the
  server hangs at ``loading: <model>:1`` forever;
* the interpreter's own ``libpythonX.Y.so`` first on ``LD_LIBRARY_PATH``: else a system
  libpython of another patch level is loaded (``undefined symbol: _PyModule_Add``);
* the environment's ``bin/`` first on ``PATH``: the stub finds its ``sys.prefix`` from the
  first ``python3`` there (it ignores ``PYTHONPATH``), else model.py sees no transformers;
* numpy < 2 in that environment: the stub's pybind11 predates numpy 2 and BYTES crash it.
  ``tritonhf bootstrap`` makes a workspace environment of its own for that (``stub_env``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tritonhf.bootstrap.layout import Workspace
from tritonhf.errors import StubEnvironmentError

_PROBE = """
import importlib.metadata as m, importlib.util as u, json, sys, sysconfig
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({
    "version": "%d.%d" % sys.version_info[:2],
    "prefix": sys.prefix,
    "libdir": sysconfig.get_config_var("LIBDIR") or "",
    "ldlibrary": sysconfig.get_config_var("LDLIBRARY") or "",
    "numpy": version("numpy"),
    "torch": version("torch"),
    "transformers": version("transformers"),
}))
"""


_VERSIONS = """
import importlib.metadata as m, json, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({name: version(name) for name in sys.argv[1:]}))
"""


@dataclass(frozen=True)
class StubEnvironment:
    """A Python environment (a venv or a base install) the stub will run model.py in."""

    python: Path
    version: str
    prefix: Path
    libdir: Path
    ldlibrary: str
    numpy: str | None
    torch: str | None
    transformers: str | None

    @classmethod
    def current(cls) -> StubEnvironment:
        """The environment running tritonhf, read without starting a process."""
        from importlib import metadata

        def version(name: str) -> str | None:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                return None

        return cls(
            python=Path(sys.executable),
            version=f"{sys.version_info.major}.{sys.version_info.minor}",
            prefix=Path(sys.prefix),
            libdir=Path(sysconfig.get_config_var("LIBDIR") or ""),
            ldlibrary=sysconfig.get_config_var("LDLIBRARY") or "",
            numpy=version("numpy"),
            torch=version("torch"),
            transformers=version("transformers"),
        )

    @classmethod
    def for_workspace(cls, workspace: Workspace) -> StubEnvironment:
        """The environment a workspace's stubs run in: the one ``tritonhf bootstrap`` prepared in
        it (``stub_env/``) when there is one, else the environment running tritonhf."""
        python = workspace.stub_env_python
        return cls.of(python) if python.exists() else cls.current()

    @classmethod
    def of(cls, python: Path) -> StubEnvironment:
        """Another environment, given its ``python`` executable (probed in a subprocess)."""
        try:
            output = subprocess.run(
                [str(python), "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise StubEnvironmentError(
                f"Could not run {python} to inspect it ({exc}). Give the python of an environment "
                "that has transformers and torch installed."
            ) from exc
        data = json.loads(output)
        return cls(
            python=python,
            version=data["version"],
            prefix=Path(data["prefix"]),
            libdir=Path(data["libdir"]),
            ldlibrary=data["ldlibrary"],
            numpy=data["numpy"],
            torch=data["torch"],
            transformers=data["transformers"],
        )

    def versions(self, names: list[str]) -> dict[str, str | None]:
        """The installed version of each distribution in this environment (None where missing)."""
        code = _VERSIONS
        try:
            output = subprocess.run(
                [str(self.bin_dir / "python"), "-c", code, *names],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise StubEnvironmentError(
                f"Could not run {self.bin_dir / 'python'} to read its packages ({exc})."
            ) from exc
        return dict(json.loads(output))

    @property
    def bin_dir(self) -> Path:
        # Not python.parent: a venv's python is a symlink and the stub must see the venv's bin.
        return self.prefix / "bin"

    @property
    def libpython(self) -> Path:
        """The shared libpython the stub must load (``libpython3.11.so.1.0``)."""
        return self.libdir / f"libpython{self.version}.so.1.0"

    def numpy_major(self) -> int | None:
        if self.numpy is None:
            return None
        try:
            return int(self.numpy.split(".")[0])
        except ValueError:
            return None

    def problems(self) -> list[str]:
        """What would stop models from loading here, each with its fix; empty when fit."""
        found: list[str] = []
        pip = f"{self.bin_dir / 'python'} -m pip install"
        if self.numpy_major() is not None and (self.numpy_major() or 0) >= 2:
            found.append(
                f"numpy {self.numpy} is what the stub would see in {self.prefix}, but Triton's Python backend "
                "stub needs numpy < 2 (BYTES inputs crash it otherwise). Fix: run `tritonhf bootstrap`, which "
                "gives the stub an environment of its own (WORKSPACE/stub_env) and leaves yours as it is."
            )
        if self.numpy is None:
            found.append(f"numpy is not installed in {self.prefix}. Fix: run `tritonhf bootstrap`, or {pip} 'numpy<2'")
        if self.transformers is None or self.torch is None:
            missing = [name for name in ("transformers", "torch") if getattr(self, name) is None]
            found.append(
                f"{' and '.join(missing)} not installed in {self.prefix}; gallery models import "
                f"them. Fix: {pip} {' '.join(missing)}"
            )
        if not self.libpython.exists():
            found.append(
                f"No shared {self.libpython.name} in {self.libdir}: this Python was built without "
                "--enable-shared and the stub cannot embed it. Fix: use a Python with a shared "
                "libpython (Debian/Ubuntu python3, or pyenv with PYTHON_CONFIGURE_OPTS=--enable-shared)."
            )
        return found

    def server_env(self, lib_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
        """The process environment for tritonserver so that its stubs run in this environment."""
        env = dict(os.environ if base is None else base)
        library_path = [str(self.libdir), str(lib_dir)]
        if env.get("LD_LIBRARY_PATH"):
            library_path.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(library_path)
        env["PATH"] = os.pathsep.join([str(self.bin_dir), env.get("PATH", "")])
        # The stub ignores these, but a PYTHONHOME pointing elsewhere confuses libpython.
        env.pop("PYTHONHOME", None)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env
