"""Extractive question answering on Triton's Python backend (tritonhf gallery template).

Each row is a question and its context. The context is read in overlapping windows of the
model's limit (``stride`` tokens of overlap, config parameter, default a quarter of it), so an
answer far into a long text is found. Every window of every row goes through forward passes
grouped by length under a token budget. In each window, start and end scores of the
context's tokens become probabilities; a span (start <= end, at most ``max_answer_tokens``
long) scores start x end probability; the best spans of all windows, best first, are mapped
back to character offsets into the original context.

Inputs:  QUESTION [n, 1] BYTES, CONTEXT [n, 1] BYTES, optional TOP_K [n, 1] INT32 (default 1).
Outputs: ANSWER, SCORE, START, END [n, k] (padded with "", 0 and -1 where a row has fewer).
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModelForQuestionAnswering

CANDIDATES = 20  # best starts and ends considered per window


class TritonPythonModel(runtime.PipelinedModel):
    def initialize(self, args):
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModelForQuestionAnswering)
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.stride = runtime.int_parameter(params, "stride", max(1, self.max_length // 4))
        self.max_answer = runtime.int_parameter(params, "max_answer_tokens", 30)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        self.logits([dict(self.tokenizer("Who?", "Warm-up in Paris"))])
        # Each batch is computed on the pipeline's worker while Triton forms the next (runtime.Pipeline).
        self.pipeline = runtime.Pipeline()

    def logits(self, windows):
        """(start, end) logits of each window, without its padding, from one forward pass."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            output = self.model(**runtime.model_inputs(self.model, batch))
        starts, ends = output.start_logits.float().cpu().numpy(), output.end_logits.float().cpu().numpy()
        return [(starts[i, : len(w["input_ids"])], ends[i, : len(w["input_ids"])]) for i, w in enumerate(windows)]

    def spans(self, window, logits):
        """(score, start char, end char) of the best spans of one window's context tokens."""
        context = np.array([sequence == 1 for sequence in window["sequence_ids"]])
        if not context.any():
            return []
        found = []
        probabilities = []
        for values in logits:
            masked = np.where(context, values, -np.inf)
            exp = np.exp(masked - masked.max())
            probabilities.append(exp / exp.sum())
        start_p, end_p = probabilities
        starts = np.argsort(-start_p)[:CANDIDATES]
        ends = np.argsort(-end_p)[:CANDIDATES]
        offsets = window["offset_mapping"]
        for s in starts:
            for e in ends:
                if context[s] and context[e] and s <= e < s + self.max_answer:
                    found.append((float(start_p[s] * end_p[e]), int(offsets[s][0]), int(offsets[e][1])))
        return found

    def answer_batch(self, requests):
        batch = runtime.Batch(requests, "QUESTION")
        contexts = batch.strings("CONTEXT")
        most = runtime.ANSWERS_MAX
        top_k = batch.option("TOP_K", 1, lambda k: 1 <= k <= most, f"from 1 to {most}")
        for row in batch.live_rows():
            if not batch.texts[row].strip():
                batch.fail_row(row, "input 'QUESTION' is empty: ask something.")
            elif not contexts[row].strip():
                batch.fail_row(row, "input 'CONTEXT' is empty: send the text the answer is in.")
        items = [(row, batch.texts[row], contexts[row]) for row in batch.live_rows()]
        encoded = runtime.encode(
            self.tokenizer, items, self.max_length, windows=True, stride=self.stride, return_offsets_mapping=True
        )
        for row in encoded.first_too_long:
            batch.fail_row(
                row, f"input 'QUESTION' is too long: it leaves no room for the context in {self.max_length} tokens."
            )
        windows = [(row, i) for row in batch.live_rows() for i in range(len(encoded.features[row]))]
        lengths = {p: len(encoded.features[row][i]["input_ids"]) for p, (row, i) in enumerate(windows)}
        found: dict = {}
        for group in runtime.budget_groups(lengths, self.budget):
            features = [encoded.features[windows[p][0]][windows[p][1]] for p in group]
            for p, logits in zip(group, self.logits(features), strict=True):
                row, index = windows[p]
                found.setdefault(row, []).extend(self.spans(encoded.features[row][index], logits))

        def answer(span):
            answers = []
            for row in span:
                best: dict = {}
                for score, start, end in found.get(row, []):  # the same span seen by two windows counts once
                    best[(start, end)] = max(score, best.get((start, end), 0.0))
                ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[: top_k[row]]
                answers.append([(contexts[row][s:e], score, s, e) for (s, e), score in ranked])
            width = max(max((len(a) for a in answers), default=0), 1)
            text = [[a[0] for a in row] + [""] * (width - len(row)) for row in answers]
            scores = np.array([[a[1] for a in row] + [0.0] * (width - len(row)) for row in answers], dtype=np.float32)
            starts = np.array([[a[2] for a in row] + [-1] * (width - len(row)) for row in answers], dtype=np.int32)
            ends = np.array([[a[3] for a in row] + [-1] * (width - len(row)) for row in answers], dtype=np.int32)
            tensors = [
                runtime.string_matrix("ANSWER", text),
                runtime.float_tensor("SCORE", scores),
                pb_utils.Tensor("START", starts),
                pb_utils.Tensor("END", ends),
            ]
            return pb_utils.InferenceResponse(output_tensors=tensors)

        return batch.respond(answer)
