"""The text-generation template's fast CPU engine: OpenVINO GenAI's continuous batching.

Used when the model was added with ``--engine openvino`` (or ``auto`` on a CPU). The
template keeps everything a client sees: request checks, context limits, chat templates,
the streamed reply (incremental detokenising, stop strings, usage, the final flag),
cancellation and the metrics. This engine only computes tokens: each Triton request
becomes one request of a ``ContinuousBatchingPipeline`` (``add_request`` with the prompt's
token ids and its own ``GenerationConfig``), the template's loop calls ``step()``, and the
tokens each handle has ready go through the template's ``advance`` like the transformers
engine's do. OpenVINO's scheduler batches the running requests, splits long prompts across
steps (``max_num_batched_tokens``) and pages the key/value cache.

An image chat (task image-text-to-text) is an exported VLM folder: its pipeline takes the prompt as text (the chat
template's output, one placeholder per image) and the images as uint8 pixels, which the template sized as the
model's processor does, so OpenVINO's own resize leaves them as they are. The template counted the prompt's tokens
with each image's (``runtime.Vision``), as the pipeline widens them.

Why the template's tokenizer and not OpenVINO's: the prompt is tokenized once, by the same
tokenizer the context check and the usage counts use, and the reply is detokenised the same
way with either engine. Stop strings are matched on that text too (a stop cut is exact and
the same for both engines); the request's handle is cancelled at the next step. End-of-text
ids go to OpenVINO as ``stop_token_ids``, so a finished sequence stops inside its scheduler.

Batch invariance: ``runtime.engine_settings`` chooses the threads and precisions (one thread, f32
activations and key/value cache by default; why in ``tritonhf_runtime/openvino_settings.py``).

Seeds: ``rng_seed`` is per request in OpenVINO GenAI's sampler, so a seeded sample does not
depend on its neighbours; an unseeded sample gets a random seed (not always the same text).
"""

import itertools
import random
from pathlib import Path
from typing import Any

import numpy as np
import openvino
import openvino_genai
import tritonhf_runtime as runtime
from tritonhf_runtime import BadRequest

RUNNING = openvino_genai.GenerationStatus.RUNNING
# A request OpenVINO's scheduler could not take (its prompt does not fit the key/value cache).
IGNORED = openvino_genai.GenerationStatus.IGNORED


