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
import torch

CHUNK_SECONDS = 30
STRIDE_SECONDS = 5


class CtcTranscriber:
    def __init__(self, model, processor, device):
        self.model, self.processor, self.device = model, processor, device
        self.features = processor.feature_extractor
        self.tokenizer = processor.tokenizer
        self.rate = self.features.sampling_rate
        self.ratio = model.config.inputs_to_logits_ratio  # input samples per output frame

    @staticmethod
    def refused(language, task, prompt, temperature, max_tokens):
        """The option a CTC model cannot honour, as (input, why), or None."""
        if language:
            return "LANGUAGE", "is given, but a CTC model has no language option (it reads one language)."
        if task != "transcribe":
            return "TASK", f"is {task!r}: a CTC model only transcribes."
        if prompt:
            return "PROMPT", "is given, but a CTC model takes no prompt."
        if temperature > 0.0:
            return "TEMPERATURE", "is above 0, but a CTC model does not sample."
        if max_tokens is not None:
            return "MAX_TOKENS", "is given, but a CTC model emits one token per frame (no limit to set)."
        return None

    def transcribe(self, samples, timestamps):
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
