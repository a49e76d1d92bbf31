"""The venv optimum-intel exports from, made once in the cache (``$XDG_CACHE_HOME/tritonhf/openvino-export-venv``).

optimum-intel is the exporter OpenVINO GenAI's documentation uses, but it pins transformers below the version
tritonhf serves with, so it runs in a venv of its own: optimum-intel, with torch, OpenVINO and
openvino-tokenizers at the versions installed here. Whisper's export (the speech family's ``openvino``) and a
causal LM's IR export (the generation family's ``ir_export``) both run in it. Making it needs the package index; a
file lock keeps two ``gallery add`` from making it at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tritonhf.bootstrap.installation.sources import cache_dir
from tritonhf.errors import GalleryError, ModelSourceError

__all__ = ["EXPORTER_PACKAGES", "export", "export_model", "exporter_python", "exporter_ready", "venv_dir"]

# optimum-intel's release whose exporter WhisperPipeline 2026.4 reads; the rest pinned to what is installed here
EXPORTER_PACKAGES = ("optimum-intel==2.2.0",)
_MATCHED = ("torch", "openvino", "openvino-tokenizers")  # the same versions as the serving side (local labels dropped)


# optimum-intel's refusal of a family the venv's transformers is too new for, and the newest it takes
_TOO_NEW = re.compile(r"Maximum required is (\d[\w.]*)")


def venv_dir(pins: tuple[str, ...] = ()) -> Path:
    """The exporter's venv; ``pins`` (a family's own, e.g. ``transformers<=4.57.6``) get one of their own."""
    suffix = "-" + hashlib.sha256(" ".join(pins).encode()).hexdigest()[:10] if pins else ""
    return cache_dir() / f"openvino-export-venv{suffix}"


def exporter_ready() -> bool:
    """Is the exporter's venv made (so ``--backend auto`` can measure this engine without downloading)?"""
    return (venv_dir() / ".installed").is_file()


def _pins(extra: tuple[str, ...] = ()) -> list[str]:
    pins = [*EXPORTER_PACKAGES, *extra]
    for name in _MATCHED:  # one not installed here: the exporter's own resolution decides
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            pins.append(f"{name}=={importlib.metadata.version(name).split('+')[0]}")
    return pins


def exporter_python(pins: tuple[str, ...] = ()) -> Path:
    """The exporter venv's Python, made on first use (a lock keeps two ``gallery add`` from making it at once)."""
    venv = venv_dir(pins)
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".installed").is_file():
            return python
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        # torchvision (which optimum may pull) fails to import beside a torch of another build: not needed here
        steps = ([_base_python(), "-m", "venv", "--clear", str(venv)], [*pip, *_pins(pins)],
                 [str(python), "-m", "pip", "uninstall", "--yes", "--quiet", "torchvision"])  # fmt: skip
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                raise GalleryError(
                    f"Could not make the OpenVINO exporter's venv in {venv} ({' '.join(step[:5])}: "
                    f"{done.stderr.strip()[-400:]}). It needs the package index (optimum-intel and its dependencies)."
                )
        (venv / ".installed").touch()
    return python


def _base_python() -> str:
    """The interpreter this venv's is made from (``python -m venv`` from inside a venv would nest its site)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def export(folder: Path, out: Path, task: str, options: list[str], expected: tuple[str, ...]) -> str | None:
    """``optimum-cli export openvino`` of the model in ``folder`` (a local folder, this venv's packages only) for
    ``task`` into ``out``: None once it wrote every file of ``expected``, else why not. A family optimum-intel
    exports only with an older transformers is exported again from a venv with that one."""
    why = _export(folder, out, task, options, expected, ())
    too_new = _TOO_NEW.search(why or "")
    if too_new:
        why = _export(folder, out, task, options, expected, (f"transformers<={too_new[1]}",))
    return why


def export_model(
    folder: Path, out: Path, task: str, options: list[str], expected: tuple[str, ...], fix: str = ""
) -> None:
    """``export``, or a ModelSourceError in one line saying why not: the venv that could not be made (and where it is
    kept), or optimum-intel's last line, then ``fix`` (what else serves the model)."""
    try:
        why = export(folder, out, task, options, expected)
    except GalleryError as exc:  # the exporter's venv could not be made
        said = " ".join(str(exc).split())  # one line: pip's output can span several
        raise ModelSourceError(
            f"{said} Fix: run the same `tritonhf gallery add` once where the package index is reachable; the venv "
            f"is kept in {venv_dir()}"
        ) from exc
    if why is not None:
        last = next((line.strip() for line in reversed(why.splitlines()) if line.strip()), why)
        raise ModelSourceError(
            f"optimum-intel ({', '.join(EXPORTER_PACKAGES)}) could not export the model to OpenVINO IR: {last}"
            + (f". {fix}" if fix else "")
        )


def _export(
    folder: Path, out: Path, task: str, options: list[str], expected: tuple[str, ...], pins: tuple[str, ...]
) -> str | None:
    command = [str(exporter_python(pins)), "-m", "optimum.commands.optimum_cli", "export", "openvino", "--model",
               str(folder), "--task", task, *options, str(out)]  # fmt: skip
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    with tempfile.TemporaryDirectory(prefix="tritonhf-ov-export-") as scratch:  # whatever it writes beside itself
        done = subprocess.run(command, capture_output=True, text=True, cwd=scratch, env=environment)
    if done.returncode != 0:
        return done.stderr.strip()[-400:]
    absent = [name for name in expected if not (out / name).is_file()]
    return f"it wrote no {', '.join(absent)}" if absent else None
