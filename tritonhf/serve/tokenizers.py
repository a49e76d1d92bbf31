"""The served models' tokenizers, in the gateway: TEI's /tokenize and the --max-batch-tokens count.

TEI's router tokenizes before it queues; this gateway has the same need but not the weights in
its own process. It reads the tokenizer the model itself loads: from the repository folder the
server serves (``NAME/config.pbtxt`` says where the weights are: the vendored folder, a local
path, or a hub id for ``--no-vendor``), with transformers, once per model, off the event loop.
Where there is no repository on this machine (a gateway in its own pod, an S3 repository) there
is no tokenizer: /tokenize answers 501 and the token limit is not counted (``/info`` says so).

Counting is skipped when it cannot matter: no tokenizer makes more tokens than a text has UTF-8
bytes plus its special tokens, so a request under the limit by that bound is never tokenized.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from tritonhf._files import config_parameters
from tritonhf.tasks import PARAM_TRUST_REMOTE_CODE, PARAM_WEIGHTS, VENDORED_WEIGHTS_DIR

# A text or pair gets at most this many special tokens ([CLS] a [SEP] b [SEP]; <s> a </s></s> b </s>).
SPECIAL_TOKENS_BOUND = 4


class Tokenizer(Protocol):
    """The part of a transformers tokenizer the gateway uses."""

    model_max_length: int

    def __call__(self, text: str | list[str], *args: object, **kwargs: object) -> Mapping[str, Any]: ...

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]: ...


@dataclass(frozen=True)
class Token:
    """One token as TEI's /tokenize answers it (offsets are characters of the input)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


def byte_bound(texts: Sequence[str]) -> int:
    """More tokens than any tokenizer makes of ``texts``: UTF-8 bytes plus special tokens per text."""
    return sum(len(text.encode("utf-8", "surrogatepass")) + SPECIAL_TOKENS_BOUND for text in texts)


class Tokenizers:
    """Tokenizers by model name, loaded on first use from ``repository`` (None: none are available)."""

    def __init__(self, repository: Path | None) -> None:
        self.repository = repository
        self._loaded: dict[str, Tokenizer | None] = {}
        self._lock = asyncio.Lock()

    async def get(self, model: str) -> Tokenizer | None:
        """The model's tokenizer, or None where it cannot be read here."""
        if model not in self._loaded:
            async with self._lock:
                if model not in self._loaded:
                    self._loaded[model] = await asyncio.to_thread(self._load, model)
        return self._loaded[model]

    def _load(self, model: str) -> Tokenizer | None:
        if self.repository is None or "/" in model or model.startswith(".") or not (self.repository / model).is_dir():
            return None
        parameters = self._parameters(model)  # read once: where the weights are, and whether to trust their code
        location = self.location(model, parameters)
        if location is None:
            return None
        try:
            from transformers import AutoTokenizer

            trust = parameters.get(PARAM_TRUST_REMOTE_CODE, "false") == "true"
            tokenizer = cast(Tokenizer, AutoTokenizer.from_pretrained(location, trust_remote_code=trust))
        except Exception:  # a GGUF-only folder, an unreachable hub id: no tokenizer, said by the caller
            return None
        return tokenizer

    def _parameters(self, model: str) -> dict[str, str]:
        assert self.repository is not None
        return config_parameters(self.repository / model / "config.pbtxt")

    def location(self, model: str, parameters: dict[str, str]) -> str | None:
        """Where the model's tokenizer is: as the template finds its weights (runtime.weights_location)."""
        assert self.repository is not None
        versions = sorted((int(p.name) for p in (self.repository / model).iterdir() if p.name.isdigit()), reverse=True)
        weights = parameters.get(PARAM_WEIGHTS, VENDORED_WEIGHTS_DIR)
        for version in versions:
            folder = self.repository / model / str(version) / weights
            if folder.exists():
                return str(folder)
        return weights if weights != VENDORED_WEIGHTS_DIR else None


async def count(tokenizer: Tokenizer, texts: Sequence[str], pairs: Sequence[str] | None = None) -> int:
    """Tokens of ``texts`` (with their ``pairs``) as the model reads them, special tokens included."""

    def tokens() -> int:
        encoded = tokenizer(list(texts), list(pairs)) if pairs is not None else tokenizer(list(texts))
        return sum(len(ids) for ids in encoded["input_ids"])

    return await asyncio.to_thread(tokens) if len(texts) > 32 else tokens()


def tokens_of(tokenizer: Tokenizer, text: str, add_special_tokens: bool = True) -> list[Token]:
    """TEI's /tokenize answer for one text: each token's id, its text in the input, and offsets."""
    encoded = tokenizer(
        text, add_special_tokens=add_special_tokens, return_offsets_mapping=True, return_special_tokens_mask=True
    )
    ids = [int(i) for i in encoded["input_ids"]]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    found = []
    for token, piece, special, offsets in zip(
        ids, pieces, encoded["special_tokens_mask"], encoded["offset_mapping"], strict=True
    ):
        start, stop = (int(offsets[0]), int(offsets[1])) if not special else (None, None)
        found.append(Token(token, text[start:stop] if start is not None else piece, bool(special), start, stop))
    return found
