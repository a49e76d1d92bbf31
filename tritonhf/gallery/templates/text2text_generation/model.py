"""Streaming text-to-text generation (summaries, translations) with an encoder-decoder model
(T5, BART, Marian) on Triton's Python backend (tritonhf gallery template).

Decoupled like text-generation, with the same tensor names: ``execute`` checks each request,
queues it and returns; a background thread answers through each request's response sender.

Batching in waves: when nothing is running, the waiting requests (up to ``max_running``) are
encoded together once; then one decoder step per token for all of them, and a finished or
cancelled row leaves the batch at once (its encoder states and cache go). Requests that arrive
during a wave start with the next one: admitting them mid-wave would need their encoder
states and cross-attention caches merged in, which this template does not do.

Decoding is greedy (temperature 0) or sampled with top-p, token by token; a model's beam-search
settings (num_beams, no_repeat_ngram_size, forced_eos_token_id) are not applied.

The config parameter ``prefix`` is put before each text (T5 wants "summarize: " or
"translate English to German: "). An input longer than the encoder takes is refused (400,
"context length") unless the request sends ``truncate=true``: then it keeps its start and the
last response says how many tokens went (``prompt_tokens_cut``).

Inputs:  text_input, optional max_tokens, temperature (0 = greedy), top_p, seed, stop, truncate.
Outputs: text_output per chunk; the last response also has finish_reason, prompt_tokens and
         completion_tokens (runtime.TextReply).
"""

import collections
import threading

import torch
import tritonhf_runtime as runtime
from transformers import AutoModelForSeq2SeqLM


class TritonPythonModel(runtime.DecoupledModel):
    def initialize(self, args):
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModelForSeq2SeqLM)
        self.prefix = params.get("prefix", "")
        self.max_input = runtime.max_length(self.tokenizer, self.model.config)
        self.default_max_tokens = runtime.int_parameter(params, "max_tokens", 128)
        # Beyond this many waiting requests a new one is refused at once (UNAVAILABLE), not queued without end.
        self.max_waiting = runtime.int_parameter(params, "max_waiting", 64)
        self.max_tokens_limit = runtime.int_parameter(params, "max_tokens_limit", 1024)
        # The decoder's own length where its positions are learned (BART, Marian ...; T5's are relative): an answer
        # past it would index beyond them, so neither a request nor the default goes further.
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if positions:
            self.max_tokens_limit = min(self.max_tokens_limit, positions - 1)
        self.default_max_tokens = min(self.default_max_tokens, self.max_tokens_limit)
        self.max_running = runtime.int_parameter(params, "max_running", 8)
        config = self.model.generation_config
        self.start_id = config.decoder_start_token_id
        if self.start_id is None:
            self.start_id = self.model.config.decoder_start_token_id
        eos = config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self.waiting: collections.deque = collections.deque()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self.run([runtime.Sequence(None, self.tokenizer, self.tokenizer("Hello")["input_ids"], max_tokens=2)])
        self.thread = threading.Thread(target=self.loop, name="tritonhf-text2text", daemon=True)
        self.thread.start()

    def sequence(self, request):
        texts = runtime.decode_texts(runtime.input_array(request, "text_input"), "text_input")
        if len(texts) != 1:
            raise runtime.BadRequest(f"send one text_input per request, not {len(texts)}.")
        max_tokens = runtime.read_max_tokens(request, self.default_max_tokens, self.max_tokens_limit)
        sampling = runtime.read_sampling(request)
        truncate = runtime.read_flag(request, "truncate")
        ids = self.tokenizer(self.prefix + texts[0])["input_ids"]
        cut = max(0, len(ids) - self.max_input)
        if cut and not truncate:
            raise runtime.BadRequest(
                f"input 'text_input' has {len(ids)} tokens, more than the model's context length of "
                f"{self.max_input} tokens: shorten it, or send truncate=true to keep its start."
            )
        if cut:  # cut the way the tokenizer cuts (its end goes; the end-of-text token stays)
            ids = self.tokenizer(self.prefix + texts[0], truncation=True, max_length=self.max_input)["input_ids"]
        return runtime.Sequence(request, self.tokenizer, ids, max_tokens=max_tokens, sampling=sampling, cut=cut)

    def loop(self):
        while not self.stopping:
            with self.lock:
                wave = [self.waiting.popleft() for _ in range(min(self.max_running, len(self.waiting)))]
            if not wave:
                self.wake.wait(timeout=0.5)
                self.wake.clear()
                continue
            try:
                self.run(wave)
            except Exception as error:  # the model itself failed: every stream of the wave ends with it
                for sequence in wave:
                    if not sequence.reply.done:
                        sequence.reply.finish("error", f"generation failed: {error}")

    def run(self, wave):
        """Encode the wave once, then one decoder step per token for the rows still running."""
        width = max(len(s.prompt_ids) for s in wave)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([s.prompt_ids + [pad] * (width - len(s.prompt_ids)) for s in wave], device=self.device)
        mask = torch.tensor(
            [[1] * len(s.prompt_ids) + [0] * (width - len(s.prompt_ids)) for s in wave], device=self.device
        )
        with torch.inference_mode():
            encoder = self.model.get_encoder()(input_ids=input_ids, attention_mask=mask)
        running = list(wave)
        tokens = torch.full((len(wave), 1), self.start_id, dtype=torch.long, device=self.device)
        cache = None
        while running:
            with torch.inference_mode():
                output = self.model(
                    encoder_outputs=encoder, attention_mask=mask, decoder_input_ids=tokens,
                    past_key_values=cache, use_cache=True,
                )  # fmt: skip
            cache = output.past_key_values
            logits = output.logits[:, -1, :].float()
            picked = []
            for row, sequence in enumerate(running):
                if sequence.cancelled():
                    sequence.reply.finish("cancelled")
                    picked.append(self.start_id)
                    continue
                token = runtime.pick_token(sequence, logits[row])
                picked.append(token)
                if token in self.eos_ids:
                    sequence.reply.finish("stop")
                    continue
                sequence.reply.add(token)
                if not sequence.reply.done and len(sequence.reply.tokens) >= sequence.max_tokens:
                    sequence.reply.finish("length")
            keep = [row for row, sequence in enumerate(running) if not sequence.reply.done]
            if len(keep) < len(running) and keep:
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                encoder.last_hidden_state = encoder.last_hidden_state[index]
                mask = mask[index]
            running = [running[row] for row in keep]
            tokens = torch.tensor([[picked[row]] for row in keep], dtype=torch.long, device=self.device)
