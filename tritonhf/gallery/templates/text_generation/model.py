"""Streaming text generation with continuous batching (tritonhf gallery template).

The model is *decoupled*: ``execute`` checks each request, hands it to the scheduler and
returns at once; every answer goes through the request's response sender (one response
per chunk of text, then a final one flagged COMPLETE_FINAL).

Continuous (iteration-level) batching: one background thread runs the decode loop. Each
iteration it

1. drops the sequences whose client went away (``request.is_cancelled()``),
2. hands the engine the waiting requests it has room for (``take``): they join the running batch,
3. runs one engine ``step`` for all running sequences; every token goes through ``advance``,
   which streams each sequence's new text (``runtime.TextReply``) and finishes it at a stop,
4. lets the engine drop the finished ones, so a finished or cancelled sequence costs nothing
   from the next step on.

A request that arrives while others are decoding starts at the next iteration, not after
the longest generation of the batch. At most ``max_waiting`` (64) requests wait; one more is
refused at once with UNAVAILABLE ("exceeds maximum queue size"), as Triton's own queue bound
refuses for the encoder templates, so overload is answered fast instead of queued without end.

The engine computes the tokens; this file checks requests, streams the text, cancels and counts,
and does not know which engine runs. One is chosen in ``initialize``: config parameter ``tritonhf.engine``
(NAME, chosen at ``gallery add``) names the module ``NAME_engine.py`` beside this file, whose ``ENGINE`` class is
made as ``ENGINE(template, args, params)``:

* ``transformers_engine.py``: its own scheduler over a PyTorch causal LM, CPU or GPU;
* ``openvino_engine.py``: OpenVINO GenAI's ``ContinuousBatchingPipeline`` over a GGUF file,
  several times faster on a CPU; its scheduler batches inside the pipeline;
* ``llamacpp_engine.py``: llama.cpp's kernels and llama-server's slots over a GGUF file as it is, any architecture
  and quant type llama.cpp reads.

An engine has ``running`` (the sequences it computes), ``context`` and ``eos_ids`` (the model's),
``vocab_size`` (the width a grammar masks), ``holds_grammar_back`` (whether a grammar can wait for a reasoning
model's thinking to end: the sequence's ``phase``), and ``prepare(sequence)`` (a BadRequest for what it cannot
serve), ``take(waiting)``, ``step(admitted) -> (prompt tokens, sequences computed)``, ``remove_finished()``,
``clear()`` (after a failed step) and ``close()`` (the model unloaded); each token it computes goes to the template's
``advance(sequence, token, logprob)``. What it keeps of a running sequence is its own; from the template it reads
``grammars`` (a schema's compiled grammar) and ``think_ids`` when a sequence joins. A new engine is such a module
and one line in gallery add's registry (``tritonhf/gallery/families/generation/engines.py``); nothing here changes.

Limits (docs/guide.md, "Long inputs"): the model's context C (``max_position_embeddings``). A
prompt of P tokens with ``max_tokens`` M: P + M > C is refused (400, "context length")
unless the request sends ``truncate=true``; then the prompt keeps its last C - M tokens and
the last response says how many went (``prompt_tokens_cut``). Nothing is cut silently. M
defaults to parameter ``max_tokens`` (128), lowered to fit when not given.

Tensor names follow Triton's generate extension, so this works with curl:
    curl -N localhost:8000/v2/models/NAME/generate_stream -d '{"text_input": "Hi", "max_tokens": 20}'

Inputs:  text_input (the prompt; with chat=true, a JSON list of {"role", "content"} messages),
         optional max_tokens, temperature (0 = greedy), top_p, seed, stop (strings), chat, truncate;
         json_schema (the answer held to it by a grammar), tools and tool_choice (OpenAI's function tools:
         runtime/tools.py), logprobs (each token's log-probability, with N alternatives), OpenAI's
         presence_penalty and frequency_penalty (the llama.cpp engine refuses them by name), vLLM's
         repetition_penalty, top_k and min_p (each engine applies them: greedy answers too feel the penalties),
         OpenAI's logit_bias (the transformers and llama.cpp engines; the OpenVINO engine refuses it by name),
         chat_template_kwargs (a JSON object for the chat template, as {"enable_thinking": false});
         images (an image chat, task image-text-to-text: the encoded images of the messages' {"type": "image"}
         parts, in order; each sized by the model's own processor and its tokens counted in the prompt's:
         runtime/vision.py, which states the limits).
Reasoning models (config parameter reasoning=think, written by gallery add from the chat template): a chat
         answer's thinking streams as reasoning_output, apart from text_output, without its <think> markers; a
         grammar (json_schema, tools) holds the text after the thinking, and tool calls are read from it
         (runtime/reasoning.py).
Outputs: text_output, one chunk per response; the last response also has finish_reason
         ("stop", "length" or "tool_calls"), prompt_tokens and completion_tokens, and with tools the calls
         made (tool_calls, JSON) and the text outside them (content); with logprobs, each response the
         entries of its tokens (runtime.TextReply does the incremental detokenising, the stop strings and
         the final flag).
Metrics (Triton's metrics port): tritonhf_time_to_first_token_seconds,
         tritonhf_inter_token_seconds (histograms), tritonhf_generated_tokens_total,
         tritonhf_prompt_tokens_total, tritonhf_cancelled_total, tritonhf_sequence_steps_total
         (counters), tritonhf_running_sequences, tritonhf_waiting_sequences (gauges).
"""

