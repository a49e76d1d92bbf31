"""The text-generation template's llama.cpp engine: llama.cpp's kernels and llama-server's own scheduler over the GGUF
file as it is (every architecture and quant type llama.cpp reads), through ``xllamacpp`` (llama.cpp built as one
Python extension module: no compiler, no separate server process).

Used when the model was added with ``--engine llamacpp`` (or ``auto`` chose it by measuring). The template keeps
everything a client sees: request checks, context limits, chat templates, the streamed reply (incremental
detokenising, stop strings, usage, the final flag), cancellation and the metrics. This engine only computes tokens:
each sequence is one completion in one of llama-server's slots (``handle_completions`` with the prompt's token ids and
its own sampling), run on a thread of its own, since the call blocks until the completion ends (it releases the GIL,
so the slots compute together in llama-server's batches). Each token it streams goes on the sequence's queue, and the
template's loop hands it to ``advance`` at its next ``step``; a sequence the template finished (a stop string, its
length, a client gone) stops its completion at the next token, and its slot is free again.

Batch invariance: on the batch-invariant settings (the default) ``gallery add`` writes ``max_running`` 1, so one
sequence runs at a time and each answer is llama-server's alone: llama.cpp's matrix kernels for a batch differ from
one token's for the Q8_0, Q4_0, Q5_0 and F16 tensors most files hold, and an answer computed beside others turned at
a near-tie on the real SmolLM2. Each slot keeps a key/value cache of its own (``kv_unified`` off unless the model was
added with batch_invariant=false), the prompt's cache is not reused across requests (``cache_prompt`` off unless
``prefix_caching=true``), and flash attention is off on these settings: its CPU kernel tiles a prompt's queries as
the batch that carries them is split. With batch_invariant=false the slots compute together.

Sampling is llama.cpp's own (greedy at temperature 0; top_k, top_p, min_p and the temperature in its sampler chain's
order; a seed per request, so a seeded sample does not depend on its neighbours); repetition_penalty over the whole
context, as transformers applies it; logit_bias added to the logits; a JSON schema held by llama.cpp's grammar.
OpenAI's presence and frequency penalties are refused by name: llama.cpp counts the prompt's tokens too. The
embedded HTTP port llama-server opens (loopback) takes a key nobody is given: only this process asks it.

Token ids: llama-server streams text, not ids. Each chunk is the text of the tokens decoded since the last one (with
special tokens written out, so an end-of-turn token is its own text) and, from its timings, how many tokens that was:
more than one where a token ended inside a UTF-8 character, whose bytes llama.cpp holds back until the character is
whole. ``Spelling`` reads the ids back from the bytes, each token's bytes as xgrammar decodes the tokenizer's
vocabulary, so the template's text and token count are llama.cpp's own. Where two ids spell the same bytes (a
byte-fallback token beside a piece), or a held-back run splits more than one way, the ids may differ from the ones
sampled, never the text; with logprobs asked, each chunk's last token comes with its id from llama.cpp (the
per-token log-probabilities are asked only then: llama.cpp sorts the whole vocabulary for each token's), and a
held-back token, for which llama.cpp reports none, has no entry. A character that ``max_tokens`` cuts in half is
not sent (llama.cpp streams none of its bytes), nor are its tokens counted.
"""

import json
import queue
import random
import re
import secrets
import threading
from pathlib import Path

import tritonhf_runtime as runtime
from tritonhf_runtime import BadRequest

# Below this temperature llama.cpp's FP32 sampling divides logits into infinities and samples from NaNs (seen at
# FP32's least normal number, 1.2e-38): such a request is refused, naming 0 (the likeliest token) instead.
LEAST_TEMPERATURE = 1e-30
DEFAULT_CONTEXT = 4096  # tokens a sequence may hold (prompt and answer), unless the model's context is shorter
WAIT_S = 0.05  # a step waits at most this long for a token: the loop checks cancellations between waits
BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # a SentencePiece byte token: the last choice for its byte
REPLACEMENT = "\ufffd"  # what llama.cpp's JSON writes for bytes that are no UTF-8


