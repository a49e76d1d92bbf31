"""Zero-shot classification by embeddings on Triton's Python backend (tritonhf gallery template).

Any sentence-embedding model becomes a classifier: each candidate label is put into a
sentence (parameter ``hypothesis_template``, e.g. "This is a {} review."), embedded once
and cached; each text is scored by cosine similarity against the label sentences, and
``softmax(similarity * scale)`` turns the similarities into scores that sum to 1.

Inputs:  TEXT [n, 1] BYTES, optional CANDIDATE_LABELS [n, k] BYTES (default: parameter ``labels``).
Outputs: LABEL, SCORE (the best label per text), LABELS, SCORES (all labels, best first).
"""

import numpy as np
import torch
from transformers import AutoModel

from tritonhf.gallery import runtime


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.device = runtime.device(args, params)
        self.tokenizer = runtime.load_tokenizer(args, params)
        # PyTorch, or ONNX Runtime when added with --backend onnx (here, or Triton's onnxruntime
        # backend running model.onnx as another model): the same call either way.
        self.model = runtime.load_model(AutoModel, args, params, self.device)
        self.pooling = params.get("pooling", "mean")
        self.template = params.get("hypothesis_template", "This example is {}.")
        self.scale = float(params.get("scale", "20"))
        self.labels = [label.strip() for label in params.get("labels", "").split(",") if label.strip()]
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.label_cache = {}
        if self.labels and runtime.forward_is_local(self.model):  # (not when it is another model: native ONNX)
            self.label_vectors(self.labels)  # embeds the default labels now: that is the warm-up

    def embed(self, texts):
        """L2-normalised pooled vectors [len(texts), dim] from one forward pass."""
        batch = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            tokens = self.model(**batch).last_hidden_state.float()
            vectors = runtime.pool(tokens, batch["attention_mask"], self.pooling)
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        return vectors.cpu().numpy()

    def label_vectors(self, labels):
        missing = [label for label in labels if label not in self.label_cache]
        if missing:
            vectors = self.embed([self.template.format(label) for label in missing])
            self.label_cache.update(zip(missing, vectors, strict=False))
        return np.stack([self.label_cache[label] for label in labels])

    def execute(self, requests):
        gathered = runtime.gather_texts(requests, "TEXT")
        vectors = self.embed(gathered.texts) if gathered.texts else None

        def answer(request, rows):
            labels = runtime.optional_strings(request, "CANDIDATE_LABELS") or self.labels
            if not labels:
                raise runtime.BadRequest(
                    "no candidate labels: send CANDIDATE_LABELS, or add the model with --labels a,b,c."
                )
            logits = vectors[rows] @ self.label_vectors(labels).T * self.scale
            scores = np.exp(logits - logits.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
            return runtime.ranked_labels_response(scores, labels)  # LABEL, SCORE, LABELS, SCORES

        return runtime.respond(requests, gathered, answer)
