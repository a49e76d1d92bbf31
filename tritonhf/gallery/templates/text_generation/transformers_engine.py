"""The text-generation template's PyTorch engine: any causal LM from transformers, CPU or GPU.

The template's loop drives it as it drives ``OpenVinoEngine`` (the engine interface is in model.py's docstring):
``take`` admits waiting sequences while there is room (``max_running``, at most ``max_prefill_tokens`` prompt
tokens per step), ``step`` prefills them (left-padded into one batch, then joined to the running batch: key/value
caches left-padded and stacked) and runs one decode step for every running sequence, one forward pass for the
whole batch. Each token goes to the template's ``advance``; ``remove_finished`` drops finished rows from the
batch and its cache, so a finished or cancelled sequence costs nothing from the next step on.

Sampling is this engine's (``pick``, ``runtime.pick_token``): greedy at temperature 0, else top-p with the
request's own generator, so a seed gives the same text whatever runs beside it; a grammar's mask
(``runtime.Grammars``) and log-probabilities are applied to that sequence's row only. What it keeps per sequence
(its grammar's state, the token the next step feeds, its position) is its own (``Row``), not the sequence's.

Why not transformers' ``ContinuousBatchingManager``: it samples with one random generator for the whole batch,
so a request with a ``seed`` would get an answer that depends on its neighbours; it has no stop strings and no
hook for Triton's request cancellation. Plain ``DynamicCache`` tensors are merged here (any causal LM whose cache
layers are dynamic; others run one sequence at a time).
"""

import inspect
from typing import Any

import torch
import tritonhf_runtime as runtime
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicLayer


class Row:
    """What this engine keeps of one running sequence: its grammar's state (None: free), the token its next decode
    step feeds, and that token's position id."""

    def __init__(self, grammar, position):
        self.grammar, self.next_token, self.position = grammar, None, position


