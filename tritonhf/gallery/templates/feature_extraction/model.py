"""Sentence embeddings on Triton's Python backend (tritonhf gallery template).

The rows of all requests in one batch are tokenized once, grouped by length under a token
budget and run in as few forward passes as that allows; the token vectors are pooled into
one vector per row and split back per request.

Pooling is ``mean`` (average of the real tokens, padding masked out) or ``cls`` (the
first token). It comes from the config parameter ``pooling``, which `gallery add` reads
from a sentence-transformers ``1_Pooling/config.json`` when the model has one.

Inputs:  TEXT [n, 1] BYTES, optional NORMALIZE [n, 1] BOOL (default: parameter ``normalize``),
         optional TRUNCATE [n, 1] BOOL (default true: a too-long text is cut to the model's limit).
Outputs: EMBEDDING [n, dim] FP32, TRUNCATED [n, 1] BOOL, TOKENS [n, 1] INT32 (tokens used, for usage figures).
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModel


class TritonPythonModel:
    def initialize(self, args):
        # PyTorch, or ONNX Runtime when added with --backend onnx (here, or Triton's onnxruntime
        # backend running model.onnx as another model): the same call either way.
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModel)
        self.pooling = params.get("pooling", "mean")
        self.normalize = params.get("normalize", "true") == "true"
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        self.dim = self.model.config.hidden_size
        if runtime.forward_is_local(self.model):  # not when the forward pass is another model (native ONNX)
            self.pooled([dict(self.tokenizer("Warm-up so that the first real request is not slow."))])
        # The forward pass of one batch runs while the next one is read and tokenized.
        self.pipeline = runtime.Pipeline()

    def pooled(self, windows):
        """Pooled, not normalised vectors [len(windows), dim] from one forward pass."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            tokens = self.model(**runtime.model_inputs(self.tokenizer, batch)).last_hidden_state.float()
            vectors = runtime.pool(tokens, batch["attention_mask"], self.pooling)
        return vectors.cpu().numpy()

    def execute(self, requests):
        batch = runtime.Batch(requests, "TEXT")
        normalize = batch.option("NORMALIZE", self.normalize)
        truncate = batch.option("TRUNCATE", True)
        encoded = runtime.encode_rows(self.tokenizer, batch, self.max_length, truncate)

        def work():
            rows = batch.live_rows()
            vectors = np.zeros((len(batch.texts), self.dim), dtype=np.float32)
            for group in runtime.budget_groups({row: encoded.length(row) for row in rows}, self.budget):
                vectors[group] = self.pooled([encoded.features[row][0] for row in group])

            def answer(span):
                chunk = vectors[span.start : span.stop]
                wanted = np.array([bool(normalize[row]) for row in span])[:, None]
                norms = np.maximum(np.linalg.norm(chunk, axis=1, keepdims=True), 1e-12)
                chunk = np.where(wanted, chunk / norms, chunk)
                truncated = runtime.bool_tensor("TRUNCATED", [encoded.truncated[row] for row in span])
                tokens = runtime.int_tensor("TOKENS", [encoded.length(row) for row in span])
                return pb_utils.InferenceResponse(
                    output_tensors=[runtime.float_tensor("EMBEDDING", chunk), truncated, tokens]
                )

            return batch.respond(answer)

        self.pipeline.submit(requests, work)

    def finalize(self):
        self.pipeline.close()
