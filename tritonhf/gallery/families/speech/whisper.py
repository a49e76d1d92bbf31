"""What the speech engines share at ``gallery add``: is a model a Whisper, and what its generation config asks that a
window-by-window reader leaves out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tritonhf.runtime.audio import long_form_settings


def is_whisper(folder: Path) -> bool:
    """Is the model in ``folder`` a Whisper (the one speech model CTranslate2 and OpenVINO GenAI run here)?"""
    try:
        return str(json.loads((folder / "config.json").read_text()).get("model_type")) == "whisper"
    except (OSError, ValueError):
        return False


def leaves_out(folder: Path, reader: str) -> str | None:
    """What ``reader`` (an engine reading a long file window after window alone) would leave out of the model's
    generation config (``runtime.audio.long_form_settings``); None when nothing. Such a model is served by PyTorch,
    whose ``generate`` does what the settings ask."""
    from transformers import GenerationConfig

    try:
        generation: Any = GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError):
        return None  # no generation config: transformers' defaults, which the reader follows
    asked = long_form_settings(generation)
    if not asked:
        return None
    return (
        f"its generation config sets {' and '.join(asked)}, which {reader}'s long-form reader here does not do "
        "(transformers' generate does: --backend pytorch)"
    )
