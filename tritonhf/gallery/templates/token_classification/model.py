"""Named-entity recognition on Triton's Python backend (tritonhf gallery template).

One tokenizer call and one forward pass over the texts of all requests; then, per text,
the token scores are grouped into entities by transformers' own token-classification
post-processing (so results match ``pipeline("ner")``), and split back per request.

Each entity has ``entity_group``, ``word``, ``start`` and ``end`` (character offsets into
the original text, also for emoji, CJK or combining characters) and ``score``.

Inputs:  TEXT [n, 1] BYTES, optional AGGREGATION [n, 1] BYTES: none|simple|first|average|max
         (default: parameter ``aggregation``, else simple).
Outputs: ENTITIES [n, 1] BYTES, a JSON list of entities per text.
"""

import json

import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForTokenClassification, pipeline
from transformers.pipelines.token_classification import AggregationStrategy

from tritonhf.gallery import runtime

STRATEGIES = [strategy.value for strategy in AggregationStrategy]


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.device = runtime.device(args, params)
        self.tokenizer = runtime.load_tokenizer(args, params)
        self.model = runtime.load_model(AutoModelForTokenClassification, args, params, self.device)
        # Used only for its post-processing (grouping tokens into entities), never to run the model.
        self.grouper = pipeline("token-classification", model=self.model, tokenizer=self.tokenizer, device=self.device)
        self.aggregation = params.get("aggregation", "simple")
        self.max_length = runtime.max_length(self.tokenizer, self.model.config)
        self.entities(["Warm-up in Paris so that the first real request is not slow."], [self.aggregation])

    def entities(self, texts, strategies):
        """A list of entity dicts per text, from one forward pass over all texts."""
        batch = self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            return_tensors="pt",
        )
        offsets = batch.pop("offset_mapping")
        special = batch.pop("special_tokens_mask")
        with torch.inference_mode():
            logits = self.model(**batch.to(self.device)).logits.float().cpu()
        results = []
        for row, (text, strategy) in enumerate(zip(texts, strategies, strict=False)):
            length = int(batch["attention_mask"][row].sum())
            outputs = {
                "logits": logits[row : row + 1, :length],
                "sentence": text,
                "input_ids": batch["input_ids"][row : row + 1, :length].cpu(),
                "offset_mapping": offsets[row : row + 1, :length],
                "special_tokens_mask": special[row : row + 1, :length],
            }
            found = self.grouper.postprocess([outputs], aggregation_strategy=AggregationStrategy(strategy))
            results.append([self.plain(entity) for entity in found])
        return results

    @staticmethod
    def plain(entity):
        return {
            "entity_group": entity.get("entity_group", entity.get("entity")),
            "word": entity["word"],
            "start": int(entity["start"]),
            "end": int(entity["end"]),
            "score": float(entity["score"]),
        }

    def execute(self, requests):
        gathered = runtime.gather_texts(requests, "TEXT")
        strategies = []
        for position, (request, rows) in enumerate(zip(requests, gathered.rows, strict=False)):
            if isinstance(rows, str):
                continue
            try:
                strategy = runtime.optional_scalar(
                    request, "AGGREGATION", self.aggregation, STRATEGIES.__contains__, "one of " + ", ".join(STRATEGIES)
                )
            except runtime.BadRequest as error:
                # This request is answered with the error; its texts are still run, then dropped.
                gathered.rows[position] = str(error)
                strategy = self.aggregation
            strategies.extend([strategy] * (rows.stop - rows.start))
        found = self.entities(gathered.texts, strategies) if gathered.texts else []

        def answer(request, rows):
            encoded = [json.dumps(entities, ensure_ascii=False) for entities in found[rows]]
            return pb_utils.InferenceResponse(output_tensors=[runtime.string_tensor("ENTITIES", encoded)])

        return runtime.respond(requests, gathered, answer)
