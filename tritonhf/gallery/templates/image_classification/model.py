"""Image classification on Triton's Python backend (tritonhf gallery template).

Requests carry encoded images (JPEG, PNG, WebP, GIF, BMP), one per row. This template:

1. decodes each row's image as transformers' ``load_image`` reads a file (EXIF orientation,
   then RGB), refusing before decoding an image past ``max_image_pixels``; a bad image fails
   its own request only, naming the row and what is wrong;
2. runs the model's own image processor (PIL backend, as written into the config) on each;
3. runs one forward pass over the rows of every request in the batch (all images are the
   processor's size, so nothing is padded and no row depends on another);
4. answers each request with exactly its own rows.

Decoding and processing run on the stub's thread while the previous batch computes on the
pipeline's worker (runtime.Pipeline).

Inputs:  IMAGE [n, 1] BYTES (an encoded image per row), optional TOP_K [n, 1] INT32.
Outputs: LABEL, SCORE (the best label per image), LABELS, SCORES (best first).
Labels come from the model's ``id2label``; multi-label models use a sigmoid per label.
"""

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoModelForImageClassification


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.device = runtime.device(args, params)
        location = runtime.weights_location(args, params)
        self.processor = runtime.load_image_processor(location, runtime.trust_remote_code(params))
        # PyTorch, or ONNX Runtime / OpenVINO when added with --backend onnx|openvino: the same call.
        self.model = runtime.load_model(AutoModelForImageClassification, args, params, self.device)
        config = self.model.config
        self.labels = [config.id2label[index] for index in range(config.num_labels)]
        self.multi_label = config.problem_type == "multi_label_classification"
        self.max_pixels = runtime.int_parameter(
            params, runtime.PARAM_MAX_IMAGE_PIXELS, runtime.DEFAULT_MAX_IMAGE_PIXELS
        )
        self.dtype = getattr(self.model, "dtype", torch.float32)
        if runtime.forward_is_local(self.model):
            self.probabilities(runtime.blank_pixels(self.processor))  # warm-up: the first real request is not slow
        self.pipeline = runtime.Pipeline()

    def probabilities(self, pixel_values):
        """Probabilities [len(pixel_values), num_labels] from one forward pass."""
        pixels = torch.from_numpy(np.ascontiguousarray(pixel_values)).to(self.device, self.dtype)
        with torch.inference_mode():
            logits = self.model(pixel_values=pixels).logits.float()
        probabilities = torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=-1)
        return probabilities.cpu().numpy()

    def execute(self, requests):
        batch = runtime.Batch(requests, "IMAGE", binary=True)
        top_k = batch.option("TOP_K", len(self.labels), lambda k: k >= 1, "a positive number of labels")
        pixels = runtime.pixel_rows(batch, self.processor, self.max_pixels)

        def work():
            rows = [row for row in batch.live_rows() if row in pixels]
            scores = np.zeros((len(batch.texts), len(self.labels)), dtype=np.float32)
            if rows:
                scores[rows] = self.probabilities(np.stack([pixels[row] for row in rows]))

            def answer(span):
                ranked = [runtime.ranked_labels(scores[row], self.labels, top_k[row]) for row in span]
                return pb_utils.InferenceResponse(output_tensors=runtime.ranked_labels_outputs(ranked))

            return batch.respond(answer)

        self.pipeline.submit(requests, work)

    def finalize(self):
        self.pipeline.close()
