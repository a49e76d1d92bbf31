"""Speech recognition (Whisper, and CTC models such as wav2vec2): an engine of its registry (``engines``: PyTorch,
CTranslate2, OpenVINO GenAI, one module each), named by ``--backend`` or, under auto, the fastest measured here
(``choice``, ``measure``); int8 behind each engine's gate (``int8``).
"""

from __future__ import annotations

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery import sources
from tritonhf.gallery.families.speech import choice, engines
from tritonhf.gallery.family import Family, Staging
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.tasks import Task


class Speech(Family):
    tasks = ("automatic-speech-recognition",)
    lists_backends = True

    @classmethod
    def takes_backend(cls, name: str) -> bool:
        return name == "auto" or any(engine.name == name for engine in engines.SPEECH)

    @classmethod
    def refuse_foreign(cls, request: AddRequest, task: Task, own: type[Family]) -> None:
        """A speech engine named for another task."""
        if cls.takes_backend(request.backend) and not own.takes_backend(request.backend):
            raise GalleryError(f"--backend {request.backend} is for automatic-speech-recognition, not {task.name}.")

    @classmethod
    def backend_help(cls) -> str:
        listed = "; ".join(f"{found.name}: {found.summary}" for found in engines.SPEECH)
        return (
            "automatic-speech-recognition: auto (for a Whisper, the fastest measured here of PyTorch, CTranslate2 and "
            f"OpenVINO GenAI), or {listed}."
        )

    def check(self) -> None:
        """An engine outside the registry; one that writes its weights into the repository without them vendored."""
        if self.request.backend == "auto":
            return
        engine = engines.speech_engine(self.request.backend)
        if engine.writes and not self.request.vendor:
            raise GalleryError(
                f"--backend {engine.name} writes the converted model into the repository: no --no-vendor."
            )

    def choose(
        self, resolved: sources.ResolvedSource, staging: Staging, params: dict[str, str], progress: Progress
    ) -> Choice:
        return choice.choose(self.request, staging.weights, resolved.folder, progress)
