"""Text classification on Triton's Python backend (tritonhf gallery template).

Triton calls ``execute`` with a *list* of requests (dynamic batching gathers the
requests that arrived while the model was busy). This template:

1. gathers the texts of all requests into one list,
2. runs one tokenizer call and one forward pass over all of them,
3. splits the scores back so that each request gets exactly its own rows.

Inputs:  TEXT [n, 1] BYTES, optional TOP_K [n, 1] INT32 (labels to return, default all).
Outputs: LABEL, SCORE (the best label per text) and LABELS, SCORES (best first).
Labels come from the model's ``id2label``; multi-label models use a sigmoid per label.
"""

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification

from tritonhf.gallery import runtime


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.device = runtime.device(args, params)
        self.tokenizer = runtime.load_tokenizer(args, params)
        # PyTorch, or ONNX Runtime when added with --backend onnx (here, or Triton's onnxruntime
        # backend running model.onnx as another model): the same call either way.
        self.model = runtime.load_model(AutoModelForSequenceClassification, args, params, self.device)
        config = self.model.config
        self.labels = [config.id2label[index] for index in range(config.num_labels)]
        self.multi_label = config.problem_type == "multi_label_classification"
        self.max_length = runtime.max_length(self.tokenizer, config)
        if runtime.forward_is_local(self.model):  # not when the forward pass is another model (native ONNX)
            self.scores(["Warm-up so that the first real request is not slow."])

    def scores(self, texts):
        """Probabilities [len(texts), num_labels] from one forward pass."""
        batch = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            logits = self.model(**batch).logits.float()
        probabilities = torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=-1)
        return probabilities.cpu().numpy()

    def execute(self, requests):
        gathered = runtime.gather_texts(requests, "TEXT")
        scores = self.scores(gathered.texts) if gathered.texts else np.zeros((0, len(self.labels)))

        def answer(request, rows):
            top_k = runtime.optional_scalar(
                request, "TOP_K", len(self.labels), lambda k: k >= 1, "a positive number of labels"
            )
            # LABEL/SCORE: the best label per text; LABELS/SCORES: the top_k best, best first.
            return runtime.ranked_labels_response(scores[rows], self.labels, top_k)

        return runtime.respond(requests, gathered, answer)
