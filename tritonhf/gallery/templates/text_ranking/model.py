"""Reranking with a cross-encoder on Triton's Python backend (tritonhf gallery template).

Each batch row is one query with its documents. Every (query, document) pair of every row
of every request is tokenized once (the document is cut first when a pair is too long),
grouped by length under a token budget, and scored by the cross-encoder; each row then
gets its documents' scores in their order, and ORDER, the document indices best first.

Scores: a model with one output (the usual cross-encoder, e.g. ms-marco MiniLM) gives
sigmoid(logit); a model with two labels gives the probability of the second ("relevant").

Inputs:  QUERY [n, 1] BYTES, DOCUMENTS [n, k] BYTES (row j holds query j's documents; pad
         shorter lists with empty strings), optional TRUNCATE [n, 1] BOOL (default true).
Outputs: SCORES [n, k] FP32, ORDER [n, k] INT32 (-1 for padding), TRUNCATED [n, k] BOOL.
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModelForSequenceClassification


class TritonPythonModel(runtime.PipelinedModel):
    def initialize(self, args):
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModelForSequenceClassification)
        self.labels = self.model.config.num_labels
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        if runtime.forward_is_local(self.model):
            self.relevance([dict(self.tokenizer("warm-up query", "a warm-up document"))])
        # Each batch is computed on the pipeline's worker while Triton forms the next (runtime.Pipeline).
        self.pipeline = runtime.Pipeline()

    def relevance(self, windows):
        """One relevance score per (query, document) pair, from one forward pass."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            logits = self.model(**runtime.model_inputs(self.model, batch)).logits.float()
        scores = torch.sigmoid(logits[:, 0]) if self.labels == 1 else torch.softmax(logits, dim=-1)[:, 1]
        return scores.cpu().numpy()

    def answer_batch(self, requests):
        batch = runtime.Batch(requests, "QUERY")
        documents = batch.string_lists("DOCUMENTS")
        for row in batch.live_rows():
            if not documents[row]:
                batch.fail_row(row, "input 'DOCUMENTS' is missing or empty: send at least one document per query.")
        truncate = batch.option("TRUNCATE", True)
        pairs = [
            ((row, j), batch.texts[row], doc) for row in batch.live_rows() for j, doc in enumerate(documents[row] or [])
        ]
        encoded = runtime.encode(self.tokenizer, pairs, self.max_length, lambda key: bool(truncate[key[0]]))
        for row, _ in encoded.too_long:
            batch.fail_row(row, runtime.too_long_message(self.max_length, "DOCUMENTS"))
        for row, _ in encoded.first_too_long:
            batch.fail_row(
                row, f"input 'QUERY' is too long: it leaves no room for a document in {self.max_length} tokens."
            )
        live = set(batch.live_rows())
        keys = [key for key, _, _ in pairs if key[0] in live and key in encoded.features]
        scores: dict = {}
        for group in runtime.budget_groups({key: encoded.length(key) for key in keys}, self.budget):
            scores.update(zip(group, self.relevance([encoded.features[key][0] for key in group]), strict=True))

        def answer(span):
            width = max(len(documents[row]) for row in span)
            table = np.zeros((len(span), width), dtype=np.float32)
            order = np.full((len(span), width), -1, dtype=np.int32)
            cut = np.zeros((len(span), width), dtype=np.bool_)
            for i, row in enumerate(span):
                count = len(documents[row])
                table[i, :count] = [scores[(row, j)] for j in range(count)]
                order[i, :count] = np.argsort(-table[i, :count], kind="stable")
                cut[i, :count] = [encoded.truncated[(row, j)] for j in range(count)]
            tensors = [
                runtime.float_tensor("SCORES", table),
                pb_utils.Tensor("ORDER", order),
                pb_utils.Tensor("TRUNCATED", cut),
            ]
            return pb_utils.InferenceResponse(output_tensors=tensors)

        return batch.respond(answer)
