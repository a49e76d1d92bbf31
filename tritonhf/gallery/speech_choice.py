"""Which engine serves a speech model (``gallery add`` of automatic-speech-recognition), read from the registry
(``gallery.engines.SPEECH``).

``--backend NAME`` serves with the engine of that name: its weights written and checked by the registry's function
(``gallery.speech_weights``), or the model's folder as vendored, and its module copied beside model.py when it is not
one of the template's own. ``--backend auto`` measures (``speech_engines.measure``): a Whisper runs on CTranslate2 or
OpenVINO GenAI where it measures fastest, else PyTorch; a CTC model on PyTorch. With ``--quantize int8`` the chosen
engine's int8 is kept only behind its gate.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery import engines, speech_engines, speech_weights
from tritonhf.gallery.request import ENCODER_BACKENDS, AddRequest, Choice
from tritonhf.runtime.audio import CT2_FOLDER, OPENVINO_ENCODER, OPENVINO_WHISPER
from tritonhf.tasks import PARAM_CALIBRATION, Task


def check(request: AddRequest, task: Task) -> None:
    """The speech engines' options, refused before anything is read or written: an engine outside the registry,
    one that writes its weights into the repository without them vendored there; a speech engine for another
    task."""
    speech_only = [engine.name for engine in engines.SPEECH if engine.name not in ENCODER_BACKENDS]
    if not task.takes_audio:
        if request.backend in speech_only:
            raise GalleryError(f"--backend {request.backend} is for automatic-speech-recognition, not {task.name}.")
        return
    if request.backend == "auto":
        return
    engine = engines.speech_engine(request.backend)
    if engine.writes and not request.vendor:
        raise GalleryError(f"--backend {engine.name} writes the converted model into the repository: no --no-vendor.")


def choose(request: AddRequest, vendored: Path, source: Path, progress: Progress) -> Choice:
    """A speech model's engine: the one ``--backend`` names, or under auto, for a Whisper, CTranslate2 or OpenVINO
    GenAI where it measures fastest (``gallery.speech_engines``), else PyTorch; with --quantize int8, the chosen
    engine's int8 behind its gate."""
    folder = vendored if vendored.is_dir() else source
    if request.backend == "auto":
        return _measured(request, folder, vendored, progress)
    engine = engines.speech_engine(request.backend)
    if engine.module is not None:
        shutil.copy2(engine.module, vendored.parent / f"{engine.name}_engine.py")
    if engine.weights is not None:
        return engine.weights(request, folder, vendored, progress)
    return Choice(engine.name, f"--backend {engine.name}", {}, label=engine.label)


def _measured(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """--backend auto: a Whisper converted for CTranslate2 and exported for OpenVINO GenAI where they can serve it,
    the engines measured on this machine and the fastest for concurrent callers kept; else PyTorch, saying why."""
    converted = vendored / CT2_FOLDER
    why_not = speech_weights.convert_for_ct2(request, folder, converted, progress)
    if why_not is not None:
        return speech_weights.served_by_pytorch(request, folder, vendored, why_not, {}, progress)
    exported, gate = speech_weights.openvino_for_auto(request, folder, vendored / OPENVINO_WHISPER, progress)
    encoder_kept: bool | None = None  # CTranslate2's encoder on OpenVINO (--quantize int8): not yet measured
    params: dict[str, str] = {}
    if request.quantize:  # CTranslate2 is timed as it would serve: with its encoder on OpenVINO where kept
        encoder_kept = speech_weights.ct2_encoder(request, folder, converted, params, progress)
    measuring = "PyTorch, CTranslate2 and OpenVINO GenAI" if isinstance(exported, Path) else "PyTorch and CTranslate2"
    progress.step(f"Measuring {measuring} on 30 s windows (--backend auto)")
    encoder = converted / OPENVINO_ENCODER if encoder_kept else None
    measured = speech_engines.measure(folder, converted, bool(request.quantize), request.options.instances,
                                      exported, encoder)  # fmt: skip
    progress.step(measured.summary)
    params[PARAM_CALIBRATION] = measured.summary
    if measured.backend == "openvino":
        return speech_weights.served_by_openvino(request, vendored, params, measured.summary, gate)
    if measured.backend == "pytorch":
        return speech_weights.served_by_pytorch(request, folder, vendored, measured.summary, params, progress)
    return speech_weights.served_by_ct2(request, folder, vendored, measured.summary, params, encoder_kept, progress)
