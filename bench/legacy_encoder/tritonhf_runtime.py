"""The runtime the old feature-extraction template (bench/legacy_encoder/model.py) imports: tritonhf 0.1's
gallery/runtime.py, its parameter names written out. For `make bench` only.

Small helpers the gallery's model.py templates share inside the Triton stub.

Kept here (and not copied into each template) so the templates stay short and show only
what differs per task: load, forward pass, split back. Everything a template needs comes
through Triton's ``args`` and the config ``parameters``; nothing is generated code.

``triton_python_backend_utils`` exists only inside the stub, so it is imported lazily;
tests put a stand-in module under that name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

PARAM_BACKEND = "tritonhf.backend"
PARAM_DEVICE = "tritonhf.device"
PARAM_ONNX_INPUTS = "tritonhf.onnx_inputs"
PARAM_ONNX_MODEL = "tritonhf.onnx_model"
PARAM_ONNX_OUTPUT = "tritonhf.onnx_output"
PARAM_TRUST_REMOTE_CODE = "tritonhf.trust_remote_code"
PARAM_WEIGHTS = "tritonhf.weights"


class BadRequest(ValueError):
    """A request's input is unusable; answered as an error for that request alone."""


def pb_utils() -> Any:
    import triton_python_backend_utils  # type: ignore[import-not-found]  # provided by the stub

    return triton_python_backend_utils


def parameters(args: dict[str, str]) -> dict[str, str]:
    """The config's ``parameters`` as a plain dict of strings."""
    config = json.loads(args["model_config"])
    return {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}