class Spelling:
    """Token ids from the bytes they spell: each id's bytes as xgrammar decodes the vocabulary (byte-level,
    byte-fallback or raw pieces, special tokens as their text)."""

    def __init__(self, tokenizer, vocab_size):
        try:
            import xgrammar
        except ImportError as error:  # a serving requirement of text generation (tritonhf deploy lists it)
            raise RuntimeError(f"the llama.cpp engine reads token ids back with xgrammar: {error}") from error

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        fallbacks = {token for token, piece in enumerate(pieces) if BYTE_FALLBACK.fullmatch(str(piece))}
        self.spelled = list(info.decoded_vocab)  # id -> its bytes
        self.ids: dict[bytes, int] = {}  # bytes -> the id read back for them (a piece before a byte-fallback token)
        for token, spelled in enumerate(self.spelled):
            if spelled and (spelled not in self.ids or (self.ids[spelled] in fallbacks and token not in fallbacks)):
                self.ids[spelled] = token
        self.longest = max(map(len, self.ids), default=1)
        # a byte that is no UTF-8 alone nor starts a character (so it decodes to U+FFFD whatever follows), as one token
        stray = [bytes([byte]) for byte in [*range(0xFF, 0xF4, -1), 0xC0, 0xC1, *range(0x80, 0xC0)]]
        self.stray = next((byte for byte in stray if byte in self.ids), None)

    def split(self, data, count):
        """``count`` ids whose bytes make ``data`` (longest pieces first), or None when none do."""
        if count == 1:
            found = self.ids.get(data)
            return None if found is None else [found]
        failed = set()

        def spell(start, left):
            if left == 0:
                return [] if start == len(data) else None
            if (start, left) in failed or len(data) - start < left:
                return None
            for end in range(min(len(data), start + self.longest), start, -1):
                token = self.ids.get(data[start:end])
                rest = spell(end, left - 1) if token is not None else None
                if rest is not None:
                    return [token, *rest]
            failed.add((start, left))
            return None

        return spell(0, count)

    def read(self, text, count):
        """``count`` ids for a chunk's text: those that spell its bytes; where llama.cpp replaced bytes that are no
        UTF-8 by U+FFFD before sending (they are lost), each replacement is read back as one such byte (``stray``),
        which decodes to U+FFFD again: the text stays llama.cpp's, and when no ``count`` ids spell it so, the fewest
        do (the count then differs from llama.cpp's). None when nothing spells it."""
        data = text.encode()
        found = self.split(data, count)
        if found is not None or REPLACEMENT not in text or self.stray is None:
            return found
        lost = data.replace(REPLACEMENT.encode(), self.stray)
        return self.split(lost, count) or next(
            (found for fewer in range(1, len(lost) + 1) if (found := self.split(lost, fewer)) is not None), None
        )