import collections
import json
import threading
import time

import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# apply_chat_template's own arguments, which this template sets: not a request's chat_template_kwargs
TEMPLATE_ARGUMENTS = {"conversation", "messages", "tools", "documents", "tokenize", "add_generation_prompt",
                      "chat_template", "continue_final_message", "return_dict", "return_tensors"}  # fmt: skip


# A reasoning model's answer, token by token -> ``runtime.opened_in_prompt``'s words for it: "thinking" (inside its
# thinking: a grammar waits), "undecided" (its first token may open its thinking), "content" (a grammar holds every
# token).
PHASES = {"thinking": True, "undecided": None, "content": False}


class Sequence(runtime.Sequence):
    """One request being generated (``runtime.Sequence``: its reply, token budget and sampling), with what this
    template's loop keeps: its constraint, phase, penalties and timing. What an engine keeps of it (a grammar's
    state, a cache row, a pipeline's handle) is the engine's own."""

    def __init__(self, request, tokenizer, prompt_ids, *, max_tokens, sampling=runtime.GREEDY, cut=0,
                 constraint=None, phase=None):  # fmt: skip
        """``constraint``: a ``Constraint`` (response_format, tools), or None for a free answer. ``phase``: for a
        reasoning model's chat answer, where its prompt left it (``PHASES``); None for any other answer."""
        calls = constraint.calls if constraint is not None else None
        super().__init__(request, tokenizer, prompt_ids, max_tokens=max_tokens, sampling=sampling, cut=cut,
                         calls=calls, reasons=phase is not None, opened=PHASES.get(phase))  # fmt: skip
        self.constraint = constraint
        self.phase = phase or "content"  # where the answer is, token by token (PHASES)
        self.schema = constraint.schema if constraint is not None else None  # held to this JSON Schema (text)
        self.logprobs = None  # with this many alternatives, each token's log-probability goes with the reply
        # OpenAI's penalties and logit_bias (neutral by default; top_k and min_p are runtime.Sequence's), set from
        # the request by ``read_penalties``
        self.presence_penalty = 0.0  # subtracted from a token's logit once it was generated
        self.frequency_penalty = 0.0  # subtracted per time it was generated
        self.repetition_penalty = 1.0  # a prompt's or answer's token: its logit divided (positive) or multiplied
        self.logit_bias = {}  # token id -> added to its logit (OpenAI's logit_bias)
        self.arrived = time.monotonic()
        self.last_token_at = None
        # an image chat's (image-text-to-text): the prompt as text with one placeholder per image, which the engine
        # widens itself, and the images as the processor sizes them (runtime.Vision); None and () otherwise
        self.prompt_text = None
        self.images = ()

    @property
    def tokens(self):
        return self.reply.tokens

    @property
    def done(self):
        return self.reply.done


