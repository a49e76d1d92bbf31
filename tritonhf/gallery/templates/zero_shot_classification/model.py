"""Zero-shot classification by embeddings on Triton's Python backend (tritonhf gallery template).

Any sentence-embedding model becomes a classifier: each candidate label is put into a
sentence (parameter ``hypothesis_template``, e.g. "This is a {} review."), embedded once
and cached; each text is scored by cosine similarity against *its own row's* label
sentences, and ``softmax(similarity * scale)`` turns the similarities into scores that sum to 1.

Inputs:  TEXT [n, 1] BYTES, optional CANDIDATE_LABELS [n, k] BYTES (row j holds text j's labels;
         shorter lists are padded with empty strings; default: parameter ``labels``),
         optional TRUNCATE [n, 1] BOOL (default true).
Outputs: LABEL, SCORE (the best label per text), LABELS, SCORES (that row's labels, best first,
         padded with "" and 0 to the longest row), TRUNCATED [n, 1] BOOL.
"""

from collections import OrderedDict

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModel


class TritonPythonModel(runtime.PipelinedModel):
    def initialize(self, args):
        # PyTorch, or ONNX Runtime when added with --backend onnx (here, or Triton's onnxruntime
        # backend running model.onnx as another model): the same call either way.
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModel)
        self.pooling = params.get("pooling", "mean")
        self.template = params.get("hypothesis_template", "This example is {}.")
        self.scale = float(params.get("scale", "20"))
        self.labels = [label.strip() for label in params.get("labels", "").split(",") if label.strip()]
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        self.label_cache = OrderedDict()  # label -> vector, the most recently used last
        self.label_cache_size = runtime.int_parameter(params, "label_cache_size", 10000)
        if self.labels and runtime.forward_is_local(self.model):  # (not when it is another model: native ONNX)
            self.label_vectors(self.labels)  # embeds the default labels now: that is the warm-up
        # Each batch is computed on the pipeline's worker while Triton forms the next (runtime.Pipeline).
        self.pipeline = runtime.Pipeline()

    def embed(self, windows):
        """L2-normalised pooled vectors [len(windows), dim] from one forward pass."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            tokens = self.model(**runtime.model_inputs(self.tokenizer, batch)).last_hidden_state.float()
            vectors = runtime.pool(tokens, batch["attention_mask"], self.pooling)
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        return vectors.cpu().numpy()

    def label_vectors(self, labels):
        """Each label's sentence embedded alone (so a label's vector never depends on its company)."""
        for label in labels:
            if label in self.label_cache:
                self.label_cache.move_to_end(label)
                continue
            sentence = self.template.format(label)
            features = dict(self.tokenizer(sentence, truncation=True, max_length=self.max_length))
            self.label_cache[label] = self.embed([features])[0]
            if len(self.label_cache) > self.label_cache_size:
                self.label_cache.popitem(last=False)
        return np.stack([self.label_cache[label] for label in labels])

    def answer_batch(self, requests):
        batch = runtime.Batch(requests, "TEXT")
        candidates = batch.string_lists("CANDIDATE_LABELS")
        for row in batch.live_rows():
            if not (candidates[row] or self.labels):
                batch.fail_row(row, "no candidate labels: send CANDIDATE_LABELS, or add the model with --labels a,b,c.")
        truncate = batch.option("TRUNCATE", True)
        encoded = runtime.encode_rows(self.tokenizer, batch, self.max_length, truncate)
        rows = batch.live_rows()
        vectors: dict = {}
        for group in runtime.budget_groups({row: encoded.length(row) for row in rows}, self.budget):
            vectors.update(zip(group, self.embed([encoded.features[row][0] for row in group]), strict=True))

        def answer(span):
            ranked = []
            for row in span:
                labels = candidates[row] or self.labels
                logits = self.label_vectors(labels) @ vectors[row] * self.scale
                scores = np.exp(logits - logits.max())
                ranked.append(runtime.ranked_labels(scores / scores.sum(), labels, len(labels)))
            outputs = runtime.ranked_labels_outputs(ranked)  # LABEL, SCORE, LABELS, SCORES
            outputs.append(runtime.bool_tensor("TRUNCATED", [encoded.truncated[row] for row in span]))
            return pb_utils.InferenceResponse(output_tensors=outputs)

        return batch.respond(answer)
