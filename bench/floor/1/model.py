"""A Python-backend model that does no work: it sleeps SLEEP_MS, then answers zeros.

`make bench` times it beside the real templates to separate what Triton and the Python
backend cost per request (the hand-over between server, stub and client) from what a
template costs: sleeping as long as the in-process model takes shows the served overhead
with no tokenizer, no model and no Python work of ours.
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            sleep_ms = pb_utils.get_input_tensor_by_name(request, "SLEEP_MS").as_numpy()
            time.sleep(max(float(sleep_ms.reshape(-1)[0]), 0.0) / 1000)
            zeros = np.zeros((sleep_ms.shape[0], 384), dtype=np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("EMBEDDING", zeros)]))
        return responses
