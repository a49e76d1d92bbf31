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
"""

import json
import queue
import random
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
        common.verbosity = -1
        print(f"tritonhf: {args.get('model_name', 'model')} on llama.cpp, {slots} slots of {self.context} tokens, "
              f"{threads} threads, {'a cache per slot' if invariant else 'one unified cache'}", flush=True)  # fmt: skip
        self.server = xllamacpp.Server(common)
        self.eos_ids = runtime.eos_ids(folder, config, template.tokenizer)
        self.vocab_size = len(template.tokenizer)
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
            "n_probs": max(1, sequence.logprobs or 0),  # the chosen token's id comes with its log-probability
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

    def take_item(self, sequence, item):
        """One thing a completion streamed: a token (with its log-probability and alternatives), or its end."""
        kind, value = item
        if sequence.done:
            return
        if kind == "token":
            token, logprob, alternatives = value
            wanted = sequence.logprobs or 0
            self.advance(sequence, token, (logprob, alternatives[:wanted]))
        elif kind == "error":
            self.finish(sequence, "error", value)
        elif kind == "end":  # llama.cpp's own end: its length, or an end-of-text token already advanced
            self.finish(sequence, "length" if len(sequence.tokens) >= sequence.max_tokens else "stop")

    def complete(self, sequence):
        """A worker: one completion, each streamed chunk onto the sequence's queue; it stops at the next chunk once
        the template finished the sequence."""
        streamed = self.queues[sequence]

        def on_chunk(chunk):
            try:
                found = json.loads(chunk)
            except ValueError:
                found = {"error": {"message": f"llama.cpp sent a chunk that is not JSON: {chunk[:80]!r}"}}
            if "error" in found:
                error = found["error"]
                streamed.put(("error", str(error.get("message", error) if isinstance(error, dict) else error)))
            for choice in found.get("choices", []):
                for entry in (choice.get("logprobs") or {}).get("content") or []:
                    alternatives = tuple(
                        (int(top["id"]), float(top["logprob"])) for top in entry.get("top_logprobs", [])
                    )
                    streamed.put(("token", (int(entry["id"]), float(entry["logprob"]), alternatives)))
                if choice.get("finish_reason"):
                    streamed.put(("end", choice["finish_reason"]))
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
