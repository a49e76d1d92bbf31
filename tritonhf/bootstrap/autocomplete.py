"""Whether Triton must complete a repository's model configs at load (its default), or may skip it.

With auto-complete on (Triton's default), the Python backend starts one extra stub process per
model at load, only to ask ``model.py`` for ``auto_complete_config``; that stub imports the model's
libraries (torch, transformers ...) like the instance's own stub does afterwards, so every Python
model is imported twice before it serves. Configs written by ``tritonhf gallery add`` are complete,
and so is a hand-written Python-backend config that declares its inputs and outputs when its
``model.py`` defines no ``auto_complete_config``; for a repository of only those, tritonhf starts
the server with ``--disable-auto-complete-config`` and models load in about half the time
(docs/operations.md has the figures). Anything else (a model without a config, a hand-written
config of another backend, which Triton may still have to fill in, a remote repository) keeps
Triton's default. Pure: reads the folder, starts nothing.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

# How the config of every model `tritonhf gallery add` writes begins (gallery/config.py builds it from this).
# A native ONNX part's config (NAME__onnx) begins otherwise and keeps Triton's auto-complete.
GALLERY_HEADER = "# Written by `tritonhf gallery add`"


def needs_auto_complete(repository: str | Path) -> bool:
    """True unless ``repository`` is a local folder whose every model's config is complete as written."""
    folder = Path(repository)
    if "://" in str(repository) or not folder.is_dir():
        return True  # s3://, gs:// ...: not read here
    models = [entry for entry in folder.iterdir() if entry.is_dir() and not entry.name.startswith(".")]
    return any(not _complete(model) for model in models)


def _complete(model: Path) -> bool:
    config_file = model / "config.pbtxt"
    if not config_file.is_file():
        return False
    text = config_file.read_text(errors="replace")
    if text.startswith(GALLERY_HEADER):
        return True
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError:
        return False  # Triton reports it, in its own words
    if config.backend != "python" or not config.input or not config.output:
        return False
    return not any("def auto_complete_config" in source.read_text(errors="replace") for source in model.glob("*/*.py"))
