"""A stand-in for Triton's native onnxruntime backend, which the pip wheel's server lacks.

It serves ``1/model.onnx`` with the inputs and output of the part's config, as that backend
would, so tests can serve a ``--backend onnx --onnx-runtime native`` model for real: the
gallery's template, its BLS call and Triton's batching all run; only the backend executing
model.onnx is this file (onnxruntime in the Python backend) instead of the C++ one.

Used as a model.py (copied into NAME__onnx/1/ with the config's backend set to python), and
by unit tests through ``run_onnx``.
"""

import json
from pathlib import Path

import numpy as np
import onnxruntime


def run_onnx(path, output):
    """A function {input name: array} -> {output: array} running the model.onnx at ``path``."""
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(feeds):
        (result,) = session.run([output], {name: np.asarray(value) for name, value in feeds.items()})
        return {output: result}

    return run


class TritonPythonModel:
    def initialize(self, args):
        import triton_python_backend_utils  # provided by the stub (imported here: unit tests import run_onnx)

        self.pb = triton_python_backend_utils
        config = json.loads(args["model_config"])
        self.inputs = [tensor["name"] for tensor in config["input"]]
        self.output = config["output"][0]["name"]
        folder = Path(args["model_repository"]) / args["model_version"]
        self.run = run_onnx(folder / "model.onnx", self.output)

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {name: self.pb.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            result = self.run(feeds)[self.output]
            responses.append(self.pb.InferenceResponse(output_tensors=[self.pb.Tensor(self.output, result)]))
        return responses
