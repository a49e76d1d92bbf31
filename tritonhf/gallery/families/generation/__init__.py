"""Text generation: an engine of its registry (``engines``: OpenVINO GenAI's continuous batching over a GGUF or IR
export, else transformers), chosen by ``--engine`` or, under auto, the first that can serve the model here and whose
weights pass their check against transformers (``choice``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery import sources
from tritonhf.gallery.families.generation import choice, engines
from tritonhf.gallery.families.generation.engines import EnginePlan
from tritonhf.gallery.family import Family, Staging
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.runtime.reasoning import thinks
from tritonhf.tasks import PARAM_ENGINE, PARAM_REASONING, Task

BACKENDS = ("auto", "pytorch")  # --backend pytorch: the transformers engine, said so


class Generation(Family):
    tasks = ("text-generation",)

    @classmethod
    def takes_backend(cls, name: str) -> bool:
        return name in BACKENDS

    def __init__(self, request: AddRequest, task: Task) -> None:
        super().__init__(request, task)
        self.plan: EnginePlan | None = None
        self.chosen: Choice | None = None

    @classmethod
    def refuse_foreign(cls, request: AddRequest, task: Task, own: type[Family]) -> None:
        if request.engine != "auto":
            raise GalleryError(f"--engine chooses text-generation's engine; {task.name} takes --backend.")

    @classmethod
    def engine_help(cls) -> str:
        return engines.engine_help()

    def check(self) -> None:
        if self.request.quantize:
            raise GalleryError(
                "--quantize int8 is for encoders and speech; text-generation's weights take --weight-format."
            )
        if self.request.backend not in BACKENDS:
            raise GalleryError(
                f"--backend must be one of {', '.join(BACKENDS)} for text-generation (its engines: --engine), "
                f"not {self.request.backend!r}."
            )
        choice.plan(self.request)

    def resolve(self, progress: Progress) -> sources.ResolvedSource:
        self.plan, resolved = choice.resolve(self.request, progress)
        return resolved

    def vendor(self, resolved: sources.ResolvedSource, staging: Staging, progress: Progress) -> sources.ResolvedSource:
        assert self.plan is not None, "resolve comes first"
        self.chosen, resolved = choice.vendor(self.request, self.plan, resolved, staging.version_dir, progress)
        return resolved

    def parameters(self, folder: Path) -> dict[str, str]:
        if thinks(sources.chat_template(folder)):
            return {PARAM_REASONING: "think"}  # its chat answers' thinking is split from them (runtime/reasoning.py)
        return {}

    def choose(
        self, resolved: sources.ResolvedSource, staging: Staging, params: dict[str, str], progress: Progress
    ) -> Choice:
        assert self.plan is not None, "resolve comes first"
        return self.chosen or choice.choice(self.request, self.plan, {})

    def notes(self, params: Mapping[str, str]) -> list[str]:
        notes = engines.engine(params.get(PARAM_ENGINE, "transformers")).notes(params)
        if params.get(PARAM_REASONING) == "think":
            notes.append(
                "Reasoning: the chat template writes a <think> block. A chat answer's thinking is sent apart "
                "(reasoning_output; the gateway's reasoning_content and reasoning items); json_schema and tools hold "
                'the answer after it; chat_template_kwargs {"enable_thinking": false} turns it off where the template '
                "takes it."
            )
        return notes