class LlamaCppEngine:
    """llama-server's slots (``xllamacpp.Server``) over a GGUF file, one slot per running sequence."""

    holds_grammar_back = False  # llama.cpp holds the whole answer to a grammar, from its first token

    def __init__(self, template, args, params):
        """The GGUF file vendored with the model, its context and end-of-text ids from its config; one slot per
        sequence the template runs at once (``max_running``), each with ``context`` tokens of key/value cache."""
        import xllamacpp
        from transformers import AutoConfig

        folder = runtime.weights_location(args, params)
        config = AutoConfig.from_pretrained(folder)
        invariant = runtime.batch_invariant(params)  # ValueError: Triton says why
        asked = params.get("prefix_caching", "false" if invariant else "true").strip().lower()
        self.prefix_caching = asked == "true"
        model_context = runtime.max_length(template.tokenizer, config, default=2048)
        self.context = min(model_context, runtime.int_parameter(params, "context", DEFAULT_CONTEXT))
        slots, threads = template.max_running, runtime.instance_threads(args)
        common = xllamacpp.CommonParams()
        common.model.path = str(Path(folder) / params.get(runtime.PARAM_GGUF_FILE, "model.gguf"))
        common.n_parallel = slots
        common.n_ctx = slots * self.context
        common.kv_unified = not invariant  # a cache per slot: a sequence's attention reads its own only
        if invariant:  # flash attention's tiles follow how a batch split a long prompt (below)
            common.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
        common.cache_prompt = self.prefix_caching
        common.n_batch = template.max_prefill_tokens
        common.cpuparams.n_threads = threads
        common.cpuparams_batch.n_threads = threads
        common.api_keys = [secrets.token_hex(16)]  # llama-server's own HTTP port answers no one but this process
        common.special = True  # special tokens streamed as their text: an end-of-turn token is read back by its id
        common.verbosity = -1
        print(f"tritonhf: {args.get('model_name', 'model')} on llama.cpp, {slots} slots of {self.context} tokens, "
              f"{threads} threads, {'a cache per slot' if invariant else 'one unified cache'}", flush=True)  # fmt: skip
        self.server = xllamacpp.Server(common)
        self.eos_ids = runtime.eos_ids(folder, config, template.tokenizer)
        self.vocab_size = len(template.tokenizer)
        self.spelling = Spelling(template.tokenizer, self.vocab_size)
        self.advance, self.finish = template.advance, template.finish
        self.slots = slots
        self.running = []  # sequences with a completion, in arrival order
        self.queues = {}  # running sequence -> what its completion streamed, not yet handed to the template
        self.ready = threading.Event()  # set whenever a completion streams something
        self.workers = []  # the threads of the completions still going
        self.closing = False

    def prepare(self, sequence):
        """What llama.cpp cannot do as asked is that request's 400, naming the input."""
        if 0 < sequence.temperature < LEAST_TEMPERATURE:
            raise BadRequest(
                f"input 'temperature' is {sequence.temperature:g}, a temperature at which llama.cpp's sampling fails "
                f"(the logits divided by it overflow FP32): send 0 for the likeliest token, or at least "
                f"{LEAST_TEMPERATURE:g}."
            )
        if sequence.presence_penalty or sequence.frequency_penalty:
            name = "presence_penalty" if sequence.presence_penalty else "frequency_penalty"
            raise BadRequest(
                f"input '{name}' is not applied by the llama.cpp engine (llama.cpp counts the prompt's tokens too, "
                "where OpenAI's counts the answer's): leave it out, use repetition_penalty, or serve the model with "
                "--engine transformers."
            )

    def take(self, waiting):
        """The waiting sequences a free slot can take (``waiting``, a deque, is the template's; its lock is held)."""
        admitted: list = []
        while waiting and len(self.running) + len(admitted) < self.slots:
            admitted.append(waiting.popleft())
        return admitted

    def body(self, sequence):
        """The completion llama-server is asked for: the prompt's token ids, the answer's budget and sampling."""
        body = {
            "prompt": list(sequence.prompt_ids),
            "n_predict": sequence.max_tokens,
            "stream": True,
            "cache_prompt": self.prefix_caching,
            # log-probabilities only when asked (llama.cpp sorts the vocabulary for them); each chunk's token count
            "n_probs": 0 if sequence.logprobs is None else max(1, sequence.logprobs),
            "timings_per_token": True,
            "temperature": sequence.temperature,
            "top_k": sequence.top_k,  # 0: every token, as llama.cpp reads it
            "top_p": sequence.top_p,
            "min_p": sequence.min_p,
            "typical_p": 1.0,
            "seed": sequence.seed if sequence.seed is not None else random.getrandbits(32),
            "repeat_penalty": sequence.repetition_penalty,
            "repeat_last_n": self.context,  # the whole context, prompt and answer, as transformers applies it
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "logit_bias": [[int(token), float(bias)] for token, bias in sequence.logit_bias.items()],
        }
        if sequence.schema is not None:  # compiled (and checked) by the template first; llama.cpp holds the answer
            body["json_schema"] = json.loads(sequence.schema)
        return body

    def step(self, admitted):
        """Start the admitted sequences' completions, wait briefly for tokens, pass every one streamed since the last
        step to ``advance``; (prompt tokens admitted, sequences computed)."""
        for sequence in admitted:
            self.queues[sequence] = queue.SimpleQueue()
            self.running.append(sequence)
            worker = threading.Thread(target=self.complete, args=(sequence,), name="tritonhf-llamacpp", daemon=True)
            worker.start()
            self.workers = [*(alive for alive in self.workers if alive.is_alive()), worker]
        self.remove_finished()
        prompt = sum(len(sequence.prompt_ids) for sequence in admitted)
        if not self.running:
            return prompt, 0
        self.ready.wait(WAIT_S)
        self.ready.clear()
        computed = 0
        for sequence in self.running:
            streamed = self.queues[sequence]
            moved = False
            while not streamed.empty():
                moved = True
                self.take_item(sequence, streamed.get())
            computed += moved
        self.remove_finished()
        return prompt, computed

    def read_back(self, text, count, entries):
        """A chunk's tokens: ``count`` of them spelling its ``text``, each (id, its log-probability entry or None); with
        log-probabilities asked, the last id is llama.cpp's own (its entry). None when the vocabulary spells no such
        run."""
        data = text.encode()
        entry = entries[-1] if entries else None
        last = int(entry["id"]) if entry else -1
        spelled = self.spelling.spelled[last] if 0 <= last < len(self.spelling.spelled) else None
        held = None
        if count >= 1 and spelled is not None and data.endswith(spelled):
            held = self.spelling.split(data[: len(data) - len(spelled)], count - 1)
        if entry is None or held is None:  # no entry, or bytes llama.cpp replaced: ids from the text, no entries
            ids = self.spelling.read(text, count)
            return None if ids is None else [(token, None) for token in ids]
        alternatives = tuple((int(top["id"]), float(top["logprob"])) for top in entry.get("top_logprobs", []))
        return [*((token, None) for token in held), (last, (float(entry["logprob"]), alternatives))]

    def take_item(self, sequence, item):
        """One thing a completion streamed: its tokens (each with its log-probability and alternatives where
        asked), an error, or its end."""
        kind, value = item
        if kind == "tokens":
            wanted = sequence.logprobs or 0
            for token, logprob in value:
                if sequence.done:
                    return
                self.advance(sequence, token, None if logprob is None else (logprob[0], logprob[1][:wanted]))
        elif sequence.done:
            return
        elif kind == "error":
            self.finish(sequence, "error", value)
        elif kind == "end":  # llama.cpp's own end: its length, or an end-of-text token already advanced
            length = value == "length" or len(sequence.tokens) >= sequence.max_tokens
            self.finish(sequence, "length" if length else "stop")

    def complete(self, sequence):
        """A worker: one completion, each streamed chunk onto the sequence's queue; it stops at the next chunk once
        the template finished the sequence."""
        streamed = self.queues[sequence]
        counted = 0  # tokens read back so far

        def on_chunk(chunk):
            nonlocal counted
            try:
                found = json.loads(chunk)
            except ValueError:
                found = {"error": {"message": f"llama.cpp sent a chunk that is not JSON: {chunk[:80]!r}"}}
            if "error" in found:
                error = found["error"]
                streamed.put(("error", str(error.get("message", error) if isinstance(error, dict) else error)))
            decoded = (found.get("timings") or {}).get("predicted_n", counted)
            for choice in found.get("choices", []):
                if choice.get("finish_reason"):
                    streamed.put(("end", choice["finish_reason"]))
                    continue
                entries = (choice.get("logprobs") or {}).get("content") or []
                tokens = self.read_back(choice.get("text") or "", decoded - counted, entries)
                if tokens is None:  # this sequence's error (the next step ends it), and its completion stops
                    streamed.put(("error", f"llama.cpp streamed {choice.get('text')!r} as {decoded - counted} "
                                           "tokens, which this tokenizer does not spell"))  # fmt: skip
                    self.ready.set()
                    return True
                counted = decoded
                streamed.put(("tokens", tokens))
            self.ready.set()
            return sequence.done or self.closing  # True: llama.cpp stops this completion and frees its slot

        try:
            self.server.handle_completions(json.dumps(self.body(sequence)), on_chunk)
        except Exception as error:  # llama.cpp's own failure: this sequence's error, the others run on
            streamed.put(("error", f"llama.cpp failed: {error}"))
        streamed.put(("end", None))
        self.ready.set()

    def remove_finished(self):
        """Sequences that ended (stop string, length, cancelled, error) leave; their completions stop at their next
        token (the worker's callback reads ``done``)."""
        for sequence in self.running:
            if sequence.done:
                self.queues.pop(sequence, None)
        self.running = [sequence for sequence in self.running if not sequence.done]

    def clear(self):
        """After a failed step: nothing runs (a completion still going stops at its next token: it is done)."""
        self.running, self.queues = [], {}

    def close(self):
        """The model is unloaded: every completion stops at its next token and its thread ends, then llama.cpp's
        server (its slots, its threads, the file) goes, before the process does."""
        self.closing = True
        for worker in self.workers:
            worker.join(timeout=10)
        self.workers, self.server = [], None


ENGINE = LlamaCppEngine  # what the template makes (tritonhf.engine "llamacpp")
