"""Image-text models (CLIP, SigLIP) on Triton's Python backend (tritonhf gallery template).

One model, three uses, chosen per request by the input it carries:

* IMAGE rows: the image's vector (EMBEDDING) and, when there are labels (the request's
  CANDIDATE_LABELS, else the ``labels`` parameter from ``gallery add --labels``), the labels
  ranked for that image (LABEL, SCORE, LABELS, SCORES);
* TEXT rows: the text's vector in the same space (EMBEDDING, TRUNCATED, TOKENS), so that
  ``Client.embed(texts, model=...)`` and ``Client.embed_images`` can be compared directly.

The two towers run as ONNX graphs (``vision.onnx``, ``text.onnx``; ONNX Runtime, or OpenVINO where
`gallery add` measured it faster) when their export matched PyTorch within 1e-3, else with PyTorch.
Images are decoded as in image-classification (runtime.pixel_rows: EXIF, RGB, the pixel limit
first) and run through the model's own processor (PIL backend). Each label becomes the prompt
``hypothesis_template`` ("a photo of a {}." by default, a --param), embedded alone and kept, so a
label's vector never depends on the batch. Probabilities as the model defines them: a softmax over
the labels of ``logit_scale * cosine`` for CLIP; an independent sigmoid of ``logit_scale * cosine +
logit_bias`` per label for SigLIP (its scores do not sum to 1).

Inputs:  IMAGE [n, 1] BYTES or TEXT [n, 1] BYTES (one or the other per request), optional
         CANDIDATE_LABELS [n, k] BYTES (pad with empty), NORMALIZE [n, 1] BOOL (default true),
         TRUNCATE [n, 1] BOOL (default true: a too-long text is cut to the model's limit).
Outputs: EMBEDDING [n, dim] FP32; LABEL, SCORE, LABELS, SCORES (empty for texts and for images
         without labels); TRUNCATED, TOKENS (texts; false and 0 for images).
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoConfig, AutoModel


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.device = runtime.device(args, params)
        location = runtime.weights_location(args, params)
        self.processor = runtime.load_image_processor(location, runtime.trust_remote_code(params))
        self.tokenizer = runtime.load_tokenizer(args, params)
        # Both towers as ONNX graphs (ONNX Runtime or OpenVINO, as `gallery add` chose), or the PyTorch model.
        self.towers = runtime.load_towers(args, params)
        if self.towers is None:
            self.model = runtime.load_model(AutoModel, args, params, self.device)
            config = self.model.config
            self.scale = float(self.model.logit_scale.detach().exp())
            bias = getattr(self.model, "logit_bias", None)
            self.bias = float(bias.detach()) if bias is not None else 0.0
            self.dtype = getattr(self.model, "dtype", torch.float32)
        else:  # the scale and bias were read from the model at `gallery add`
            config = AutoConfig.from_pretrained(location, trust_remote_code=runtime.trust_remote_code(params))
            self.scale = float(params[runtime.PARAM_LOGIT_SCALE])
            self.bias = float(params.get(runtime.PARAM_LOGIT_BIAS, "0"))
            self.dtype = torch.float32
        # SigLIP: sigmoid scores, and a text tower that reads the last position, trained on texts padded
        # to the full length: every text is padded so, alone or batched alike.
        self.siglip = config.model_type.startswith("siglip")
        self.max_length = runtime.max_length(self.tokenizer, config.text_config)
        self.labels = [label.strip() for label in params.get("labels", "").split(",") if label.strip()]
        self.template = params.get("hypothesis_template", "a photo of a {}.")
        self.normalize = params.get("normalize", "true") == "true"
        self.max_pixels = runtime.int_parameter(
            params, runtime.PARAM_MAX_IMAGE_PIXELS, runtime.DEFAULT_MAX_IMAGE_PIXELS
        )
        self.label_vectors = {}  # prompt -> unit vector, each computed alone (used on the worker only)
        self.image_vectors(runtime.blank_pixels(self.processor))  # warm-up: the first real request is not slow
        self.pipeline = runtime.Pipeline()

    # ------------------------------------------------------------------ the two towers

    def image_vectors(self, pixel_values):
        pixels = torch.from_numpy(np.ascontiguousarray(pixel_values)).to(self.device, self.dtype)
        with torch.inference_mode():
            if self.towers is not None:
                return self.towers[0](pixel_values=pixels).image_embeds.float().numpy()
            return _tensor(self.model.get_image_features(pixel_values=pixels)).float().cpu().numpy()

    def text_vectors(self, windows):
        if self.siglip:
            windows = [_padded(window, self.max_length, self.tokenizer) for window in windows]
        batch = runtime.pad(self.tokenizer, windows, self.device)
        inputs = {key: value for key, value in batch.items() if key in ("input_ids", "attention_mask")}
        if self.siglip:
            inputs.pop("attention_mask", None)  # SigLIP's text tower is called without one, as trained
        with torch.inference_mode():
            if self.towers is not None:
                return self.towers[1](**inputs).text_embeds.float().numpy()
            return _tensor(self.model.get_text_features(**inputs)).float().cpu().numpy()

    def label_vector(self, label):
        prompt = self.template.format(label)
        if prompt not in self.label_vectors:
            window = dict(self.tokenizer(prompt))
            if len(window["input_ids"]) > self.max_length:  # a label is never cut: its meaning would change
                raise runtime.BadRequest(
                    f"label {label!r} is {len(window['input_ids'])} tokens as the prompt {prompt!r}; "
                    f"the model takes {self.max_length}. Shorten the label."
                )
            self.label_vectors[prompt] = _unit(self.text_vectors([window])[0])
        return self.label_vectors[prompt]

    def ranked(self, vector, labels):
        """(labels best first, scores) for one image vector against its labels."""
        image = _unit(vector)  # once per image, not once per label
        logits = np.array([self.scale * float(image @ self.label_vector(label)) for label in labels])
        if self.siglip:
            scores = 1.0 / (1.0 + np.exp(-(logits + self.bias)))
        else:
            scores = np.exp(logits - logits.max())
            scores = scores / scores.sum()
        order = np.argsort(-scores, kind="stable")
        return [labels[index] for index in order], [float(scores[index]) for index in order]

    # ------------------------------------------------------------------ requests

    def execute(self, requests):
        kinds = []  # per request: "IMAGE", "TEXT", or an error message
        for request in requests:
            has = [name for name in ("IMAGE", "TEXT") if pb_utils.get_input_tensor_by_name(request, name) is not None]
            kinds.append(has[0] if len(has) == 1 else "send either IMAGE (images) or TEXT (texts) in a request.")
        images = [request for request, kind in zip(requests, kinds) if kind == "IMAGE"]
        texts = [request for request, kind in zip(requests, kinds) if kind == "TEXT"]
        image_batch = runtime.Batch(images, "IMAGE", binary=True)
        wanted = image_batch.string_lists("CANDIDATE_LABELS")
        image_normalize = image_batch.option("NORMALIZE", self.normalize)
        pixels = runtime.pixel_rows(image_batch, self.processor, self.max_pixels)
        text_batch = runtime.Batch(texts, "TEXT")
        text_normalize = text_batch.option("NORMALIZE", self.normalize)
        encoded = runtime.encode_rows(self.tokenizer, text_batch, self.max_length, text_batch.option("TRUNCATE", True))

        def work():
            answered = iter(self.answer_images(image_batch, pixels, wanted, image_normalize))
            texts_answered = iter(self.answer_texts(text_batch, encoded, text_normalize))
            responses = []
            for kind in kinds:
                if kind == "IMAGE":
                    responses.append(next(answered))
                elif kind == "TEXT":
                    responses.append(next(texts_answered))
                else:
                    responses.append(runtime.error_response(kind))
            return responses

        self.pipeline.submit(requests, work)

    def answer_images(self, batch, pixels, wanted, normalize):
        rows = [row for row in batch.live_rows() if row in pixels]
        vectors = np.zeros((len(batch.texts), 1), dtype=np.float32)
        if rows:
            computed = self.image_vectors(np.stack([pixels[row] for row in rows]))
            vectors = np.zeros((len(batch.texts), computed.shape[1]), dtype=np.float32)
            vectors[rows] = computed

        def answer(span):
            ranked = []
            for row in span:
                labels = wanted[row] or self.labels
                ranked.append(self.ranked(vectors[row], labels) if labels else ([], []))
            chunk = np.stack([_unit(vectors[row]) if normalize[row] else vectors[row] for row in span])
            outputs = [runtime.float_tensor("EMBEDDING", chunk), *_labels_outputs(ranked)]
            outputs.append(runtime.bool_tensor("TRUNCATED", [False] * len(span)))
            outputs.append(runtime.int_tensor("TOKENS", [0] * len(span)))
            return pb_utils.InferenceResponse(output_tensors=outputs)

        return batch.respond(answer)

    def answer_texts(self, batch, encoded, normalize):
        rows = batch.live_rows()
        vectors = {}
        if rows:
            computed = self.text_vectors([encoded.features[row][0] for row in rows])
            vectors = dict(zip(rows, computed))

        def answer(span):
            chunk = np.stack([_unit(vectors[row]) if normalize[row] else vectors[row] for row in span])
            outputs = [runtime.float_tensor("EMBEDDING", chunk), *_labels_outputs([([], [])] * len(span))]
            outputs.append(runtime.bool_tensor("TRUNCATED", [encoded.truncated[row] for row in span]))
            outputs.append(runtime.int_tensor("TOKENS", [encoded.length(row) for row in span]))
            return pb_utils.InferenceResponse(output_tensors=outputs)

        return batch.respond(answer)

    def finalize(self):
        self.pipeline.close()


def _tensor(features):
    """transformers 5 may return a model output holding the pooled projection; older versions the tensor."""
    return features if isinstance(features, torch.Tensor) else features.pooler_output


def _unit(vector):
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


def _padded(window, length, tokenizer):
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    extra = length - len(window["input_ids"])
    return {**window, "input_ids": list(window["input_ids"]) + [pad] * extra}


def _labels_outputs(ranked):
    """LABEL, SCORE, LABELS, SCORES for rows of (labels, scores); rows without labels answer "" and 0."""
    best = [(labels[0], scores[0]) if labels else ("", 0.0) for labels, scores in ranked]
    width = max((len(labels) for labels, _ in ranked), default=0)
    scores = np.zeros((len(ranked), width), dtype=np.float32)
    for row, (_, values) in enumerate(ranked):
        scores[row, : len(values)] = values
    return [
        runtime.string_tensor("LABEL", [label for label, _ in best]),
        runtime.float_tensor("SCORE", np.array([[score] for _, score in best], dtype=np.float32)),
        runtime.string_matrix("LABELS", [labels for labels, _ in ranked]),
        runtime.float_tensor("SCORES", scores),
    ]
