"""Sleeps as many seconds as asked (the longest of its batch), then answers: a model that is slow on purpose."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        seconds = [float(pb_utils.get_input_tensor_by_name(r, "SECONDS").as_numpy().max()) for r in requests]
        time.sleep(max(seconds))
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("SLEPT", np.array([[s]], dtype=np.float32))]) for s in seconds
        ]
