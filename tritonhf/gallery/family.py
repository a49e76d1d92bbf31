"""The contract of a family of tasks: how ``gallery add`` serves the models of those tasks.

``add.py`` is one pass, the same for every task; at each step it asks the task's family (``gallery.families``, the
registry) and does the rest itself:

1. ``check``: the family's options, refused before anything is read or written (``refuse_foreign``: its options given
   to a task of another family, refused by the family that owns them);
2. ``reserve``: the names of the extra models it writes beside NAME (the ``NAME__onnx`` part), reserved before a
   source that may download is resolved;
3. ``resolve``: the source as a local folder (by default ``sources.resolve``);
4. ``vendor``: the weights copied into the staged version folder (by default ``sources.vendor``), with ``--vendor``;
5. ``parameters`` and ``output_dims``: what the template reads from the model;
6. ``choose``: the engine that serves it and why (``request.Choice``), after the model's own library has answered
   the reference check's inputs and before the pass writes the config (an export may drop the source weights);
7. ``notes``: the config's comment lines about how the family serves it.

A family is a folder under ``gallery/families/`` holding its option rules, its exports, its engines' add-time side
and its measurement, a class that derives from ``Family``, and one line in the registry. A family imports only the
shared modules of the gallery (this one, ``request``, ``sources``, ``config``, ``reference`` ...), never another
family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tritonhf._progress import Progress
from tritonhf.gallery import sources
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.tasks import VENDORED_WEIGHTS_DIR, Task

VERSION = "1"


@dataclass(frozen=True)
class Staging:
    """Where ``gallery add`` builds a model before it renames it into place: ``root/NAME/VERSION`` (the template and
    ``weights/``), and ``root/PART`` for the extra model the family reserved (None: none)."""

    root: Path
    name: str
    part: str | None = None

    @property
    def version_dir(self) -> Path:
        return self.root / self.name / VERSION

    @property
    def weights(self) -> Path:
        return self.version_dir / VENDORED_WEIGHTS_DIR


class Family:
    """One family: its tasks, and what ``gallery add`` asks it at each step (the defaults are what most families
    do). One instance serves one ``gallery add``, so a step may keep what it found for a later one."""

    tasks: ClassVar[tuple[str, ...]] = ()
    # --backend names engines of the family's own registry, and its check refuses any other name with their list
    # (another family does not refuse its own backends for this family's tasks).
    lists_backends: ClassVar[bool] = False

    def __init__(self, request: AddRequest, task: Task) -> None:
        self.request = request
        self.task = task

    @classmethod
    def takes_backend(cls, name: str) -> bool:
        """Does ``--backend name`` name an engine of this family (auto: every family takes it)?"""
        return name == "auto"

    @classmethod
    def refuse_foreign(cls, request: AddRequest, task: Task, own: type[Family]) -> None:
        """This family's own options given for ``task``, a task of the family ``own``, which does not take them: a
        GalleryError naming them."""

    @classmethod
    def backend_help(cls) -> str:
        """What ``--backend`` takes for this family's tasks, for the option's help ("": it takes none)."""
        return ""

    @classmethod
    def engine_help(cls) -> str:
        """What ``--engine`` takes for this family's tasks, for the option's help ("": it takes none)."""
        return ""

    def check(self) -> None:
        """The family's options that cannot go together, refused before anything is read or written."""

    def reserve(self, name: str, repository: Path) -> str | None:
        """The name of an extra model written beside ``name`` (checked free by the pass); None: none."""
        return None

    def resolve(self, progress: Progress) -> sources.ResolvedSource:
        """The source as a local folder."""
        return sources.resolve(self.request.source, self.request.revision, progress)

    def vendor(self, resolved: sources.ResolvedSource, staging: Staging, progress: Progress) -> sources.ResolvedSource:
        """The weights copied into ``staging.weights``; the source as served."""
        sources.vendor(resolved.folder, staging.weights, self.request.allow_pickle)
        return resolved

    def parameters(self, folder: Path) -> dict[str, str]:
        """The template's parameters read from the model in ``folder``."""
        return {}

    def output_dims(self, folder: Path) -> dict[str, tuple[int, ...]]:
        """Output dims known only from the model (the embedding size)."""
        return {}

    def choose(
        self, resolved: sources.ResolvedSource, staging: Staging, params: dict[str, str], progress: Progress
    ) -> Choice:
        """The engine that serves the staged model, and why."""
        raise NotImplementedError

    def notes(self, params: Mapping[str, str]) -> list[str]:
        """The config's comment lines about how the family serves the model."""
        return []