class Constraint:
    """What a request asks beyond free text: an answer held to a JSON Schema (``schema``), and with tools offered,
    how its tool calls are read back (``calls``)."""

    def __init__(self, schema=None, grammar=None, calls=None):
        self.schema, self.grammar, self.calls = schema, grammar, calls


class Metrics:
    """Triton custom metrics of this model (shown on the metrics port), one label set per model."""

    def __init__(self, model_name):
        labels = {"model": model_name}
        family = pb_utils.MetricFamily
        buckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]

        def metric(name, kind, description, **extra):
            self.families.append(family(name=name, description=description, kind=kind))
            return self.families[-1].Metric(labels=labels, **extra)

        self.families = []  # kept alive as long as their metrics
        self.ttft = metric(
            "tritonhf_time_to_first_token_seconds", family.HISTOGRAM, "Arrival to first token", buckets=buckets
        )
        self.itl = metric("tritonhf_inter_token_seconds", family.HISTOGRAM, "Time between two tokens", buckets=buckets)
        self.generated = metric("tritonhf_generated_tokens_total", family.COUNTER, "Tokens generated")
        self.prompt = metric("tritonhf_prompt_tokens_total", family.COUNTER, "Prompt tokens prefilled")
        self.cancelled = metric("tritonhf_cancelled_total", family.COUNTER, "Requests cancelled by their client")
        self.steps = metric("tritonhf_sequence_steps_total", family.COUNTER, "Sequences computed, summed over steps")
        self.running = metric("tritonhf_running_sequences", family.GAUGE, "Sequences in the running batch")
        self.waiting = metric("tritonhf_waiting_sequences", family.GAUGE, "Requests waiting to be admitted")
        self.grammars = metric(
            "tritonhf_grammar_cache_bytes", family.GAUGE, "Compiled grammars (response_format, tools) kept, in bytes"
        )


