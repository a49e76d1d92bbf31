"""The Python environment the stubs run in, kept apart from the user's: numpy < 2 of its own.

Triton 2.51's Python-backend stub predates numpy 2 (BYTES tensors crash it), while notebooks
such as Colab come with numpy 2 and packages built against it. Downgrading the notebook's
numpy means a runtime restart and can break what else is installed. So ``tritonhf bootstrap``
makes ``WORKSPACE/stub_env``: a venv of the same interpreter holding only numpy < 2 (when the
user's numpy is 2 or missing), plus one ``.pth`` line that adds the user's site-packages
*after* its own. torch, transformers, tokenizers, safetensors ... are shared, not copied;
the venv's numpy wins inside the stub; the user's environment keeps whatever numpy it has.
(Wheels built against numpy 2, torch's among them, run with numpy 1.x: numpy keeps that
compatibility; the Colab-like test proves it for what the templates import.)
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from tritonhf._progress import Progress, SilentProgress
from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.layout import Workspace
from tritonhf.errors import StubEnvironmentError

STUB_NUMPY = "numpy<2"
SHARED_PTH = "tritonhf_shared.pth"


def shared_site_dirs() -> list[str]:
    """The site-packages folders of the environment running tritonhf (venv, system or user site)."""
    folders = [*site.getsitepackages()]
    for key in ("purelib", "platlib"):
        folders.append(sysconfig.get_paths()[key])
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    unique = list(dict.fromkeys(str(Path(folder)) for folder in folders))
    return [folder for folder in unique if Path(folder).is_dir()]


def pth_text(folders: list[str]) -> str:
    """Lines that add the user's site-packages after the venv's own (their .pth files run too)."""
    lines = ["# Written by tritonhf bootstrap: the user's packages, after this environment's own numpy."]
    lines += [f"import site; site.addsitedir({folder!r})" for folder in folders]
    return "\n".join(lines) + "\n"


def _site_packages(venv: Path) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / version / "site-packages"


def is_current(workspace: Workspace) -> bool:
    """Is the stub environment there, for this interpreter, sharing this environment's packages?"""
    folder = workspace.stub_env_dir
    pth = _site_packages(folder) / SHARED_PTH
    try:
        return workspace.stub_env_python.exists() and pth.read_text() == pth_text(shared_site_dirs())
    except OSError:
        return False


def prepare(workspace: Workspace, progress: Progress | None = None) -> StubEnvironment:
    """``WORKSPACE/stub_env``, made (or remade) when missing or stale; its description.

    Built in a hidden folder and renamed into place, like the server install.
    """
    progress = progress or SilentProgress()
    user = StubEnvironment.current()
    if is_current(workspace):
        return _checked(StubEnvironment.of(workspace.stub_env_python))
    progress.step(f"Preparing the stub's Python environment in {workspace.stub_env_dir}")
    workspace.root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".stub_env.partial-", dir=workspace.root))
    try:
        _run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(staging)], "create a venv")
        target = _site_packages(staging)
        if user.numpy is None or (user.numpy_major() or 0) >= 2:
            progress.step(f"Installing {STUB_NUMPY} for the stub only (this environment keeps numpy {user.numpy})")
            _run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                 "--target", str(target), STUB_NUMPY],
                f"install {STUB_NUMPY} into the stub environment",
            )  # fmt: skip
        (target / SHARED_PTH).write_text(pth_text(shared_site_dirs()))
        shutil.rmtree(workspace.stub_env_dir, ignore_errors=True)
        staging.replace(workspace.stub_env_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _checked(StubEnvironment.of(workspace.stub_env_python))


def _checked(environment: StubEnvironment) -> StubEnvironment:
    problems = environment.problems()
    if problems:
        raise StubEnvironmentError("The stub's environment cannot serve models:\n- " + "\n- ".join(problems))
    return environment


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise StubEnvironmentError(
            f"Could not {what} ({' '.join(detail)}). Check network access to PyPI, or install "
            f"'{STUB_NUMPY}' into this environment yourself."
        )
