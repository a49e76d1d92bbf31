"""Zero-shot classification on Triton's Python backend (tritonhf gallery template).

Two methods, as ``gallery add`` found the model (parameter ``zero_shot_method``):

* ``entailment``, for a natural-language-inference classifier (bart-large-mnli, DeBERTa zero-shot models):
  as transformers' ``pipeline("zero-shot-classification")``, each label is put into a hypothesis (parameter
  ``hypothesis_template``, "This example is {}." by default), the pair (text, hypothesis) is classified, and the
  entailment logits are turned into scores: a softmax over the labels, or with MULTI_LABEL (and for a single
  label) each label's own softmax of entailment against contradiction;
* ``embeddings``, for a sentence-embedding model: each label's sentence is embedded once and cached, each text
  is scored by cosine similarity against *its own row's* label sentences, and ``softmax(similarity * scale)``
  gives scores that sum to 1 (pooling, Dense layers and prompts as the model declares them).

Inputs:  TEXT [n, 1] BYTES, optional CANDIDATE_LABELS [n, k] BYTES (row j holds text j's labels;
         shorter lists are padded with empty strings; default: parameter ``labels``),
         optional MULTI_LABEL [n, 1] BOOL (entailment: score each label on its own; default false),
         optional TRUNCATE [n, 1] BOOL (default true).
Outputs: LABEL, SCORE (the best label per text), LABELS, SCORES (that row's labels, best first,
         padded with "" and 0 to the longest row), TRUNCATED [n, 1] BOOL.
"""

from collections import OrderedDict

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModel, AutoModelForSequenceClassification


