"""Speech recognition's engines: one registry (``SPEECH``: ``--backend``, config parameter ``tritonhf.backend``), read
by ``gallery add`` (the option's choices and help, the choice in ``choice``, what ``--backend auto`` times) and by the
template, which loads the module ``NAME_engine.py`` beside its model.py and makes its ``ENGINE`` (the interface is in
``templates/automatic_speech_recognition/model.py``'s docstring).

An engine is one module and one line here: how it serves when ``--backend`` names it (``weights``: written and
checked beside the vendored model, or None for the model's folder as it is), and how ``--backend auto`` makes it
ready to be timed against the others (``prepare``: None, never timed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery.families.speech import ctranslate2, openvino, pytorch
from tritonhf.gallery.families.speech.measure import Ready
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.runtime.audio import CT2_FOLDER, OPENVINO_WHISPER

# (request, the model's folder, the version's vendored weights, progress) -> what serves and why, with the parameters
# it writes; it writes its own weights beside the vendored ones and checks them, a GalleryError when it cannot
SpeechWeights = Callable[[AddRequest, Path, Path, Progress], Choice]
# the same arguments -> the engine made ready to be timed (converted, exported, gated), or why it cannot serve
Prepare = Callable[[AddRequest, Path, Path, Progress], Ready | str]


@dataclass(frozen=True)
class SpeechEngine:
    """One engine of the automatic-speech-recognition template."""

    name: str  # --backend NAME and the config's tritonhf.backend; the template loads NAME_engine.py
    label: str  # how gallery add and the config name it
    summary: str  # its line in --backend's help
    module: Path | None = None  # NAME_engine.py when it is not one of the template's own: copied beside model.py
    writes: bool = False  # writes its converted weights into the repository (no --no-vendor)
    folder: str | None = None  # where, under the version's weights (what --backend auto drops when another is kept)
    weights: SpeechWeights | None = None  # writes and checks its own weights (None: the model's folder, vendored)
    prepare: Prepare | None = None  # --backend auto: ready to be timed, or why not (None: never timed)


def _converting(name: str, label: str, summary: str, module: Any, folder: str) -> SpeechEngine:
    """An engine that writes the model converted into ``folder`` of the repository, its module's ``weights`` and
    ``prepare`` saying how."""
    return SpeechEngine(name, label, summary, writes=True, folder=folder, weights=module.weights,
                        prepare=module.prepare)  # fmt: skip


SPEECH: tuple[SpeechEngine, ...] = (
    SpeechEngine(
        "pytorch",
        "PyTorch",
        "transformers' own model (Whisper, or a CTC model such as wav2vec2); int8 Linear layers with --quantize int8",
        weights=pytorch.weights,
        prepare=pytorch.prepare,
    ),
    _converting(
        "ctranslate2",
        "CTranslate2",
        "a Whisper converted at add (faster-whisper's engine); int8 kernels with --quantize int8",
        ctranslate2,
        CT2_FOLDER,
    ),
    _converting(
        "openvino",
        "OpenVINO GenAI",
        "a Whisper exported at add for OpenVINO GenAI's WhisperPipeline; int8 weights with --quantize int8",
        openvino,
        OPENVINO_WHISPER,
    ),
)


def speech_engine(name: str) -> SpeechEngine:
    """The registered speech engine called ``name``; a GalleryError listing them otherwise."""
    for found in SPEECH:
        if found.name == name:
            return found
    labels = ", ".join(found.label for found in SPEECH)
    names = ", ".join(found.name for found in SPEECH)
    raise GalleryError(
        f"automatic-speech-recognition is served with {labels}: --backend auto or one of {names}, not {name!r}."
    )
