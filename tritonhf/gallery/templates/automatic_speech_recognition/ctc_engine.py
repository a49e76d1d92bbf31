"""CTC speech models (wav2vec2, HuBERT ...) for the speech template: one forward pass and a collapse.

A CTC model has no language, task, prompt or sampling: a request that asks for one is a 400,
never ignored. It normalises each file on its own and a padded batch would change every
shorter row (its convolutions and group norms see the padding), so every file runs alone. Files
are read as transformers' pipeline reads them with ``chunk_length_s=30, stride_length_s=5``:
windows of 30 s overlapping by 5 s on each side, each window's argmax tokens kept without
their overlap, joined and collapsed once; a short file is one window. Timestamps: one segment
per word, from the tokenizer's word offsets.
"""

import numpy as np
import segments
import torch
import tritonhf_runtime as runtime
from transformers import AutoModelForCTC

CHUNK_SECONDS = 30
STRIDE_SECONDS = 5


class CtcEngine:
    max_tokens = 0  # one token per frame: no limit to set

    def __init__(self, args, params, processor, config, streaming):
        self.device = runtime.device(args, params)
        self.model = runtime.load_model(AutoModelForCTC, args, params, self.device)
        if params.get(runtime.PARAM_QUANTIZE) == "int8":
            self.model = runtime.int8_linear_layers(self.model)
        self.features = processor.feature_extractor
        self.tokenizer = processor.tokenizer
        self.rate = self.features.sampling_rate
        self.ratio = self.model.config.inputs_to_logits_ratio  # input samples per output frame

    @staticmethod
    def check(options):
        """BadRequest for the option a CTC model cannot honour."""
        if options["language"]:
            raise runtime.BadRequest("is given, but a CTC model has no language option (it reads one language).",
                                     "LANGUAGE")  # fmt: skip
        if options["task"] != "transcribe":
            raise runtime.BadRequest(f"is {options['task']!r}: a CTC model only transcribes.", "TASK")
        if options["prompt"]:
            raise runtime.BadRequest("is given, but a CTC model takes no prompt.", "PROMPT")
        if options["temperature"] > 0.0:
            raise runtime.BadRequest("is above 0, but a CTC model does not sample.", "TEMPERATURE")
        if options["max_tokens"] is not None:
            raise runtime.BadRequest(
                "is given, but a CTC model emits one token per frame (no limit to set).", "MAX_TOKENS"
            )

    def prepare(self, samples, options):
        return {**options, "samples": samples, "duration": len(samples) / self.rate, "language": ""}

    def transcribe(self, rows, parts=None):
        """Each row alone: its text, and with timestamps one segment per word."""
        results = {}
        for row, item in rows.items():
            text, words = self.read(item["samples"], item["timestamps"])
            if words is None:
                results[row] = segments.whole_file(item, text)
            else:
                found = [segments.segment(start, end, word, item["duration"]) for start, end, word in words]
                results[row] = segments.result(item, text, found)
            if parts is not None:
                parts.whole(row, results[row])
        return results

    def close(self):
        """Nothing held past the stub."""

    def read(self, samples, timestamps):
        """(text, [(start, end, word)] or None) for one file."""
        tokens = np.concatenate([part for part in self._windows(samples)])
        text = self.tokenizer.decode(tokens, skip_special_tokens=False)
        if not timestamps:
            return text, None
        offsets = self.tokenizer.decode(tokens, skip_special_tokens=False, output_word_offsets=True)["word_offsets"]
        to_seconds = self.ratio / self.rate
        return text, [(o["start_offset"] * to_seconds, o["end_offset"] * to_seconds, o["word"]) for o in offsets]

    def _windows(self, samples):
        """Each window's argmax tokens without its overlap with the neighbours (the pipeline's chunk_iter)."""
        length, left, right = CHUNK_SECONDS * self.rate, STRIDE_SECONDS * self.rate, STRIDE_SECONDS * self.rate
        for start in range(0, len(samples), length - left - right):
            chunk = samples[start : start + length]
            is_last = start + length >= len(samples)
            stride_left, stride_right = (0 if start == 0 else left), (0 if is_last else right)
            if len(chunk) > stride_left:
                inputs = self.features(chunk, sampling_rate=self.rate, return_tensors="pt", return_attention_mask=True)
                with torch.inference_mode():
                    logits = self.model(
                        input_values=inputs["input_values"].to(self.device, self.model.dtype),
                        attention_mask=inputs["attention_mask"].to(self.device),
                    ).logits
                tokens = logits.argmax(dim=-1)[0].cpu().numpy()
                frames = round(len(chunk) / self.ratio)  # the pipeline's rescale_stride
                cut_left = round(stride_left / len(chunk) * frames)
                cut_right = round(stride_right / len(chunk) * frames)
                yield tokens[cut_left : frames - cut_right]
            if is_last:
                break


ENGINE = CtcEngine
