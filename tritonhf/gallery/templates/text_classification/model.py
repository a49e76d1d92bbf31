"""Text classification on Triton's Python backend (tritonhf gallery template).

Triton calls ``execute`` with a *list* of requests (dynamic batching gathers the
requests that arrived while the model was busy), each with one or more rows. This template:

1. gathers the rows of all requests into one list and reads each row's own options,
2. tokenizes each row once, cut to the model's limit (or refused, with TRUNCATE=false),
3. runs forward passes over rows grouped by length under a token budget,
4. answers each request with exactly its own rows.

Inputs:  TEXT [n, 1] BYTES, optional TOP_K [n, 1] INT32 (labels to return, default all),
         optional TRUNCATE [n, 1] BOOL (default true), optional TEXT_PAIR [n, 1] BYTES (a
         second text read with the first, as NLI and cross-encoder models take; "" for none).
Outputs: LABEL, SCORE (the best label per text), LABELS, SCORES (best first),
         TRUNCATED (the text was cut to the model's limit).
Labels come from the model's ``id2label``. Scores are what transformers' text-classification pipeline gives:
a sigmoid per label for a multi-label model and for a single output (a score head), the raw value for a
regression model, a softmax over the labels otherwise.
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModelForSequenceClassification


class TritonPythonModel(runtime.PipelinedModel):
    def initialize(self, args):
        # PyTorch, or ONNX Runtime when added with --backend onnx (here, or Triton's onnxruntime
        # backend running model.onnx as another model): the same call either way.
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModelForSequenceClassification)
        config = self.model.config
        self.labels = [config.id2label[index] for index in range(config.num_labels)]
        if config.problem_type == "regression":
            self.scores = lambda logits: logits
        elif config.problem_type == "multi_label_classification" or config.num_labels == 1:
            self.scores = torch.sigmoid
        else:
            self.scores = lambda logits: torch.softmax(logits, dim=-1)
        self.max_length = runtime.max_length(self.tokenizer, config)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        if runtime.forward_is_local(self.model):  # not when the forward pass is another model (native ONNX)
            self.probabilities([dict(self.tokenizer("Warm-up so that the first real request is not slow."))])
        # Each batch is computed on the pipeline's worker while Triton forms the next (runtime.Pipeline).
        self.pipeline = runtime.Pipeline()

    def probabilities(self, windows):
        """Scores [len(windows), num_labels] from one forward pass."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            logits = self.model(**runtime.model_inputs(self.model, batch)).logits.float()
        return self.scores(logits).cpu().numpy()

    def answer_batch(self, requests):
        batch = runtime.Batch(requests, "TEXT")
        top_k = batch.option("TOP_K", len(self.labels), lambda k: k >= 1, "a positive number of labels")
        truncate = batch.option("TRUNCATE", True)
        pairs = batch.option("TEXT_PAIR", "")  # a row's second text (NLI, cross-encoders), "" for none
        encoded = runtime.encode_rows(self.tokenizer, batch, self.max_length, truncate, pairs=pairs)
        rows = batch.live_rows()  # without the rows of requests refused for being too long
        scores = np.zeros((len(batch.texts), len(self.labels)), dtype=np.float32)
        for group in runtime.budget_groups({row: encoded.length(row) for row in rows}, self.budget):
            scores[group] = self.probabilities([encoded.features[row][0] for row in group])

        def answer(span):
            ranked = [runtime.ranked_labels(scores[row], self.labels, top_k[row]) for row in span]
            outputs = runtime.ranked_labels_outputs(ranked)  # LABEL, SCORE, LABELS, SCORES
            outputs.append(runtime.bool_tensor("TRUNCATED", [encoded.truncated[row] for row in span]))
            return pb_utils.InferenceResponse(output_tensors=outputs)

        return batch.respond(answer)
