"""Sleeps 25 ms per batch, then answers each text with a unit vector that depends only on the text."""

import time
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

SECONDS = 0.025


def vector(text):
    angle = (zlib.crc32(text) % 3600) / 3600 * 2 * np.pi
    return [np.cos(angle), np.sin(angle)]


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(SECONDS)
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            rows = len(texts)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("EMBEDDING", np.array([vector(t) for t in texts], dtype=np.float32)),
                        pb_utils.Tensor("TRUNCATED", np.zeros((rows, 1), dtype=bool)),
                        pb_utils.Tensor("TOKENS", np.full((rows, 1), 3, dtype=np.int32)),
                    ]
                )
            )
        return responses