class TritonPythonModel(runtime.PipelinedModel):
    def initialize(self, args):
        params = runtime.parameters(args)
        self.entailment = params.get(runtime.PARAM_ZERO_SHOT_METHOD, "embeddings") == "entailment"
        # PyTorch, or ONNX Runtime when added with --backend onnx (here, or Triton's onnxruntime
        # backend running model.onnx as another model): the same call either way.
        auto_class = AutoModelForSequenceClassification if self.entailment else AutoModel
        params, self.device, self.tokenizer, self.model = runtime.start(args, auto_class)
        self.template = params.get("hypothesis_template", "This example is {}.")
        self.labels = [label.strip() for label in params.get("labels", "").split(",") if label.strip()]
        self.max_length = runtime.max_length(self.tokenizer, self.model.config, params=params)
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        if self.entailment:
            self.entailment_id = int(params[runtime.PARAM_ENTAILMENT_ID])
            self.contradiction_id = -1 if self.entailment_id == 0 else 0  # as the pipeline takes it
        else:
            self.scale = float(params.get("scale", "20"))
            self.head = runtime.SentenceHead(
                params, runtime.weights_location(args, params), self.tokenizer, self.model.config.hidden_size
            )
            self.prompt, self.skip = self.head.prompt("")  # the model's default prompt, as encode() applies it
            self.label_cache = OrderedDict()  # label -> vector, the most recently used last
            self.label_cache_size = runtime.int_parameter(params, "label_cache_size", 10000)
            if self.labels and runtime.forward_is_local(self.model):  # (not when it is another model: native ONNX)
                self.label_vectors(self.labels)  # embeds the default labels now: that is the warm-up
        # Each batch is computed on the pipeline's worker while Triton forms the next (runtime.Pipeline).
        self.pipeline = runtime.Pipeline()

    def forward(self, windows):
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            output = self.model(**runtime.model_inputs(self.model, batch))
        return output, batch["attention_mask"]

    def embed(self, windows):
        """L2-normalised sentence vectors [len(windows), dim] from one forward pass."""
        output, mask = self.forward(windows)
        with torch.inference_mode():
            vectors = self.head.vectors(output.last_hidden_state.float(), mask, [self.skip] * len(windows))
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        return vectors.cpu().numpy()

    def label_vectors(self, labels):
        """Each label's sentence embedded alone (so a label's vector never depends on its company)."""
        for label in labels:
            if label in self.label_cache:
                self.label_cache.move_to_end(label)
                continue
            sentence = self.prompt + self.template.format(label)
            features = dict(self.tokenizer(sentence, truncation=True, max_length=self.max_length))
            self.label_cache[label] = self.embed([features])[0]
            if len(self.label_cache) > self.label_cache_size:
                self.label_cache.popitem(last=False)
        return np.stack([self.label_cache[label] for label in labels])

    def answer_batch(self, requests):
        batch = runtime.Batch(requests, "TEXT")
        candidates = batch.string_lists("CANDIDATE_LABELS")
        multi_label = batch.option("MULTI_LABEL", False)
        for row in batch.live_rows():
            if not (candidates[row] or self.labels):
                batch.fail_row(row, "no candidate labels: send CANDIDATE_LABELS, or add the model with --labels a,b,c.")
            elif multi_label[row] and not self.entailment:
                batch.fail_row(
                    row, "MULTI_LABEL needs an entailment (NLI) model; this embedding model's scores sum to 1."
                )
        truncate = batch.option("TRUNCATE", True)
        scores = self.entailment_scores if self.entailment else self.similarity_scores
        ranked, truncated = scores(batch, candidates, multi_label, truncate)

        def answer(span):
            outputs = runtime.ranked_labels_outputs([ranked[row] for row in span])  # LABEL, SCORE, LABELS, SCORES
            outputs.append(runtime.bool_tensor("TRUNCATED", [truncated.get(row, False) for row in span]))
            return pb_utils.InferenceResponse(output_tensors=outputs)

        return batch.respond(answer)

    def similarity_scores(self, batch, candidates, multi_label, truncate):
        for row in batch.live_rows():
            batch.texts[row] = self.prompt + batch.texts[row]
        encoded = runtime.encode_rows(self.tokenizer, batch, self.max_length, truncate)
        rows = batch.live_rows()
        vectors: dict = {}
        for group in runtime.budget_groups({row: encoded.length(row) for row in rows}, self.budget):
            vectors.update(zip(group, self.embed([encoded.features[row][0] for row in group]), strict=True))
        ranked = {}
        for row in batch.live_rows():
            labels = candidates[row] or self.labels
            logits = self.label_vectors(labels) @ vectors[row] * self.scale
            found = np.exp(logits - logits.max())
            ranked[row] = runtime.ranked_labels(found / found.sum(), labels, len(labels))
        return ranked, encoded.truncated

    def entailment_scores(self, batch, candidates, multi_label, truncate):
        """Each row's (text, hypothesis) pairs classified, the text cut before the hypothesis as the pipeline does."""
        pairs = [(row, label) for row in batch.live_rows() for label in candidates[row] or self.labels]
        items = [((row, label), batch.texts[row], self.template.format(label)) for row, label in pairs]
        encoded = runtime.encode(self.tokenizer, items, self.max_length, lambda key: bool(truncate[key[0]]),
                                 cut_first=True)  # fmt: skip
        for row, _ in encoded.too_long:
            batch.fail_row(row, runtime.too_long_message(self.max_length))
        keys = [key for key in encoded.features if key[0] in set(batch.live_rows())]
        logits: dict = {}
        for group in runtime.budget_groups({key: encoded.length(key) for key in keys}, self.budget):
            output, _ = self.forward([encoded.features[key][0] for key in group])
            logits.update(zip(group, output.logits.float().cpu().numpy(), strict=True))
        ranked, truncated = {}, {}
        for row in batch.live_rows():
            labels = candidates[row] or self.labels
            found = np.stack([logits[(row, label)] for label in labels])
            if multi_label[row] or len(labels) == 1:
                pair = found[:, [self.contradiction_id, self.entailment_id]]
                pair = np.exp(pair - pair.max(axis=1, keepdims=True))
                scores = pair[:, 1] / pair.sum(axis=1)
            else:
                entail = np.exp(found[:, self.entailment_id] - found[:, self.entailment_id].max())
                scores = entail / entail.sum()
            ranked[row] = runtime.ranked_labels(scores, labels, len(labels))
            truncated[row] = any(encoded.truncated.get((row, label), False) for label in labels)
        return ranked, truncated