class TritonPythonModel(runtime.DecoupledModel):
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.tokenizer = runtime.load_tokenizer(args, params, padding_side="left")
        self.vision = runtime.vision.load(args, params)  # None: a model without images
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self.default_max_tokens = runtime.int_parameter(params, "max_tokens", 128)
        # Beyond this many waiting requests a new one is refused at once (UNAVAILABLE), not queued without end.
        self.max_waiting = runtime.int_parameter(params, "max_waiting", 64)
        self.max_running = runtime.int_parameter(params, "max_running", 8)
        self.max_prefill_tokens = runtime.int_parameter(params, "max_prefill_tokens", 2048)
        self.metrics = Metrics(args.get("model_name", "model"))
        # The one place an engine is chosen; past it, the loop drives any the same way.
        name = params.get(runtime.PARAM_ENGINE, "transformers")
        self.engine = runtime.engine_class(name, runtime.PARAM_ENGINE, "--engine")(self, args, params)
        if self.vision is not None and not getattr(self.engine, "images", False):
            raise ValueError(f"the {name} engine does not read images; image-text-to-text is served by openvino.")
        self.context, self.eos_ids = self.engine.context, self.engine.eos_ids
        self.grammars = runtime.Grammars(self.tokenizer, self.engine.vocab_size, sorted(self.eos_ids))
        # a reasoning model (gallery add read its chat template): its chat answers' thinking is split from them, and
        # the ids of its markers when each is one token (a grammar then waits for the end of the thinking)
        self.reasons = params.get(runtime.PARAM_REASONING) == "think"
        self.think_ids = [self.single_token(marker) for marker in (runtime.THINK_START, runtime.THINK_END)]
        self.waiting: collections.deque = collections.deque()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.running, self.admitting = [], []
        # Warm-up: a short prompt (it also tells whether caches can be merged), then a 64-token one, so that
        # the first real request does not pay OpenVINO's one-off preparation of longer prefills. Not counted in the
        # metrics, which are the requests'.
        self.warming = True
        hello = self.tokenizer("Hello")["input_ids"] or [self.pad_id]
        for ids in (hello, (hello * 64)[: max(1, min(64, self.context - 2))]):
            self.run_alone(Sequence(None, self.tokenizer, ids, max_tokens=2))
        self.warm_grammars(hello)
        self.warming = False
        self.stopping = False
        self.thread = threading.Thread(target=self.loop, name="tritonhf-decode", daemon=True)
        self.thread.start()

    def finalize(self):
        """The loop stops, then the engine lets go of what it holds (threads, the model's file)."""
        super().finalize()
        self.engine.close()

    def single_token(self, text):
        """The id of ``text`` when the tokenizer writes it as one token, else None."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[0] if len(ids) == 1 else None

    def warm_grammars(self, ids):
        """One constrained step, so that the first schema a client sends pays only its own compile: xgrammar reads
        the vocabulary once per model (here, and in OpenVINO's own copy), most of a first schema's 0.8 s."""
        try:
            schema = runtime.tools.ANY_OBJECT
            constraint = Constraint(schema, self.grammars.compile(schema, "json_schema"))
            warm = Sequence(None, self.tokenizer, ids, max_tokens=2, constraint=constraint)
            self.engine.prepare(warm)
        except runtime.BadRequest:  # no xgrammar in this Python, or an engine without grammars: refused, saying so
            return
        self.run_alone(warm)

    def run_alone(self, sequence):
        """A warm-up sequence, stepped to its end before the decode loop starts."""
        self.waiting.append(sequence)
        while not sequence.done:
            self.step()

    # ------------------------------------------------------------------ requests -> sequences

    def sequence(self, request):
        prompts = runtime.decode_texts(runtime.input_array(request, "text_input"), "text_input")
        if len(prompts) != 1:
            raise runtime.BadRequest(
                f"send one text_input per request, not {len(prompts)}; one stream answers one prompt."
            )
        chat = runtime.read_flag(request, "chat")
        images = self.read_images(request, chat)
        tools, constraint = self.constraint(request, chat)
        kwargs = self.template_kwargs(request, chat)
        prompt = self.chat_prompt(prompts[0], tools, kwargs) if chat else prompts[0]
        phase = self.phase(prompt, constraint) if chat and self.reasons else None
        # the prompt as the model reads it: each image's placeholder widened to its tokens (its processor's rule)
        widened = self.vision.widen(prompt, [tokens for _, tokens in images]) if self.vision else prompt
        try:
            ids = self.tokenizer(widened, add_special_tokens=not chat)["input_ids"]
        except (UnicodeError, TypeError, ValueError) as error:  # JSON can carry a lone surrogate into a message
            raise runtime.BadRequest(f"input 'text_input' cannot be tokenized ({error}): send valid Unicode.") from (
                error
            )
        if not ids:  # an empty prompt: start from the beginning-of-text token
            ids = [self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.pad_id]
        asked = runtime.read_max_tokens(request, None, self.context - 1)
        ids, max_tokens, cut = self.fit(ids, asked, runtime.read_flag(request, "truncate"), bool(images))
        sampling = runtime.read_sampling(request)
        most = runtime.TOP_LOGPROBS_MAX
        logprobs = runtime.optional_scalar(request, "logprobs", None, lambda v: 0 <= v <= most, f"from 0 to {most}")
        sequence = Sequence(request, self.tokenizer, ids, max_tokens=max_tokens, sampling=sampling, cut=cut,
                            constraint=constraint, phase=phase)  # fmt: skip
        sequence.logprobs = logprobs
        if self.vision:  # the engine reads the text and widens each placeholder itself
            sequence.prompt_text = self.tokenizer.decode(ids) if cut else prompt
            sequence.images = tuple(pixels for pixels, _ in images)
        self.read_penalties(request, sequence)
        self.engine.prepare(sequence)  # BadRequest: what this engine cannot serve
        return sequence

    def read_images(self, request, chat):
        """The optional input images (an image chat's, in the order of the messages' image parts), each as
        (pixels, tokens) sized by the model's processor (``runtime.Vision``: its limits)."""
        array = runtime.optional_array(request, "images")
        if array is None or array.size == 0:
            return []
        if self.vision is None:
            raise runtime.BadRequest(
                "input 'images': this model takes no images; send them to an image-text-to-text model."
            )
        if not chat:
            raise runtime.BadRequest(
                "input 'images' goes with chat=true: the messages' image parts say where each image is."
            )
        return self.vision.read([bytes(data) for data in array.reshape(-1)])

    def template_kwargs(self, request, chat):
        """The optional input chat_template_kwargs: a JSON object of keywords for the chat template (vLLM's, as
        ``{"enable_thinking": false}``), never one that names what this template sets itself."""
        raw = runtime.optional_scalar(request, "chat_template_kwargs", None, lambda v: True, "a JSON object")
        if raw is None:
            return {}
        if not chat:
            raise runtime.BadRequest("input 'chat_template_kwargs' is for chat=true (the chat template renders it).")
        try:
            kwargs = json.loads(raw)
        except ValueError as error:
            raise runtime.BadRequest(f"input 'chat_template_kwargs' must be a JSON object ({error}).") from error
        if not isinstance(kwargs, dict):
            raise runtime.BadRequest("input 'chat_template_kwargs' must be a JSON object of names to values.")
        taken = sorted(set(kwargs) & TEMPLATE_ARGUMENTS)
        if taken:
            raise runtime.BadRequest(
                f"input 'chat_template_kwargs' names {', '.join(taken)}, which the server sets itself; send the "
                "messages and tools in their own fields."
            )
        return kwargs

    def phase(self, prompt, constraint):
        """Where a reasoning model's chat answer starts (``PHASES``); a grammar the engine cannot hold back until the
        thinking ends is refused by name."""
        opened = runtime.opened_in_prompt(prompt)
        phase = next(name for name, value in PHASES.items() if value is opened)
        markers = {"thinking": self.think_ids[1:], "undecided": self.think_ids}.get(phase, [])  # what a grammar reads
        held = constraint is not None and constraint.grammar is not None
        if held and markers and (not self.engine.holds_grammar_back or None in markers):
            why = (
                "this engine holds the whole answer to it, thinking included"
                if not self.engine.holds_grammar_back
                else "its thinking markers are not single tokens of this tokenizer"
            )
            raise runtime.BadRequest(
                f"input 'json_schema' or 'tools': this model thinks before it answers, and {why}. Send "
                'chat_template_kwargs {"enable_thinking": false} (a template that takes it answers at once), or '
                "add the model with --engine transformers."
            )
        return phase

    def read_penalties(self, request, sequence):
        """top_k, min_p and the penalties, each checked against its range (runtime/ranges.py); a request's own."""
        most, low, high = runtime.PENALTY_MAX, runtime.REPETITION_PENALTY_MIN, runtime.REPETITION_PENALTY_MAX
        penalty = (lambda v: -most <= v <= most, f"from -{most} to {most}")
        sequence.presence_penalty = runtime.optional_scalar(request, "presence_penalty", 0.0, *penalty)
        sequence.frequency_penalty = runtime.optional_scalar(request, "frequency_penalty", 0.0, *penalty)
        sequence.repetition_penalty = runtime.optional_scalar(
            request, "repetition_penalty", 1.0, lambda v: low <= v <= high, f"from {low} to {high}"
        )
        least = runtime.TOP_K_MIN
        top_k = runtime.optional_scalar(request, "top_k", 0, lambda v: v >= least, f"{least} or 0 (all tokens) or more")
        sequence.top_k = max(0, top_k)
        sequence.logit_bias = self.read_logit_bias(request)
        sequence.min_p = runtime.optional_scalar(
            request, "min_p", 0.0, lambda v: 0 <= v <= runtime.MIN_P_MAX, f"from 0 to {runtime.MIN_P_MAX:g}"
        )

    def read_logit_bias(self, request):
        """OpenAI's logit_bias (a JSON object: token id -> bias), checked: ids of this vocabulary, biases in range."""
        raw = runtime.optional_scalar(request, "logit_bias", None, lambda v: True, "a JSON object")
        if raw is None:
            return {}
        most, count = runtime.LOGIT_BIAS_MAX, runtime.LOGIT_BIAS_TOKENS
        last = self.engine.vocab_size - 1
        rule = f"a JSON object of at most {count} token ids (0 to {last}) to biases from -{most} to {most}"
        try:
            given = json.loads(raw)
            bias = {int(token): float(value) for token, value in given.items()}
        except (ValueError, TypeError, AttributeError) as error:
            raise runtime.BadRequest(f"input 'logit_bias' must be {rule}.") from error
        if len(bias) > count or any(
            not 0 <= token < self.engine.vocab_size or not -most <= value <= most for token, value in bias.items()
        ):
            raise runtime.BadRequest(f"input 'logit_bias' must be {rule}.")
        return bias

    def constraint(self, request, chat):
        """(tools to render, ``Constraint`` or None) from the optional inputs json_schema, tools and tool_choice.

        Each schema is compiled here, so a schema the grammar compiler refuses is this request's 400 alone."""
        plan = runtime.tools.plan(
            runtime.optional_scalar(request, "json_schema", None, lambda v: True, "a JSON Schema"),
            runtime.optional_scalar(request, "tools", None, lambda v: True, "a JSON list of tools"),
            runtime.optional_scalar(request, "tool_choice", None, lambda v: True, "a tool choice"),
            chat,
        )
        if plan.schema is None and plan.names is None:
            return None, None
        grammar = self.grammars.compile(plan.schema, plan.where) if plan.schema else None
        self.metrics.grammars.set(self.grammars.cache_bytes())
        names = plan.names
        calls = None if names is None else (lambda text: runtime.tools.parse_calls(text, names))
        return plan.tools, Constraint(plan.schema, grammar, calls)

    def fit(self, ids, asked, truncate, images=False):
        """(prompt ids, max_tokens, tokens cut): the prompt and its answer within the context C.

        Without ``max_tokens`` the answer gets the default, lowered to the room left. A prompt
        that leaves no room (or less than the ``max_tokens`` asked) is refused, naming the
        context length, unless ``truncate``: then its start is cut and the answer says how much.
        A prompt with ``images`` is never cut (an image's tokens go whole or not at all).
        """
        if asked is not None:
            max_tokens = asked
        elif len(ids) < self.context:
            max_tokens = max(1, min(self.default_max_tokens, self.context - len(ids)))
        else:
            max_tokens = min(self.default_max_tokens, self.context - 1)
        over = len(ids) + max_tokens - self.context
        if over <= 0:
            return ids, max_tokens, 0
        if not truncate or images:
            counted = " (its images' tokens counted)" if images else ""
            way_out = "send fewer or smaller images" if images else "send truncate=true to cut the prompt's start"
            raise runtime.BadRequest(
                f"input 'text_input' has {len(ids)} tokens{counted} and max_tokens is {max_tokens}, more than the "
                f"model's context length of {self.context} tokens: shorten the prompt"
                + (f", ask for at most {self.context - len(ids)} tokens" if len(ids) < self.context else "")
                + f", or {way_out}."
            )
        return ids[over:], max_tokens, over

    def chat_prompt(self, text, tools=None, kwargs=None):
        """The prompt of chat messages (with ``tools`` offered: rendered by a template that takes them, else in the
        generic tool prompt; ``runtime.tools``); ``kwargs``: the request's chat_template_kwargs."""
        try:
            messages = json.loads(text)
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and ("content" in m or "tool_calls" in m) for m in messages
            ):
                raise ValueError("not a list of messages")
        except ValueError as error:
            raise runtime.BadRequest(
                f'input \'text_input\' must be a JSON list of {{"role", "content"}} messages with chat=true ({error}).'
            ) from error
        if not getattr(self.tokenizer, "chat_template", None):  # the caller's mistake: a 400 naming the way out
            raise runtime.BadRequest(
                "input 'chat' asks for the model's chat template, and this model has none: send a plain prompt "
                "(chat=false; over OpenAI's API, /v1/completions)."
            )
        takes_tools = "tools" in str(self.tokenizer.chat_template)
        messages = runtime.tools.template_messages(messages, tools, takes_tools)
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools if takes_tools else None,
                tokenize=False,
                add_generation_prompt=True,
                **(kwargs or {}),
            )
        except Exception as error:  # the template's own rule (roles that must alternate, ...): the caller's to fix
            raise runtime.BadRequest(
                f"input 'text_input': the model's chat template refused the messages ({error})."
            ) from error

    # ------------------------------------------------------------------ the decode loop

    def loop(self):
        while not self.stopping:
            with self.lock:
                idle = not self.running and not self.waiting
            if idle:
                self.wake.wait(timeout=0.5)
                self.wake.clear()
                continue
            self.iterate()

    def iterate(self):
        """One step; if the model itself fails, every stream it was computing ends with the error."""
        try:
            self.step()
        except Exception as error:
            for sequence in [*self.running, *self.admitting]:
                if not sequence.done:
                    self.finish(sequence, "error", f"generation failed: {error}")
            self.engine.clear()
            self.running, self.admitting = [], []

    def step(self):
        """One iteration: drop the cancelled, admit what the engine has room for, one engine step."""
        self.drop_cancelled()
        with self.lock:
            self.admitting = self.engine.take(self.waiting)
        prompt, steps = self.engine.step(self.admitting)
        self.admitting, self.running = [], self.engine.running
        if self.warming:
            return
        self.metrics.prompt.increment(prompt)
        self.metrics.steps.increment(steps)
        self.metrics.running.set(len(self.running))
        self.metrics.waiting.set(len(self.waiting))

    def drop_cancelled(self):
        with self.lock:
            waiting = list(self.waiting)
        for sequence in [*waiting, *self.running]:
            if not sequence.done and sequence.cancelled():
                self.metrics.cancelled.increment(1)
                self.finish(sequence, "cancelled")
        with self.lock:
            self.waiting = collections.deque(s for s in self.waiting if not s.done)
        self.engine.remove_finished()
        self.running = self.engine.running

    # ------------------------------------------------------------------ tokens -> text

    def advance(self, sequence, token, logprob=None):
        """One token an engine computed for ``sequence``, with ``logprob`` (its log-probability and the
        alternatives') where the request asked for them."""
        now = time.monotonic()
        if self.warming:
            pass
        elif sequence.last_token_at is None:
            self.metrics.ttft.observe(now - sequence.arrived)
        else:
            self.metrics.itl.observe(now - sequence.last_token_at)
        sequence.last_token_at = now
        if token in self.eos_ids:
            self.finish(sequence, "stop")
            return
        if not self.warming:
            self.metrics.generated.increment(1)
        if sequence.phase == "undecided":  # its first token opened its thinking, or began its answer
            sequence.phase = "thinking" if token == self.think_ids[0] else "content"
        elif sequence.phase == "thinking" and token == self.think_ids[1]:
            sequence.phase = "content"
            sequence.reply.reasoning_tokens += 1  # its end marker
        if sequence.phase == "thinking":
            sequence.reply.reasoning_tokens += 1
        sequence.reply.add(token, logprob if sequence.logprobs is not None else None)
        if not sequence.done and len(sequence.tokens) >= sequence.max_tokens:
            self.finish(sequence, "length")

    def finish(self, sequence, reason, error=None):
        sequence.reply.finish(reason, error)
