"""Fill-mask on Triton's Python backend (tritonhf gallery template).

Each text holds exactly one mask token (the tokenizer's, e.g. ``[MASK]`` or ``<mask>``); a text
with none or several is refused for that request alone (400). Rows are tokenized once, grouped
by length under a token budget, and the masked-LM's scores at the mask become probabilities;
each row gets its ``TOP_K`` best tokens.

Inputs:  TEXT [n, 1] BYTES, optional TOP_K [n, 1] INT32 (default 5), optional TRUNCATE [n, 1] BOOL.
Outputs: TOKENS [n, k] BYTES, SCORES [n, k] FP32 (best first), TRUNCATED [n, 1] BOOL.
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModelForMaskedLM


class TritonPythonModel(runtime.PipelinedModel):
    def initialize(self, args):
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModelForMaskedLM)
        self.mask = self.tokenizer.mask_token
        self.mask_id = self.tokenizer.mask_token_id
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        self.probabilities([dict(self.tokenizer(f"Warm-up in {self.mask}."))])
        # Each batch is computed on the pipeline's worker while Triton forms the next (runtime.Pipeline).
        self.pipeline = runtime.Pipeline()

    def probabilities(self, windows):
        """The vocabulary's probabilities at each window's mask token, from one forward pass."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            logits = self.model(**runtime.model_inputs(self.model, batch)).logits.float()
        positions = [window["input_ids"].index(self.mask_id) for window in windows]
        picked = logits[torch.arange(len(windows)), torch.tensor(positions)]
        return torch.softmax(picked, dim=-1).cpu().numpy()

    def answer_batch(self, requests):
        batch = runtime.Batch(requests, "TEXT")
        most = runtime.CANDIDATES_MAX
        top_k = batch.option("TOP_K", 5, lambda k: 1 <= k <= most, f"from 1 to {most}")
        truncate = batch.option("TRUNCATE", True)
        for row in batch.live_rows():
            count = batch.texts[row].count(self.mask)
            if count != 1:
                batch.fail_row(
                    row, f"input 'TEXT' has {count} {self.mask} tokens; put exactly one where a word is missing."
                )
        encoded = runtime.encode_rows(self.tokenizer, batch, self.max_length, truncate)
        for row in batch.live_rows():
            if self.mask_id not in encoded.features[row][0]["input_ids"]:
                batch.fail_row(row, f"the {self.mask} token is beyond the {self.max_length} tokens this model reads.")
        rows = batch.live_rows()
        found: dict = {}
        for group in runtime.budget_groups({row: encoded.length(row) for row in rows}, self.budget):
            found.update(zip(group, self.probabilities([encoded.features[row][0] for row in group]), strict=True))

        def answer(span):
            tokens, scores = [], []
            for row in span:
                best = np.argsort(-found[row], kind="stable")[: top_k[row]]
                tokens.append([self.tokenizer.decode([int(i)]).strip() for i in best])
                scores.append([float(found[row][i]) for i in best])
            width = max(len(t) for t in tokens)
            table = np.array([s + [0.0] * (width - len(s)) for s in scores], dtype=np.float32)
            tensors = [
                runtime.string_matrix("TOKENS", tokens),
                runtime.float_tensor("SCORES", table),
                runtime.bool_tensor("TRUNCATED", [encoded.truncated[row] for row in span]),
            ]
            return pb_utils.InferenceResponse(output_tensors=tensors)

        return batch.respond(answer)
