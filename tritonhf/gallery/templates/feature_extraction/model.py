"""Sentence embeddings on Triton's Python backend (tritonhf gallery template).

The rows of all requests in one batch are tokenized once, grouped by length under a token
budget and run in as few forward passes as that allows; the token vectors are pooled into
one vector per row and split back per request.

What follows the transformer is what a sentence-transformers folder declares (``gallery add`` reads its
``modules.json`` into parameters; ``tritonhf_runtime/sentence.py`` applies them): the pooling modes, Dense
layers, Normalize and prompts. A model without that folder layout is mean-pooled and normalised.

Inputs:  TEXT [n, 1] BYTES, optional NORMALIZE [n, 1] BOOL (default: parameter ``normalize``),
         optional PROMPT_NAME [n, 1] BYTES (one of the model's prompts, put before the text; "" for the default),
         optional TRUNCATE [n, 1] BOOL (default true: a too-long text is cut to the model's limit),
         optional ALL_TOKENS [n, 1] BOOL (TEI's /embed_all: every token's vector too, not normalised).
Outputs: EMBEDDING [n, dim] FP32, TRUNCATED [n, 1] BOOL, TOKENS [n, 1] INT32 (tokens used, for usage figures);
         with ALL_TOKENS, TOKEN_EMBEDDINGS [n, longest, dim] FP32 (row i's first TOKENS[i] are its tokens).
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
        self.hidden = self.model.config.hidden_size
        self.head = runtime.SentenceHead(params, runtime.weights_location(args, params), self.tokenizer, self.hidden)
        self.max_length = runtime.max_length(self.tokenizer, self.model.config, params=params)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        self.dim = self.head.dim
        if runtime.forward_is_local(self.model):  # not when the forward pass is another model (native ONNX)
            self.pooled([dict(self.tokenizer("Warm-up so that the first real request is not slow."))])[0]
        # The forward pass of one batch runs while the next one is read and tokenized.
        self.pipeline = runtime.Pipeline()

    def pooled(self, windows, keep=(), skip=None):
        """Pooled, not normalised vectors [len(windows), dim] from one forward pass (each window's first ``skip``
        tokens left out of pooling: a prompt the model does not pool), and the token vectors of the windows at the
        positions in ``keep`` (their real tokens only)."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            tokens = self.model(**runtime.model_inputs(self.model, batch)).last_hidden_state.float()
            vectors = self.head.vectors(tokens, batch["attention_mask"], skip)
        mask = batch["attention_mask"].bool()
        return vectors.cpu().numpy(), {i: tokens[i][mask[i]].cpu().numpy() for i in keep}

    def execute(self, requests):
        batch = runtime.Batch(requests, "TEXT")
        normalize = batch.option("NORMALIZE", self.head.normalize)
        truncate = batch.option("TRUNCATE", True)
        all_tokens = batch.option("ALL_TOKENS", False)
        skip = self.prompted(batch, batch.option("PROMPT_NAME", ""))
        encoded = runtime.encode_rows(self.tokenizer, batch, self.max_length, truncate)

        def work():
            rows = batch.live_rows()
            vectors = np.zeros((len(batch.texts), self.dim), dtype=np.float32)
            token_vectors = {}  # row -> [its tokens, dim], for the rows that asked
            for group in runtime.budget_groups({row: encoded.length(row) for row in rows}, self.budget):
                keep = [i for i, row in enumerate(group) if all_tokens[row]]
                windows = [encoded.features[row][0] for row in group]
                vectors[group], kept = self.pooled(windows, keep, [skip[row] for row in group])
                token_vectors.update({group[i]: found for i, found in kept.items()})

            def answer(span):
                chunk = vectors[span.start : span.stop]
                wanted = np.array([bool(normalize[row]) for row in span])[:, None]
                norms = np.maximum(np.linalg.norm(chunk, axis=1, keepdims=True), 1e-12)
                chunk = np.where(wanted, chunk / norms, chunk)
                truncated = runtime.bool_tensor("TRUNCATED", [encoded.truncated[row] for row in span])
                tokens = runtime.int_tensor("TOKENS", [encoded.length(row) for row in span])
                outputs = [runtime.float_tensor("EMBEDDING", chunk), truncated, tokens]
                if any(row in token_vectors for row in span):  # zero-padded to the request's longest row
                    longest = max(len(token_vectors.get(row, ())) for row in span)
                    # the transformer's width, not the vectors' (a Dense layer may change that)
                    padded = np.zeros((len(span), longest, self.hidden), dtype=np.float32)
                    for index, row in enumerate(span):
                        found = token_vectors.get(row)
                        if found is not None:
                            padded[index, : len(found)] = found
                    outputs.append(runtime.float_tensor("TOKEN_EMBEDDINGS", padded))
                return pb_utils.InferenceResponse(output_tensors=outputs)

            return batch.respond(answer)

        self.pipeline.submit(requests, work)

    def prompted(self, batch, names):
        """Each live row's text with its prompt before it (the row's PROMPT_NAME, else the model's default); how many
        of each row's first tokens pooling leaves out. A name the model lacks fails that row's request."""
        skip = [0] * len(batch.texts)
        for row in batch.live_rows():
            try:
                prompt, skip[row] = self.head.prompt(names[row])
            except KeyError as exc:
                batch.fail_row(row, exc.args[0])
                continue
            batch.texts[row] = prompt + batch.texts[row]
        return skip

    def finalize(self):
        self.pipeline.close()
