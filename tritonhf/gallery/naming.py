"""Model names: what a folder and a URL part may be, and the default one for a source."""

from __future__ import annotations

import re
from pathlib import Path

from tritonhf.errors import InvalidNameError

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def check_name(name: str) -> str:
    """A model name that is safe as a folder and a URL part; letters, digits, ``_ - .``."""
    if not NAME.match(name) or name in (".", ".."):
        raise InvalidNameError(
            f"Model name {name!r} is not allowed: use letters, digits, '_', '-' and '.', not starting "
            "with '.' or '-', at most 128 characters (for example 'sentiment' or 'minilm-embed')."
        )
    return name


def default_name(source: str) -> str:
    """A model name from a source: the last part of a hub id or path, made safe."""
    stem = Path(source.rstrip("/")).name.removesuffix(".gguf") or "model"
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.").lower()
    return cleaned[:128] or "model"