class OnnxModel:
    """An exported ``model.onnx`` run by onnxruntime behind the PyTorch model's call.

    ``model(**batch).logits`` (or ``.last_hidden_state``) works the same, so a template
    does not change with the backend.
    """

    def __init__(self, folder: str, threads: int) -> None:
        import onnxruntime
        from transformers import AutoConfig

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = onnxruntime.InferenceSession(
            str(Path(folder) / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = [tensor.name for tensor in self.session.get_inputs()]
        self.output = self.session.get_outputs()[0].name  # logits or last_hidden_state, named at export
        self.config = AutoConfig.from_pretrained(folder)

    def __call__(self, **batch: Any) -> Any:
        import types

        import torch

        feeds = {name: batch[name].cpu().numpy().astype(np.int64) for name in self.inputs}
        (result,) = self.session.run([self.output], feeds)
        return types.SimpleNamespace(**{self.output: torch.from_numpy(result)})

    def to(self, device: str) -> OnnxModel:
        return self

    def eval(self) -> OnnxModel:
        return self


class TritonOnnxModel:
    """``model.onnx`` served by Triton's native onnxruntime backend as another model (the "part"),
    called with the whole gathered batch through BLS, behind the PyTorch model's call.

    The template tokenizes as always; the token tensors go to the part in one request and its
    answer comes back as ``.logits`` (or ``.last_hidden_state``), so the template does not change.
    """

    runs_in_this_process = False  # the part may still be loading while this model initialises

    def __init__(self, part: str, inputs: Sequence[str], output: str, folder: str) -> None:
        from transformers import AutoConfig

        self.part, self.inputs, self.output = part, list(inputs), output
        self.config = AutoConfig.from_pretrained(folder)

    def __call__(self, **batch: Any) -> Any:
        import types

        import torch

        pb = pb_utils()
        tensors = [pb.Tensor(name, batch[name].cpu().numpy().astype(np.int64)) for name in self.inputs]
        request = pb.InferenceRequest(model_name=self.part, inputs=tensors, requested_output_names=[self.output])
        response = request.exec()
        if response.has_error():
            raise RuntimeError(f"the ONNX part {self.part!r} failed: {response.error().message()}")
        result = pb.get_output_tensor_by_name(response, self.output).as_numpy()
        return types.SimpleNamespace(**{self.output: torch.from_numpy(np.array(result))})

    def to(self, device: str) -> TritonOnnxModel:
        return self

    def eval(self) -> TritonOnnxModel:
        return self


def forward_is_local(model: Any) -> bool:
    """False when the forward pass is another Triton model: no warm-up call during initialize."""
    return bool(getattr(model, "runs_in_this_process", True))


def load_tokenizer(args: dict[str, str], params: dict[str, str]) -> Any:
    """The tokenizer saved beside the weights (or of the hub id, with --no-vendor)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(weights_location(args, params), trust_remote_code=trust_remote_code(params))


def load_model(auto_class: Any, args: dict[str, str], params: dict[str, str], device_name: str) -> Any:
    """The model as PyTorch (the default) or, when added with --backend onnx, as an OnnxModel
    (onnxruntime in this process) or a TritonOnnxModel (Triton's onnxruntime backend)."""
    source = weights_location(args, params)
    if params.get(PARAM_BACKEND) == "onnx" and params.get(PARAM_ONNX_MODEL):
        inputs = params.get(PARAM_ONNX_INPUTS, "input_ids,attention_mask").split(",")
        return TritonOnnxModel(params[PARAM_ONNX_MODEL], inputs, params.get(PARAM_ONNX_OUTPUT, "logits"), source)
    if params.get(PARAM_BACKEND) == "onnx":
        return OnnxModel(source, threads=instance_threads(args))
    model = auto_class.from_pretrained(
        source, dtype=torch_dtype(device_name), trust_remote_code=trust_remote_code(params)
    )
    return model.to(device_name).eval()


def trust_remote_code(params: dict[str, str]) -> bool:
    """Run code shipped with the model? Only when added with --trust-remote-code."""
    return params.get(PARAM_TRUST_REMOTE_CODE) == "true"


def model_config(args: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(args["model_config"]))


def weights_location(args: dict[str, str], params: dict[str, str]) -> str:
    """Where to load weights from: the vendored folder, a local path, or a hub id (--no-vendor)."""
    location = params.get(PARAM_WEIGHTS, "weights")
    version_dir = Path(args["model_repository"]) / args["model_version"]
    if (version_dir / location).exists():
        return str(version_dir / location)
    return location


def device(args: dict[str, str], params: dict[str, str]) -> str:
    """``cuda:N`` when the instance is a GPU one (or "auto" finds a GPU), else ``cpu``."""
    import torch

    wanted = params.get(PARAM_DEVICE, "auto")
    if params.get(PARAM_BACKEND) == "onnx":
        return "cpu"  # the onnxruntime path runs on the CPU execution provider
    gpu_wanted = args.get("model_instance_kind") == "GPU" or wanted in ("gpu", "auto")
    if gpu_wanted and torch.cuda.is_available():
        return f"cuda:{args.get('model_instance_device_id', '0')}"
    return "cpu"


def torch_dtype(device_name: str) -> Any:
    """fp16 on a GPU (half the memory, tensor cores), fp32 on the CPU (fast kernels there)."""
    import torch

    return torch.float16 if device_name.startswith("cuda") else torch.float32


def instance_threads(args: dict[str, str]) -> int:
    """Cores per instance: N instances each get cores/N intra-op threads."""
    groups = model_config(args).get("instance_group", [{}])
    instances = max(1, sum(int(group.get("count", 1)) for group in groups))
    return max(1, (os.cpu_count() or 1) // instances)


def limit_threads(args: dict[str, str]) -> None:
    """Share the cores between instances (torch's intra-op thread pool)."""
    import torch

    torch.set_num_threads(instance_threads(args))


def max_length(tokenizer: Any, config: Any, default: int = 512) -> int:
    """The longest input the model takes; inputs are truncated to it instead of crashing."""
    limits = [
        value
        for value in (getattr(tokenizer, "model_max_length", None), getattr(config, "max_position_embeddings", None))
        if isinstance(value, int) and 0 < value < 1_000_000
    ]
    return min(limits) if limits else default


@dataclass
class Gathered:
    """The texts of every request in one flat list, and where each request's rows are.

    ``rows[i]`` is the slice of ``texts`` that belongs to request ``i``, or the error
    message when that request was unusable (it then gets an error response alone).
    """

    texts: list[str] = field(default_factory=list)
    rows: list[slice | str] = field(default_factory=list)


def decode_texts(array: np.ndarray[Any, Any], name: str) -> list[str]:
    """A BYTES tensor (object array of bytes) as a list of str, one per batch row."""
    texts = []
    for index, item in enumerate(array.reshape(-1)):
        if isinstance(item, bytes):
            try:
                texts.append(item.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise BadRequest(f"input '{name}' item {index} is not valid UTF-8 ({exc.reason}).") from exc
        else:
            texts.append(str(item))
    return texts


def optional_array(request: Any, name: str) -> np.ndarray[Any, Any] | None:
    tensor = pb_utils().get_input_tensor_by_name(request, name)
    return None if tensor is None else np.asarray(tensor.as_numpy())


def input_array(request: Any, name: str) -> np.ndarray[Any, Any]:
    array = optional_array(request, name)
    if array is None:
        # Triton lets a request through without a required input when the model has optional ones.
        raise BadRequest(f"missing required input '{name}'.")
    return array


def gather_texts(requests: Sequence[Any], name: str = "TEXT") -> Gathered:
    gathered = Gathered()
    for request in requests:
        try:
            texts = decode_texts(input_array(request, name), name)
        except BadRequest as exc:
            gathered.rows.append(str(exc))
            continue
        start = len(gathered.texts)
        gathered.texts.extend(texts)
        gathered.rows.append(slice(start, len(gathered.texts)))
    return gathered


def optional_scalar(request: Any, name: str, default: Any, check: Callable[[Any], bool], rule: str) -> Any:
    """The first value of an optional input, or ``default``; ``rule`` explains a refused value."""
    array = optional_array(request, name)
    if array is None or array.size == 0:
        return default
    value = array.reshape(-1)[0]
    value = value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()
    if not check(value):
        raise BadRequest(f"input '{name}' is {value!r}; it must be {rule}.")
    return value


def optional_strings(request: Any, name: str) -> list[str] | None:
    array = optional_array(request, name)
    if array is None:
        return None
    return [text for text in decode_texts(array, name) if text]


def error_response(message: str, invalid_input: bool = True) -> Any:
    """An error answer for one request; INVALID_ARG (HTTP 400) unless the model itself failed."""
    pb = pb_utils()
    code = pb.TritonError.INVALID_ARG if invalid_input else pb.TritonError.INTERNAL
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, code))


def string_tensor(name: str, values: Sequence[Any]) -> Any:
    """A BYTES output: an object array of UTF-8 bytes, one row per text."""
    array = np.array([[str(value).encode("utf-8")] for value in values], dtype=np.object_)
    return pb_utils().Tensor(name, array)


def string_matrix(name: str, rows: Sequence[Sequence[str]]) -> Any:
    array = np.array([[value.encode("utf-8") for value in row] for row in rows], dtype=np.object_)
    return pb_utils().Tensor(name, array.reshape(len(rows), -1))


def float_tensor(name: str, values: Any) -> Any:
    return pb_utils().Tensor(name, np.ascontiguousarray(values, dtype=np.float32))


def ranked_labels_response(scores: np.ndarray[Any, Any], labels: Sequence[str], top_k: int | None = None) -> Any:
    """LABEL, SCORE (the best label per row) and LABELS, SCORES (the ``top_k`` best, best first)."""
    order = np.argsort(-scores, axis=1)[:, : top_k or len(labels)]
    ranked_scores = np.take_along_axis(scores, order, axis=1)
    ranked_labels = [[labels[index] for index in row] for row in order]
    return pb_utils().InferenceResponse(
        output_tensors=[
            string_tensor("LABEL", [row[0] for row in ranked_labels]),
            float_tensor("SCORE", ranked_scores[:, :1]),
            string_matrix("LABELS", ranked_labels),
            float_tensor("SCORES", ranked_scores),
        ]
    )


def respond(requests: Sequence[Any], gathered: Gathered, answer: Callable[[Any, slice], Any]) -> list[Any]:
    """One response per request, in order: ``answer(request, rows)`` or that request's error.

    ``answer`` may raise ``BadRequest`` for an input that only it checks (TOP_K ...); that
    request alone gets the error, the others their results.
    """
    responses = []
    for request, rows in zip(requests, gathered.rows, strict=False):
        if isinstance(rows, str):
            responses.append(error_response(rows))
            continue
        try:
            responses.append(answer(request, rows))
        except BadRequest as exc:
            responses.append(error_response(str(exc)))
    return responses


def pool(last_hidden_state: Any, attention_mask: Any, pooling: str) -> Any:
    """One vector per text: the first token (``cls``) or the mean of the real tokens (``mean``)."""
    if pooling == "cls":
        return last_hidden_state[:, 0]
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    return (last_hidden_state * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
