"""A toy engine for the text-generation template (gallery add --engine counter), as docs/guide.md ("How to add an
engine") tells a newcomer to write one: the engine interface of templates/text_generation/model.py's docstring, in a
module named NAME_engine.py whose ENGINE the template makes. Every step gives each running sequence its next token,
counting up from its prompt's last one (``next_token``)."""

from typing import Any

from tritonhf_runtime import BadRequest  # the runtime copied beside model.py, as an engine module imports it


class CounterEngine:
    """Each running sequence's next token: its prompt's last one, counted up."""

    def __init__(self, template: Any, args: dict[str, str], params: dict[str, str]) -> None:
        self.running: list[Any] = []
        self.context, self.eos_ids, self.vocab_size = 64, set(), len(template.tokenizer)
        self.advance = template.advance

    def prepare(self, sequence: Any) -> None:
        if sequence.constraint is not None:
            raise BadRequest("input 'json_schema' is not taken by the counter engine.")

    def take(self, waiting: Any) -> list[Any]:
        admitted = list(waiting)
        waiting.clear()
        return admitted

    def step(self, admitted: list[Any]) -> tuple[int, int]:
        self.running += admitted
        for sequence in self.running:
            self.advance(sequence, self.next_token(sequence.prompt_ids, len(sequence.tokens)))
        computed = len(self.running)
        self.remove_finished()
        return sum(len(s.prompt_ids) for s in admitted), computed

    def next_token(self, prompt: list[int], made: int) -> int:
        return (prompt[-1] + made + 1) % self.vocab_size

    def remove_finished(self) -> None:
        self.running = [s for s in self.running if not s.done]

    def clear(self) -> None:
        self.running = []

    def close(self) -> None:
        pass


ENGINE = CounterEngine
