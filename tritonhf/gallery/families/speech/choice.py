"""Which engine serves a speech model (``gallery add`` of automatic-speech-recognition), read from the registry
(``engines.SPEECH``).

``--backend NAME`` serves with the engine of that name: its weights written and checked by the registry's function,
or the model's folder as vendored, and its module copied beside model.py when it is not one of the template's own.
``--backend auto`` makes every registered engine that can be timed ready (``SpeechEngine.prepare``) and, when more
than one is, measures them (``measure``) and keeps the fastest for concurrent callers; the one ready engine
otherwise (PyTorch for a CTC model), saying why the others are not. With ``--quantize int8`` the chosen engine's
int8 is kept only behind its gate.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.gallery.families.speech import engines, measure
from tritonhf.gallery.families.speech.engines import SpeechEngine
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.tasks import PARAM_CALIBRATION


def choose(request: AddRequest, vendored: Path, source: Path, progress: Progress) -> Choice:
    """A speech model's engine: the one ``--backend`` names, or under auto the fastest measured here of the engines
    that can serve it; with --quantize int8, the chosen engine's int8 behind its gate."""
    folder = vendored if vendored.is_dir() else source
    if request.backend == "auto":
        return _measured(request, folder, vendored, progress)
    engine = engines.speech_engine(request.backend)
    _copy_module(engine, vendored)
    if engine.weights is not None:
        return engine.weights(request, folder, vendored, progress)
    return Choice(engine.name, f"--backend {engine.name}", {}, label=engine.label)


def _measured(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """--backend auto: every engine of the registry made ready where it can serve the model (converted, exported,
    gated), the ready ones measured on this machine and the fastest for concurrent callers kept."""
    ready: dict[str, measure.Ready] = {}
    why_not: dict[str, str] = {}
    for engine in engines.SPEECH:
        if engine.prepare is None:
            continue
        found = engine.prepare(request, folder, vendored, progress)
        if isinstance(found, str):
            why_not[engine.label] = found
        else:
            ready[engine.name] = found
    params = {key: value for found in ready.values() for key, value in found.params.items()}
    if len(ready) == 1:  # nothing to measure against: the one engine that can serve it, and why the others cannot
        return _kept(next(iter(ready)), ready, "; ".join(why_not.values()), params, vendored)
    labels = {name: engines.speech_engine(name).label for name in ready}
    named = list(labels.values())
    progress.step(f"Measuring {', '.join(named[:-1])} and {named[-1]} on 30 s windows (--backend auto)")
    window = measure.window(folder, bool(request.quantize), request.options.instances)
    measured = measure.measure({name: found.timer for name, found in ready.items()}, labels, window, why_not)
    progress.step(measured.summary)
    params[PARAM_CALIBRATION] = measured.summary
    return _kept(measured.backend, ready, measured.summary, params, vendored)


def _kept(name: str, ready: dict[str, measure.Ready], reason: str, params: dict[str, str], vendored: Path) -> Choice:
    """The engine ``name`` serves: what the others made to be timed goes, its module goes beside model.py."""
    for engine in engines.SPEECH:
        if engine.name != name and engine.folder is not None:
            shutil.rmtree(vendored / engine.folder, ignore_errors=True)
    _copy_module(engines.speech_engine(name), vendored)
    return ready[name].serve(reason, params)


def _copy_module(engine: SpeechEngine, vendored: Path) -> None:
    """The engine's module beside model.py when it is not one of the template's own."""
    if engine.module is not None:
        shutil.copy2(engine.module, vendored.parent / f"{engine.name}_engine.py")
