"""Whisper on PyTorch (transformers' ``generate``) for the speech template: ``--backend pytorch``, the default.

Added with ``--quantize int8`` (parameter ``tritonhf.quantize``), the Linear layers run in int8 with
a scale per token (runtime.int8), so rows are still batched and each answer still does not depend
on the batch. A file longer than one window is read by ``generate`` itself (transformers' long-form
decoding, window after window, each starting where the last complete segment ended); on a streamed
model it is read one window at a time by ``longform.py``, the same loop, so each window's segments
are sent as it ends. A sampling row runs alone, seeded once for the whole file.
"""

import longform
import numpy as np
import torch
import tritonhf_runtime as runtime
from transformers import AutoModelForSpeechSeq2Seq
from whisper_base import WhisperEngine


class PyTorchEngine(WhisperEngine):
    def __init__(self, args, params, processor, config, streaming):
        self.device = runtime.device(args, params)
        self.model = runtime.load_model(AutoModelForSpeechSeq2Seq, args, params, self.device)
        if params.get(runtime.PARAM_QUANTIZE) == "int8":
            self.model = runtime.int8_linear_layers(self.model)
        super().__init__(processor, self.model.generation_config, config, streaming)

    def detect(self, items):
        stacked = torch.from_numpy(self.stacked(items)).to(self.device, self.model.dtype)
        with torch.inference_mode():
            return self.model.detect_language(stacked).view(-1).tolist()

    def decode_group(self, items, max_new_tokens):
        return self.generate(items[0], self.stacked(items), max_new_tokens, return_timestamps=items[0]["timestamps"])

    def windowed(self, item):
        """A long file of a streamed model, whose windows are sent as they end (a plain model lets ``generate``
        read the whole file, the same answer in one call)."""
        return self.streaming and not self.asked and item["long"] is not None

    def alone(self, item, on_window=None):
        extra = self.sampling(item)
        try:
            return self.decode_alone(item, on_window, extra)
        except RuntimeError as error:
            # transformers samples in the logits' FP32: divided by a temperature near 0 (1e-38) they are infinite,
            # and torch's multinomial refuses the NaN probabilities that follow. The library has no answer there.
            if extra and "probability tensor contains" in str(error):
                raise runtime.BadRequest(
                    f"is {item['temperature']:g}, a temperature at which transformers' sampling fails (the logits "
                    "divided by it overflow FP32): use 0 for greedy or a larger temperature.",
                    "TEMPERATURE",
                ) from error
            raise

    def decode_alone(self, item, on_window, extra):
        if self.windowed(item):
            return self.long_reply(item, *self.read_windows(item, item["long"][0][0], on_window, extra))
        if item["long"] is None:
            found = self.generate(item, item["features"][None], item["max_tokens"],
                                  return_timestamps=item["timestamps"], **extra)[0]  # fmt: skip
            return self.reply(item, self.kept(item, found))
        features, mask = item["long"]
        out = self.run(item, features, item["max_tokens"], return_timestamps=True, return_segments=True,
                       attention_mask=torch.from_numpy(mask).to(self.device), **extra)  # fmt: skip
        found = [(segment["start"], segment["end"], segment["tokens"].tolist()) for segment in out["segments"][0]]
        return self.long_reply(item, out["sequences"][0].tolist(), found)

    def generate(self, item, features, max_new_tokens, **extra):
        """Token ids per row of ``features`` [n, mels, frames] (the decoder's prompt not included)."""
        out = self.run(item, features, max_new_tokens, **extra)
        return out["sequences"] if isinstance(out, dict) else out

    def run(self, item, features, max_new_tokens, **extra):
        """``generate``'s own answer for ``features`` with a row's language, task and prompt, and ``extra``."""
        multilingual = self.multilingual
        options = {"language": item["language"] if multilingual else None, "task": item["task"] if multilingual
                   else None, "max_new_tokens": max_new_tokens, **extra}  # fmt: skip
        if item["prompt_ids"] is not None:
            options["prompt_ids"] = item["prompt_ids"].to(self.device)
        inputs = torch.from_numpy(np.ascontiguousarray(features)).to(self.device, self.model.dtype)
        with torch.inference_mode():
            return self.model.generate(input_features=inputs, **options)

    @staticmethod
    def sampling(item):
        """``generate``'s options for a row that samples (its seed set once for the whole file), else none."""
        if item["temperature"] <= 0.0:
            return {}
        torch.manual_seed(item["seed"])
        return {"do_sample": True, "temperature": item["temperature"]}

    def read_windows(self, item, features, on_window, extra):
        """A long file window after window (``longform.py``): ``generate`` on each window alone, one pass
        (``force_unique_generate_call``), the tokens after the decoder's prompt. The same tokens and segments as
        ``generate`` over the whole file, which runs the same loop but keeps every window to itself until the end."""
        lead = self.decoder_prompt(item, True)

        def decode(window):
            out = self.run(item, window[None], item["max_tokens"], return_timestamps=True,
                           force_unique_generate_call=True, return_dict_in_generate=True, **extra)  # fmt: skip
            sequence = out["sequences"][0].tolist()
            if sequence[: len(lead)] != lead:  # transformers changed what it returns: fail, never a wrong text
                raise RuntimeError(f"generate returned {sequence[: len(lead)]} before the text, not the prompt {lead}")
            return self.ended(sequence[len(lead) :])

        return longform.read(features, decode, self.first_timestamp, on_window)


ENGINE = PyTorchEngine
