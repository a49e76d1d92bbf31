"""Named-entity recognition on Triton's Python backend (tritonhf gallery template).

Every row is tokenized once; a row longer than the model's limit becomes overlapping
windows (``stride`` tokens of overlap, config parameter, default a quarter of the limit),
so no entity is dropped. All windows of all requests go through forward passes grouped by
length under a token budget; then, per row, its windows' token scores are grouped into
entities by transformers' own token-classification post-processing (the same as
``pipeline("ner", stride=...)``, including the merge of entities seen by two windows), and
split back per request.

Each entity has ``entity_group``, ``word``, ``start`` and ``end`` (character offsets into
the original text, also for emoji, CJK or combining characters) and ``score``.

Inputs:  TEXT [n, 1] BYTES, optional AGGREGATION [n, 1] BYTES per row: none|simple|first|average|max
         (default: parameter ``aggregation``, else simple).
Outputs: ENTITIES [n, 1] BYTES, a JSON list of entities per text.
"""

import json

import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModelForTokenClassification, pipeline
from transformers.pipelines.token_classification import AggregationStrategy

STRATEGIES = [strategy.value for strategy in AggregationStrategy]


class TritonPythonModel(runtime.PipelinedModel):
    def initialize(self, args):
        params, self.device, self.tokenizer, self.model = runtime.start(args, AutoModelForTokenClassification)
        # Used only for its post-processing (grouping tokens into entities), never to run the model.
        self.grouper = pipeline("token-classification", model=self.model, tokenizer=self.tokenizer, device=self.device)
        self.aggregation = params.get("aggregation", "simple")
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.stride = runtime.int_parameter(params, "stride", max(1, self.max_length // 4))
        self.budget = runtime.int_parameter(params, runtime.PARAM_MAX_BATCH_TOKENS, runtime.DEFAULT_MAX_BATCH_TOKENS)
        self.logits([dict(self.tokenizer("Warm-up in Paris so that the first real request is not slow."))])
        # Each batch is computed on the pipeline's worker while Triton forms the next (runtime.Pipeline).
        self.pipeline = runtime.Pipeline()

    def logits(self, windows):
        """Token logits of each window (without its padding), from one forward pass."""
        batch = runtime.pad(self.tokenizer, windows, self.device)
        with torch.inference_mode():
            logits = self.model(**runtime.model_inputs(self.model, batch)).logits.float().cpu()
        return [logits[index, : len(window["input_ids"])] for index, window in enumerate(windows)]

    def entities(self, text, windows, window_logits, strategy):
        outputs = [
            {
                "logits": logits.unsqueeze(0),
                "sentence": text,
                "input_ids": torch.tensor([window["input_ids"]]),
                "offset_mapping": torch.tensor([window["offset_mapping"]]),
                "special_tokens_mask": torch.tensor([window["special_tokens_mask"]]),
            }
            for window, logits in zip(windows, window_logits, strict=True)
        ]
        found = self.grouper.postprocess(outputs, aggregation_strategy=AggregationStrategy(strategy))
        return [self.plain(entity) for entity in found]

    @staticmethod
    def plain(entity):
        return {
            "entity_group": entity.get("entity_group", entity.get("entity")),
            "word": entity["word"],
            "start": int(entity["start"]),
            "end": int(entity["end"]),
            "score": float(entity["score"]),
        }

    def answer_batch(self, requests):
        batch = runtime.Batch(requests, "TEXT")
        strategies = batch.option(
            "AGGREGATION", self.aggregation, STRATEGIES.__contains__, "one of " + ", ".join(STRATEGIES)
        )
        encoded = runtime.encode_rows(
            self.tokenizer,
            batch,
            self.max_length,
            windows=True,
            stride=self.stride,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )
        windows = [(row, index) for row in batch.live_rows() for index in range(len(encoded.features[row]))]
        lengths = {p: len(encoded.features[row][index]["input_ids"]) for p, (row, index) in enumerate(windows)}
        logits: dict = {}
        for group in runtime.budget_groups(lengths, self.budget):
            features = [encoded.features[windows[p][0]][windows[p][1]] for p in group]
            logits.update(zip((windows[p] for p in group), self.logits(features), strict=True))

        def answer(span):
            found = []
            for row in span:
                row_logits = [logits[(row, index)] for index in range(len(encoded.features[row]))]
                found.append(self.entities(batch.texts[row], encoded.features[row], row_logits, strategies[row]))
            encoded_json = [json.dumps(entities, ensure_ascii=False) for entities in found]
            return pb_utils.InferenceResponse(output_tensors=[runtime.string_tensor("ENTITIES", encoded_json)])

        return batch.respond(answer)
