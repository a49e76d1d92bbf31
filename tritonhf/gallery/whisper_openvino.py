"""Whisper on OpenVINO GenAI's ``WhisperPipeline`` (``--backend openvino``): the export at ``gallery add``.

``WhisperPipeline`` reads a folder in optimum-intel's layout: the encoder, a stateful decoder (its
KV cache inside the model), and the tokenizer and detokenizer as OpenVINO models. optimum-intel is
the exporter its documentation uses, but it pins transformers below the version tritonhf serves
with, so the export runs in a venv of its own, made once in the cache
(``$XDG_CACHE_HOME/tritonhf/openvino-export-venv``: optimum-intel, and the torch and OpenVINO
versions installed here). Only the exported folder enters the repository (``weights/openvino``);
serving needs openvino-genai and openvino-tokenizers, which the stub environment has for GGUF models.

Weights are exported in float32 and the template asks for float32 inference, so a greedy answer is
transformers' (a CPU with bf16 would otherwise run in bf16: a changed answer nobody asked for).
``--backend auto`` measures this engine beside PyTorch and CTranslate2 once the exporter's venv is
made (``--backend openvino`` makes it); a first ``auto`` does not download an exporter by itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tritonhf.bootstrap.installation.sources import cache_dir
from tritonhf.errors import GalleryError
from tritonhf.gallery.speech_engines import ct2_leaves_out

__all__ = ["EXPORTER_PACKAGES", "export", "exporter_python", "exporter_ready", "missing", "why_not"]

# optimum-intel's release whose exporter WhisperPipeline 2026.4 reads; the rest pinned to what is installed here
EXPORTER_PACKAGES = ("optimum-intel==2.2.0",)
_MATCHED = ("torch", "openvino", "openvino-tokenizers")  # the same versions as the serving side (local labels dropped)
# What WhisperPipeline opens in the exported folder.
EXPORTED_FILES = ("openvino_encoder_model.xml", "openvino_decoder_model.xml", "openvino_tokenizer.xml",
                  "openvino_detokenizer.xml", "generation_config.json", "preprocessor_config.json")  # fmt: skip


def venv_dir() -> Path:
    return cache_dir() / "openvino-export-venv"


def missing() -> str | None:
    """None when the serving side of this engine imports here (openvino-genai), else why not."""
    try:
        import openvino_genai  # noqa: F401
    except ImportError as exc:
        return f"openvino-genai is not installed ({exc}; pip install 'tritonhf[openvino]')"
    return None


def why_not(folder: Path) -> str | None:
    """None when this engine can serve the Whisper in ``folder``, else why not. Like CTranslate2's reader,
    the pipeline reads a long file window after window alone: a generation config that asks for more is
    served by PyTorch."""
    found = missing()
    if found is not None:
        return found
    leaves_out = ct2_leaves_out(folder)
    return None if leaves_out is None else leaves_out.replace("CTranslate2", "OpenVINO GenAI")


def exporter_ready() -> bool:
    """Is the exporter's venv made (so ``--backend auto`` can measure this engine without downloading)?"""
    return (venv_dir() / ".installed").is_file()


def _pins() -> list[str]:
    pins = list(EXPORTER_PACKAGES)
    for name in _MATCHED:  # one not installed here: the exporter's own resolution decides
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            pins.append(f"{name}=={importlib.metadata.version(name).split('+')[0]}")
    return pins


def exporter_python() -> Path:
    """The exporter venv's Python, made on first use (a lock keeps two ``gallery add`` from making it at once)."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / "openvino-export-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".installed").is_file():
            return python
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        # torchvision (which optimum may pull) fails to import beside a torch of another build: not needed here
        steps = ([_base_python(), "-m", "venv", "--clear", str(venv)], [*pip, *_pins()],
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


def export(folder: Path, out: Path, weight_format: str = "fp32") -> None:
    """The Whisper in ``folder`` exported for ``WhisperPipeline`` into ``out`` (float32 weights; the benchmark's
    peer row asks for ``int8``, as OpenVINO's own Whisper examples ship it)."""
    python = exporter_python()
    command = [str(python), "-m", "optimum.commands.optimum_cli", "export", "openvino", "--model", str(folder),
               "--task", "automatic-speech-recognition-with-past", "--weight-format", weight_format,
               str(out)]  # fmt: skip
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}  # a local folder; this venv's packages only
    with tempfile.TemporaryDirectory(prefix="tritonhf-ov-export-") as scratch:  # whatever it writes beside itself
        done = subprocess.run(command, capture_output=True, text=True, cwd=scratch, env=environment)
    absent = [name for name in EXPORTED_FILES if not (out / name).is_file()]
    if done.returncode != 0 or absent:
        why = done.stderr.strip()[-400:] if done.returncode != 0 else f"it wrote no {', '.join(absent)}"
        raise GalleryError(f"optimum-intel could not export the Whisper in {folder} for OpenVINO GenAI ({why}).")
