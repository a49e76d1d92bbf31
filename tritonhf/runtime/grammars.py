"""Grammar-constrained generation (``response_format``, required tool calls) with xgrammar, the library OpenVINO
GenAI, vLLM and SGLang constrain with.

Every constrained request's schema is compiled here when it arrives, in ``execute``: a schema the compiler cannot
take is that request's 400, naming the construct, before it joins a batch. (OpenVINO GenAI compiles the grammar
again inside its step, where a failure would end every sequence of the step.) The compiler caches each distinct
schema's grammar, bounded in bytes (``cache_bytes``, Triton metric ``tritonhf_grammar_cache_bytes``), so a schema
an application sends with every request is compiled once.

Whitespace: JSON allows any between tokens, and a small model held to a schema that allows it often spends its
tokens there (SmolLM2-135M wrote tabs until max_tokens). Both engines hold answers to compact JSON (``", "`` and
``": "``, no newlines): the transformers engine through this compiler (``any_whitespace=False``), OpenVINO through
the same grammar as EBNF text (``openvino_grammar``), which its older copy of xgrammar parses once two spellings are
rewritten; where the EBNF holds a construct that copy lacks (``Regex``, for ``pattern``), OpenVINO gets the JSON
Schema itself and compiles it with its own whitespace rule.

The transformers engine applies the grammar itself: ``Mask`` sets every token the grammar forbids to -inf in that
sequence's logits row before the pick, and advances the grammar by the token picked. Each sequence has its own
matcher, so a constrained sequence changes nothing in its batch-mates' rows.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from .common import BadRequest

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*(Check failed: \([^)]*\) is false:\s*)?")
# EBNF spellings of this xgrammar that OpenVINO GenAI's older copy reads otherwise, and what it cannot read at all.
_REWRITES = (("{0, -1}", "*"), ("{1, -1}", "+"))
_UNREADABLE = re.compile(r"-1\}|\b(Regex|TagDispatch)\(")
_EBNF_KEPT = 256  # schemas whose EBNF text is kept (OpenVINO engine)


def _xgrammar() -> Any:
    try:
        import xgrammar  # type: ignore[import-not-found,unused-ignore]
    except ImportError as error:  # a repository served by a Python without it: plain requests still run
        raise BadRequest(
            "a constrained answer (response_format json_object/json_schema, or tools with tool_choice 'required') "
            "needs the xgrammar package in the server's Python: pip install xgrammar."
        ) from error
    return xgrammar


class Grammars:
    """The model's grammar compiler (made at the first constrained request) and its bounded cache."""

    def __init__(
        self, tokenizer: Any, vocab_size: int, stop_ids: list[int], cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        """``vocab_size``: the logits' width; ``stop_ids``: the model's end-of-text ids (a finished grammar allows
        only these)."""
        self.tokenizer, self.vocab_size, self.stop_ids, self.limit = tokenizer, vocab_size, stop_ids, cache_bytes
        self.compiler: Any = None
        self.info: Any = None
        self.ebnf: OrderedDict[str, str | None] = OrderedDict()

    def compile(self, schema: str, where: str) -> Any:
        """The compiled grammar of a JSON Schema (text); a BadRequest naming ``where`` and the construct refused."""
        xgr = _xgrammar()
        if self.compiler is None:
            self.info = xgr.TokenizerInfo.from_huggingface(
                self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_ids or None
            )
            self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_limit_bytes=self.limit)
        try:
            return self.compiler.compile_json_schema(schema, any_whitespace=False)
        except (RuntimeError, ValueError) as error:
            reason = _PREFIX.sub("", str(error).strip().splitlines()[0] if str(error).strip() else repr(error))
            raise BadRequest(
                f"input '{where}': the grammar compiler cannot take this JSON Schema ({reason}); simplify that part."
            ) from error

    def openvino_grammar(self, schema: str) -> tuple[str, str]:
        """(kind, text) for OpenVINO GenAI's ``StructuredOutputConfig``: ("grammar", compact EBNF), or
        ("json_schema", the schema) where the EBNF holds what OpenVINO's copy of xgrammar cannot read."""
        if schema not in self.ebnf:
            text = str(_xgrammar().Grammar.from_json_schema(schema, any_whitespace=False))
            for old, new in _REWRITES:
                text = text.replace(old, new)
            self.ebnf[schema] = None if _UNREADABLE.search(text) else text
            while len(self.ebnf) > _EBNF_KEPT:
                self.ebnf.popitem(last=False)
        self.ebnf.move_to_end(schema)
        found = self.ebnf[schema]
        return ("json_schema", schema) if found is None else ("grammar", found)

    def cache_bytes(self) -> int:
        return int(self.compiler.get_cache_size_bytes()) if self.compiler is not None else 0

    def mask(self, compiled: Any) -> Mask:
        return Mask(_xgrammar(), compiled, self.vocab_size)


class Mask:
    """One sequence's grammar state for the transformers engine: forbid, pick, accept."""

    def __init__(self, xgr: Any, compiled: Any, vocab_size: int) -> None:
        self.xgr = xgr
        self.matcher = xgr.GrammarMatcher(compiled)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def apply(self, logits: Any) -> Any:
        """``logits`` (one row, on the CPU) with the tokens the grammar forbids now at -inf."""
        logits = logits.float().cpu().clone()
        self.matcher.fill_next_token_bitmask(self.bitmask)
        self.xgr.apply_token_bitmask_inplace(logits.unsqueeze(0), self.bitmask)
        return logits

    def accept(self, token: int) -> None:
        self.matcher.accept_token(int(token))