class OpenVinoEngine:
    """One ``ContinuousBatchingPipeline`` over a GGUF file (or an OpenVINO IR folder) on the CPU."""

    holds_grammar_back = False  # OpenVINO GenAI holds the whole answer to a grammar, from its first token

    def __init__(self, template, args, params):
        """The GGUF file (or IR export) vendored with the model, with its context and end-of-text ids from its
        config; the template's bounds (``max_running``, ``max_prefill_tokens``), ``advance`` and ``finish``. The
        threads and CPU properties are ``runtime.engine_settings``' (batch-invariant unless the model was added with
        batch_invariant=false). A schema is compiled by the template's ``grammars`` (read when a sequence joins)."""
        from transformers import AutoConfig

        folder = runtime.weights_location(args, params)
        config = AutoConfig.from_pretrained(folder)
        settings = runtime.engine_settings(params, runtime.instance_threads(args))  # ValueError: Triton says why
        print(f"tritonhf: {args.get('model_name', 'model')} on OpenVINO, {settings.describe()}", flush=True)
        served = params.get(runtime.PARAM_OPENVINO_MODEL) or params.get(runtime.PARAM_GGUF_FILE, "model.gguf")
        path = str(Path(folder) / served)
        max_running, max_batched_tokens = template.max_running, template.max_prefill_tokens
        cache_gb = runtime.int_parameter(params, "kv_cache_gb", 1)
        # off on the invariant settings unless asked: a cached prefix can turn a near-tie (below)
        prefix_caching = params.get("prefix_caching", "false" if settings.invariant else "true").strip().lower()
        prefix_caching = prefix_caching == "true"
        eos_ids = runtime.eos_ids(folder, config, template.tokenizer)
        context = runtime.max_length(template.tokenizer, config, default=2048)
        vocab_size = len(template.tokenizer)  # the schema's compile in the template; OpenVINO masks with its own copy
        advance, finish = template.advance, template.finish
        scheduler = openvino_genai.SchedulerConfig()
        scheduler.cache_size = cache_gb  # GB of key/value cache, shared by the running sequences
        scheduler.max_num_seqs = max_running
        scheduler.max_num_batched_tokens = max_batched_tokens
        scheduler.dynamic_split_fuse = True  # long prompts are prefilled over several steps
        # With prefix_caching, a prompt that starts as an earlier one did (a chat's history, resent every turn)
        # reuses that prefix's cached keys and values. Off on the invariant settings unless asked: the tokens after
        # a cached prefix are then computed in a pass of their own, whose sums can differ in the last bits from a
        # cold prefill's, so a near-tie between two tokens can turn with what was cached before.
        scheduler.enable_prefix_caching = prefix_caching
        properties = {"INFERENCE_NUM_THREADS": settings.threads, **settings.properties}
        self.build = lambda: openvino_genai.ContinuousBatchingPipeline(path, scheduler, "CPU", properties)
        self.pipeline = self.build()
        self.template = template
        self.images = template.vision is not None  # an image chat's pipeline (an exported VLM folder): text in
        self.eos_ids, self.context, self.vocab_size = set(eos_ids), context, vocab_size
        self.advance, self.finish = advance, finish
        self.running = []  # sequences with a handle, in arrival order
        self.handles: dict[Any, Any] = {}  # running sequence -> its request in the pipeline
        self.ids = itertools.count()

    def prepare(self, sequence):
        """OpenVINO GenAI returns each chosen token's log-probability, no alternatives: asking for them is that
        request's 400. Its grammar OpenVINO applies itself (``config``)."""
        if sequence.logit_bias:
            raise BadRequest(
                "input 'logit_bias' is not applied by the OpenVINO engine (OpenVINO GenAI has no per-token bias): "
                "leave it out, or serve the model with --engine transformers."
            )
        if sequence.logprobs:
            raise BadRequest(
                f"input 'logprobs' asks for {sequence.logprobs} alternatives per token; the OpenVINO engine returns "
                "only the chosen token's log-probability: send 0 (or serve the model with --engine transformers)."
            )

    def take(self, waiting):
        """Every waiting sequence joins at once: OpenVINO's scheduler batches and splits them inside its pipeline
        (``waiting``, a deque, is the template's; its lock is held)."""
        admitted = list(waiting)
        waiting.clear()
        return admitted

    def config(self, sequence):
        config = openvino_genai.GenerationConfig()
        config.max_new_tokens = sequence.max_tokens
        if self.eos_ids:
            config.stop_token_ids = self.eos_ids
        if sequence.temperature > 0:
            config.do_sample = True
            config.temperature = sequence.temperature
            config.top_p = sequence.top_p
            config.top_k = sequence.top_k  # 0: all tokens, as OpenVINO GenAI reads it
            config.min_p = sequence.min_p
            config.rng_seed = sequence.seed if sequence.seed is not None else random.getrandbits(32)
        config.presence_penalty = sequence.presence_penalty
        config.frequency_penalty = sequence.frequency_penalty
        config.repetition_penalty = sequence.repetition_penalty
        if sequence.logprobs is not None:  # the chosen token's only (OpenVINO GenAI returns no alternatives)
            config.logprobs = 1
        if sequence.schema is not None:  # compiled (and checked) by the template first; OpenVINO masks the logits
            kind, text = self.template.grammars.openvino_grammar(sequence.schema)  # compact JSON (runtime/grammars.py)
            config.structured_output_config = openvino_genai.StructuredOutputConfig(**{kind: text})
        return config

    def add(self, sequence):
        """The sequence's request in the pipeline: its prompt's token ids; an image chat's prompt as text, with its
        images (uint8, as the model's processor sized them), which the pipeline's vision part reads in order."""
        config = self.config(sequence)
        if not self.images:
            ids = openvino.Tensor(np.array([sequence.prompt_ids], dtype=np.int64))
            return self.pipeline.add_request(next(self.ids), ids, config)
        config.apply_chat_template = False  # the text is the chat template's output already
        text = sequence.prompt_text
        if text is None:  # the template's warm-up: ids only
            text = self.template.tokenizer.decode(sequence.prompt_ids)
        images = [openvino.Tensor(pixels[np.newaxis]) for pixels in sequence.images]
        return self.pipeline.add_request(next(self.ids), text, images, config)

    def step(self, admitted):
        """Add the admitted sequences, run one step, pass every ready token to ``advance``; (prompt tokens admitted,
        sequences computed)."""
        for sequence in admitted:
            self.handles[sequence] = self.add(sequence)
            self.running.append(sequence)
        self.remove_finished()
        if not self.running:
            return sum(len(s.prompt_ids) for s in admitted), 0
        self.pipeline.step()
        computed = len(self.running)
        for sequence in self.running:
            handle = self.handles[sequence]
            if handle.can_read():  # read() would block when nothing is ready
                for output in handle.read().values():
                    logprobs = list(output.generated_log_probs) if sequence.logprobs is not None else []
                    for index, token in enumerate(output.generated_ids):
                        if not sequence.done:
                            logprob = (logprobs[index], ()) if index < len(logprobs) else None
                            self.advance(sequence, int(token), logprob)
            status = handle.get_status()
            if sequence.done or status == RUNNING:
                continue
            if status == IGNORED:
                self.finish(sequence, "error", "the prompt does not fit the key/value cache (raise 'kv_cache_gb').")
            else:  # finished inside OpenVINO (its length or stop ids) with nothing left to read
                reason = "length" if len(sequence.tokens) >= sequence.max_tokens else "stop"
                self.finish(sequence, reason)
        self.remove_finished()
        return sum(len(s.prompt_ids) for s in admitted), computed

    def remove_finished(self):
        """Sequences that ended (stop string, length, cancelled, error) leave; OpenVINO drops their cache."""
        for sequence in self.running:
            if sequence.done:
                handle = self.handles.pop(sequence)
                if handle.get_status() == RUNNING:
                    handle.cancel()
        self.running = [sequence for sequence in self.running if not sequence.done]

    def clear(self):
        """After a failed step: nothing runs, and the pipeline is made again. A step that raised leaves OpenVINO's
        scheduler mid-step (every later step fails too: its grammar compile, for one), so the model would refuse
        every request from then on; a new pipeline over the same file serves the next ones."""
        self.running, self.handles = [], {}
        self.pipeline = self.build()

    def close(self):
        """The model is unloaded: nothing of its own outlives the template's loop."""


ENGINE = OpenVinoEngine  # what the template makes (tritonhf.engine "openvino")
