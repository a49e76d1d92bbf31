"""The families of the gallery, one folder each, and which task belongs to which: the registry ``gallery add`` reads.

A family is added as a folder (its ``Family`` subclass and the modules it needs) and one line in ``FAMILIES``, with
its template under ``gallery/templates/``. Every task of ``tritonhf.tasks`` belongs to exactly one family.
"""

from __future__ import annotations

from tritonhf.errors import GalleryError
from tritonhf.gallery import request as requests
from tritonhf.gallery.families.encoders import Encoders
from tritonhf.gallery.families.generation import Generation
from tritonhf.gallery.families.image_chat import ImageChat
from tritonhf.gallery.families.speech import Speech
from tritonhf.gallery.families.towers import Towers
from tritonhf.gallery.family import Family
from tritonhf.gallery.request import AddRequest
from tritonhf.tasks import Task

FAMILIES: tuple[type[Family], ...] = (Encoders, Towers, Generation, ImageChat, Speech)


def family_of(task: Task) -> type[Family]:
    """The family that serves ``task``."""
    for family in FAMILIES:
        if task.name in family.tasks:
            return family
    raise GalleryError(f"No family of the gallery serves {task.name}.")


def start(request: AddRequest, task: Task) -> Family:
    """The family of ``task``, asked to serve ``request``, once the options are checked: each other family refuses
    its own options given for this task, then the task's family checks its own."""
    requests.check(request)
    own = family_of(task)
    for other in FAMILIES:
        if other is not own:
            other.refuse_foreign(request, task, own)
    family = own(request, task)
    family.check()
    return family


def backend_help() -> str:
    """--backend's help: what each family takes."""
    return " ".join(help for family in FAMILIES if (help := family.backend_help()))


def engine_help() -> str:
    """--engine's help: what each family takes."""
    return " ".join(help for family in FAMILIES if (help := family.engine_help()))
