"""The text-generation template as it was before continuous batching (tritonhf 0.1, static batching).

Kept only so that `make bench` can measure it beside the current template in the same run;
bench/run.py copies it over a gallery model's model.py. Not part of the gallery.

Streaming text generation on Triton's Python backend (tritonhf gallery template).

The model is *decoupled*: instead of returning one response per request, ``execute``
sends any number of responses through each request's ``response_sender`` (one per chunk
of text) and then a final empty one flagged COMPLETE_FINAL.

Batching: the prompts of all requests that arrived together are left-padded into one
batch and decoded step by step with one forward pass per token for the whole batch
(with the key/value cache). Each request keeps its own settings and stops on its own
(end-of-sequence token, ``max_tokens`` or a stop string).

Tensor names follow Triton's generate extension, so this works with curl:
    curl -N localhost:8000/v2/models/NAME/generate_stream -d '{"text_input": "Hi", "max_tokens": 20}'

Inputs:  text_input (the prompt; with chat=true, a JSON list of {"role", "content"} messages),
         optional max_tokens, temperature (0 = greedy), top_p, seed, stop (strings), chat.
Outputs: text_output, one chunk per response.
"""

import inspect
import json

import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModelForCausalLM


class Job:
    """One request being answered: its prompt, settings, and what was sent so far."""

    def __init__(self, sender, prompt_ids, max_tokens, temperature, top_p, seed, stops):
        self.sender = sender
        self.prompt_ids = prompt_ids
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.stops = stops
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.tokens = []
        self.sent = ""
        self.done = False


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.device = runtime.device(args, params)
        self.tokenizer = runtime.load_tokenizer(args, params, padding_side="left")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = runtime.load_model(AutoModelForCausalLM, args, params, self.device)
        # transformers 5 renamed the key/value cache argument from past_key_values to cache.
        self.cache_argument = (
            "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        )
        self.default_max_tokens = int(params.get("max_tokens", "128"))
        self.max_tokens_limit = int(params.get("max_tokens_limit", "2048"))
        self.max_length = runtime.max_length(self.tokenizer, self.model.config, default=2048)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self.run([self.warm_up_job()])

    def warm_up_job(self):
        ids = self.tokenizer("Hello", add_special_tokens=True)["input_ids"]
        return Job(None, ids, 2, 0.0, 1.0, None, [])

    # ------------------------------------------------------------------ requests -> jobs

    def job(self, request):
        prompts = runtime.decode_texts(runtime.input_array(request, "text_input"), "text_input")
        if len(prompts) != 1:
            raise runtime.BadRequest(
                f"send one text_input per request, not {len(prompts)}; one stream answers one prompt."
            )
        prompt = prompts[0]
        chat = runtime.optional_scalar(request, "chat", False, lambda v: True, "a boolean")
        if chat:
            prompt = self.chat_prompt(prompt)
        max_tokens = runtime.optional_scalar(
            request,
            "max_tokens",
            self.default_max_tokens,
            lambda v: 1 <= v <= self.max_tokens_limit,
            f"between 1 and {self.max_tokens_limit}",
        )
        temperature = runtime.optional_scalar(request, "temperature", 0.0, lambda v: 0 <= v <= 100, "from 0 to 100")
        top_p = runtime.optional_scalar(request, "top_p", 1.0, lambda v: 0 < v <= 1, "in (0, 1]")
        seed = runtime.optional_scalar(request, "seed", None, lambda v: v >= 0, "a non-negative integer")
        stops = runtime.optional_strings(request, "stop") or []
        # Keep room for the answer inside the model's context: the prompt's *start* is cut.
        budget = max(1, self.max_length - max_tokens)
        ids = self.tokenizer(prompt, add_special_tokens=not chat)["input_ids"][-budget:]
        if not ids:  # an empty prompt: start from the beginning-of-text token
            ids = [
                self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id
            ]
        return Job(request.get_response_sender(), ids, max_tokens, temperature, top_p, seed, stops)

    def chat_prompt(self, text):
        try:
            messages = json.loads(text)
            if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages):
                raise ValueError("not a list of messages")
        except ValueError as error:
            raise runtime.BadRequest(
                f'with chat=true, text_input must be a JSON list of {{"role", "content"}} messages ({error}).'
            ) from error
        if not getattr(self.tokenizer, "chat_template", None):
            raise runtime.BadRequest("this model has no chat template; send a plain prompt with chat=false.")
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def execute(self, requests):
        jobs = []
        for request in requests:
            try:
                jobs.append(self.job(request))
            except runtime.BadRequest as error:
                sender = request.get_response_sender()
                sender.send(runtime.error_response(str(error)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if jobs:
            self.run(jobs)
        return None  # decoupled: every answer went through a response sender

    # ------------------------------------------------------------------ the decode loop

    def run(self, jobs):
        """Generate for all jobs at once: one forward pass per step for the whole batch."""
        width = max(len(job.prompt_ids) for job in jobs)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(job.prompt_ids)) + job.prompt_ids for job in jobs])
        attention = torch.tensor([[0] * (width - len(job.prompt_ids)) + [1] * len(job.prompt_ids) for job in jobs])
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = None
        try:
            for _ in range(max(job.max_tokens for job in jobs)):
                with torch.inference_mode():
                    output = self.model(
                        input_ids=input_ids,
                        attention_mask=attention,
                        position_ids=positions,
                        use_cache=True,
                        **{self.cache_argument: cache},
                    )
                cache = getattr(output, self.cache_argument)
                logits = output.logits[:, -1, :].float()
                next_ids = [self.pick(job, logits[row]) for row, job in enumerate(jobs)]
                for job, token in zip(jobs, next_ids, strict=False):
                    if not job.done:
                        self.advance(job, token)
                if all(job.done for job in jobs):
                    break
                input_ids = torch.tensor([[token] for token in next_ids], device=self.device)
                attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
                positions = positions[:, -1:] + 1
        except Exception as error:  # a failure mid-stream must end every stream, with the error
            for job in jobs:
                if not job.done:
                    self.finish(job, error=f"generation failed: {error}")
            raise
        for job in jobs:
            if not job.done:
                self.finish(job)

    def pick(self, job, logits):
        """The next token: greedy at temperature 0, else sampled with top-p (nucleus)."""
        if job.done or job.temperature == 0:
            return int(torch.argmax(logits))
        probabilities = torch.softmax(logits / job.temperature, dim=-1)
        if job.top_p < 1:
            sorted_probs, order = torch.sort(probabilities, descending=True)
            keep = sorted_probs.cumsum(-1) - sorted_probs < job.top_p
            probabilities = torch.zeros_like(probabilities).scatter(0, order[keep], sorted_probs[keep])
        return int(torch.multinomial(probabilities.cpu(), 1, generator=job.generator))

    def advance(self, job, token):
        if token in self.eos_ids:
            self.finish(job)
            return
        job.tokens.append(token)
        text = self.tokenizer.decode(job.tokens, skip_special_tokens=True)
        for stop in job.stops:
            if stop in text:
                self.send(job, text[: text.index(stop)])
                self.finish(job)
                return
        # Hold back a partial UTF-8 character, and text that may be the start of a stop string.
        safe = len(text.rstrip("\ufffd"))
        for stop in job.stops:
            for size in range(len(stop) - 1, 0, -1):
                if text[:safe].endswith(stop[:size]):
                    safe -= size
                    break
        self.send(job, text[:safe])
        if len(job.tokens) >= job.max_tokens:
            self.finish(job)

    def send(self, job, text):
        chunk = text[len(job.sent) :]
        if chunk and job.sender is not None:
            job.sender.send(pb_utils.InferenceResponse(output_tensors=[runtime.string_tensor("text_output", [chunk])]))
        job.sent = text if len(text) > len(job.sent) else job.sent

    def finish(self, job, error=None):
        if not error and job.tokens:
            text = self.tokenizer.decode(job.tokens, skip_special_tokens=True)
            ended_on_stop = any(stop in text for stop in job.stops)
            if not ended_on_stop:
                self.send(job, text)  # what was held back
        job.done = True
        if job.sender is None:
            return
        if error:
            job.sender.send(
                runtime.error_response(error, invalid_input=False), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        else:
            job.sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
