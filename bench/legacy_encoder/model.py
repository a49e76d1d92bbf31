"""The feature-extraction template as it was before this version (tritonhf 0.1): one padded batch for
all texts (no token budget), PyTorch. Kept only so that `make bench` can measure it beside the current
template in the same run (mixed-length traffic); not part of the gallery.

Sentence embeddings on Triton's Python backend (tritonhf gallery template).

All texts of all requests in one batch go through one forward pass; the token vectors
are pooled into one vector per text and split back per request.

Pooling is ``mean`` (average of the real tokens, padding masked out) or ``cls`` (the
first token). It comes from the config parameter ``pooling``, which `gallery add` reads
from a sentence-transformers ``1_Pooling/config.json`` when the model has one.

Inputs:  TEXT [n, 1] BYTES, optional NORMALIZE [n, 1] BOOL (default: parameter ``normalize``).
Outputs: EMBEDDING [n, dim] FP32.
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModel


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
        self.normalize = params.get("normalize", "true") == "true"
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.dim = self.model.config.hidden_size
        if runtime.forward_is_local(self.model):  # not when the forward pass is another model (native ONNX)
            self.embed(["Warm-up so that the first real request is not slow."], self.normalize)

    def embed(self, texts, normalize):
        """Pooled vectors [len(texts), dim] from one forward pass."""
        batch = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            tokens = self.model(**batch).last_hidden_state.float()
            vectors = runtime.pool(tokens, batch["attention_mask"], self.pooling)
            if normalize:
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        return vectors.cpu().numpy()

    def execute(self, requests):
        gathered = runtime.gather_texts(requests, "TEXT")
        # One pass without normalising; normalising is cheap and differs per request.
        vectors = self.embed(gathered.texts, normalize=False) if gathered.texts else np.zeros((0, self.dim))

        def answer(request, rows):
            normalize = runtime.optional_scalar(request, "NORMALIZE", self.normalize, lambda v: True, "a boolean")
            chunk = vectors[rows]
            if normalize:
                chunk = chunk / np.maximum(np.linalg.norm(chunk, axis=1, keepdims=True), 1e-12)
            return pb_utils.InferenceResponse(output_tensors=[runtime.float_tensor("EMBEDDING", chunk)])

        return runtime.respond(requests, gathered, answer)