class TransformersEngine:
    """A PyTorch causal LM, batched step by step by this module's own scheduler."""

    holds_grammar_back = True  # a grammar masks each token itself: it can wait for a reasoning model's thinking

    def __init__(self, template, args, params):
        """The model of Triton's ``args`` and the config's ``params``; the template's tokenizer, its bounds
        (``max_running``, ``max_prefill_tokens``), its ``advance``, which every token goes to, and (read when a
        sequence joins) its ``grammars`` and a reasoning model's ``think_ids``."""
        tokenizer = template.tokenizer
        self.device = runtime.device(args, params)
        self.model = runtime.load_model(AutoModelForCausalLM, args, params, self.device)
        # transformers 5 renamed the key/value cache argument from past_key_values to cache.
        self.cache_argument = (
            "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        )
        self.context = runtime.max_length(tokenizer, self.model.config, default=2048)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self.vocab_size = getattr(self.model.config, "vocab_size", None) or len(tokenizer)  # the logits' width
        self.pad_id, self.max_running = template.pad_id, template.max_running
        self.max_prefill_tokens, self.advance = template.max_prefill_tokens, template.advance
        self.template = template
        self.running = []
        self.rows: dict[Any, Row] = {}  # running sequence -> what this engine keeps of it
        self.cache: Any = None  # the running batch's key/value cache and its attention mask
        self.mask: Any = None

    def prepare(self, sequence):
        """Every option of the template is served here: nothing to refuse."""

    def row(self, sequence):
        """A joining sequence's row: a constrained one gets its own grammar state (its row's mask)."""
        constraint = sequence.constraint
        grammar = self.template.grammars.mask(constraint.grammar) if constraint and constraint.grammar else None
        return Row(grammar, len(sequence.prompt_ids))

    def take(self, waiting):
        """The sequences admitted this step (``waiting``, a deque, is the template's; its lock is held)."""
        room = self.max_running - len(self.running) if self.mergeable() else (0 if self.running else 1)
        admitted: list[Any] = []
        tokens = 0
        while waiting and len(admitted) < room:
            size = len(waiting[0].prompt_ids)
            if admitted and tokens + size > self.max_prefill_tokens:
                break
            admitted.append(waiting.popleft())
            tokens += size
        return admitted

    def step(self, admitted):
        """Prefill the admitted, then one decode step for all; (prompt tokens computed, sequences computed)."""
        prompt, steps = 0, 0
        if admitted:
            prompt, steps = self.prefill(admitted)
        if self.running:
            steps += self.decode()
        return prompt, steps

    def mergeable(self):
        """Can two caches be stacked? Only plain dynamic layers (not sliding windows) can."""
        return self.cache is None or all(type(layer) is DynamicLayer for layer in self.cache.layers)

    def forward(self, input_ids, mask, positions, cache):
        with torch.inference_mode():
            output = self.model(
                input_ids=input_ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=positions.to(self.device),
                use_cache=True,
                **({self.cache_argument: cache} if cache is not None else {}),
            )
        return output.logits[:, -1, :].float(), getattr(output, self.cache_argument)

    def prefill(self, admitted):
        """The admitted prompts, left-padded into one batch; each gets its first token; then they join."""
        width = max(len(s.prompt_ids) for s in admitted)
        input_ids = torch.tensor([[self.pad_id] * (width - len(s.prompt_ids)) + s.prompt_ids for s in admitted])
        mask = torch.tensor([[0] * (width - len(s.prompt_ids)) + [1] * len(s.prompt_ids) for s in admitted])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self.forward(input_ids, mask, positions, None)
        self.join(admitted, cache, mask)
        for index, sequence in enumerate(admitted):
            self.rows[sequence] = row = self.row(sequence)
            self.next(sequence, row, logits[index])
        self.remove_finished()
        return int(mask.sum()), len(admitted)

    def join(self, admitted, cache, mask):
        """Stack the new sequences' caches under the running ones, left-padding the shorter side."""
        if self.cache is None:
            self.running, self.cache, self.mask = list(admitted), cache, mask
            return
        assert self.mask is not None  # a cache comes with its mask
        width = max(self.mask.shape[1], mask.shape[1])
        for old, new in zip(self.cache.layers, cache.layers):
            old.keys = torch.cat([left_pad(old.keys, width), left_pad(new.keys, width)])
            old.values = torch.cat([left_pad(old.values, width), left_pad(new.values, width)])
        self.mask = torch.cat([left_pad(self.mask, width), left_pad(mask, width)])
        self.running.extend(admitted)

    def decode(self):
        """One token for every running sequence, from one forward pass over the batch; the sequences computed."""
        count = len(self.running)
        rows = [self.rows[s] for s in self.running]
        input_ids = torch.tensor([[row.next_token] for row in rows])
        mask = torch.cat([self.mask, torch.ones((count, 1), dtype=self.mask.dtype)], dim=1)
        positions = torch.tensor([[row.position] for row in rows])
        logits, self.cache = self.forward(input_ids, mask, positions, self.cache)
        self.mask = mask
        for index, (sequence, row) in enumerate(zip(self.running, rows)):
            row.position += 1
            self.next(sequence, row, logits[index])
        self.remove_finished()
        return count

    def next(self, sequence, row, logits):
        """The sequence's next token, to the template's ``advance`` (with its log-probability where asked), and
        fed by the next decode step."""
        token, logprob = self.pick(sequence, row.grammar, logits)
        self.advance(sequence, token, logprob)
        row.next_token = token

    def remove_finished(self):
        """Finished sequences (stop, length, cancelled, error) leave the batch and its cache."""
        keep = [row for row, sequence in enumerate(self.running) if not sequence.done]
        if len(keep) == len(self.running):
            return
        for sequence in self.running:
            if sequence.done:
                del self.rows[sequence]
        self.running = [self.running[row] for row in keep]
        if not keep:
            self.cache, self.mask = None, None
            return
        index = torch.tensor(keep)
        mask = self.mask[index]
        start = int((mask.sum(0) > 0).nonzero()[0])  # columns that are padding for every row go
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, start:]
            layer.values = layer.values[index, :, start:]
        self.mask = mask[:, start:]

    def clear(self):
        """After a failed step: nothing runs, no cache is kept."""
        self.running, self.rows, self.cache, self.mask = [], {}, None, None

    def close(self):
        """The model is unloaded: nothing of its own outlives the template's loop."""

    def pick(self, sequence, grammar, logits):
        """The next token (greedy at temperature 0, else sampled with the request's own generator) and, with
        ``logprobs`` asked, its log-probability and the best alternatives' under the model's distribution (after
        ``grammar``'s mask, before temperature and sampling); else None."""
        logits = self.penalised(sequence, logits)
        grammar = grammar if sequence.phase != "thinking" else None  # it holds the answer after any thinking
        if grammar is not None:  # a constrained answer: the tokens its grammar forbids now are out
            masked = grammar.apply(logits)
            if sequence.phase == "undecided":  # a reasoning model's first token may still open its thinking
                opening = self.template.think_ids[0]
                masked[opening] = logits[opening]
            logits = masked
        found, alternatives = None, []
        if sequence.logprobs is not None:
            found = torch.log_softmax(logits.float(), dim=-1)
            best = torch.topk(found, sequence.logprobs) if sequence.logprobs else None
            # a token a grammar forbids has no probability (-inf): it is no alternative
            pairs = zip(best.indices.tolist(), best.values.tolist()) if best is not None else ()
            alternatives = [(token, value) for token, value in pairs if value > float("-inf")]
        token = runtime.pick_token(sequence, logits)  # greedy, or top_k, min_p and top-p sampled
        if grammar is not None and not (sequence.phase == "undecided" and token == self.template.think_ids[0]):
            grammar.accept(token)
        return token, (float(found[token]), alternatives) if found is not None else None

    @staticmethod
    def penalised(sequence, logits):
        """The logits after the request's penalties (none by default): transformers' repetition penalty over the
        prompt's and the answer's tokens, then OpenAI's presence and frequency penalties over the answer's, then
        OpenAI's logit_bias."""
        repetition, presence, frequency = (
            sequence.repetition_penalty,
            sequence.presence_penalty,
            sequence.frequency_penalty,
        )
        if repetition == 1 and presence == 0 and frequency == 0 and not sequence.logit_bias:
            return logits
        logits = logits.clone()
        if repetition != 1:
            seen = torch.tensor(
                sorted({*sequence.prompt_ids, *sequence.tokens}), dtype=torch.long, device=logits.device
            )
            chosen = logits[seen]
            logits[seen] = torch.where(chosen > 0, chosen / repetition, chosen * repetition)
        if (presence or frequency) and sequence.tokens:
            made, counts = torch.unique(torch.tensor(sequence.tokens, device=logits.device), return_counts=True)
            logits[made] -= presence + frequency * counts.to(logits.dtype)
        if sequence.logit_bias:  # OpenAI's: added to the logits before sampling
            tokens = torch.tensor(list(sequence.logit_bias), dtype=torch.long, device=logits.device)
            logits[tokens] += torch.tensor(list(sequence.logit_bias.values()), dtype=logits.dtype, device=logits.device)
        return logits


def left_pad(tensor, width):
    """``tensor`` (batch first, sequence on the last axis for masks, third for caches) padded on the left."""
    axis = 1 if tensor.dim() == 2 else 2
    missing = width - tensor.shape[axis]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[axis] = missing
    return torch.cat([torch.zeros(shape, dtype=tensor.dtype, device=tensor.device), tensor], dim=axis)


ENGINE = TransformersEngine  # what the template makes (tritonhf.engine "transformers")
