"""Loading a model inside the stub: parameters, tokenizer, weights (PyTorch, ONNX Runtime in
this process, or Triton's onnxruntime backend through BLS), device and threads.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    PARAM_BACKEND,
    PARAM_DEVICE,
    PARAM_MAX_SEQ_LENGTH,
    PARAM_ONNX_FILE,
    PARAM_ONNX_INPUTS,
    PARAM_ONNX_MODEL,
    PARAM_ONNX_OUTPUT,
    PARAM_ONNX_TOWERS,
    PARAM_THREADS,
    PARAM_TRUST_REMOTE_CODE,
    PARAM_WEIGHTS,
    VENDORED_WEIGHTS_DIR,
    pb_utils,
)


def model_config(args: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(args["model_config"]))


def parameters(args: dict[str, str]) -> dict[str, str]:
    """The config's ``parameters`` as a plain dict of strings."""
    return {key: value.get("string_value", "") for key, value in model_config(args).get("parameters", {}).items()}


def int_parameter(params: dict[str, str], name: str, default: int, minimum: int = 1) -> int:
    """An integer config parameter; a clear error at load time when it is not one."""
    raw = params.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"config parameter {name!r} is {raw!r}; it must be an integer >= {minimum}.")
    return value


class OnnxModel:
    """An exported ONNX file run by onnxruntime behind the PyTorch model's call.

    ``model(**batch).logits`` (or ``.last_hidden_state``) works the same, so a template
    does not change with the backend.
    """

    def __init__(self, folder: str, threads: int, file_name: str = "model.onnx") -> None:
        import onnxruntime
        from transformers import AutoConfig

        options = onnxruntime.SessionOptions()
        # One intra-op pool sized to this instance's share of the cores; inter-op parallelism
        # does not help these sequential graphs (measured in `make bench`).
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Its threads spin between the operators of one run (waking sleeping threads at every operator
        # slows a lone request) and stop spinning when the run ends: a pool that spins on after a batch
        # takes the cores that Triton, the stub's I/O and a gateway beside them need next. Both
        # alternatives measured slower on 2 cores (docs/performance.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        options.add_session_config_entry("session.force_spinning_stop", "1")
        self.session = onnxruntime.InferenceSession(
            str(Path(folder) / file_name), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = [tensor.name for tensor in self.session.get_inputs()]
        # token ids and masks are int64, an image's pixel_values float32: each input as the graph declares it
        self.dtypes = {tensor.name: _dtype(tensor.type) for tensor in self.session.get_inputs()}
        self.output = self.session.get_outputs()[0].name  # logits or last_hidden_state, named at export
        self.config = AutoConfig.from_pretrained(folder)
        self.device = _cpu()  # transformers' pipelines (used only to post-process) ask for it

    def __call__(self, **batch: Any) -> Any:
        import types

        import torch

        feeds = {name: batch[name].cpu().numpy().astype(self.dtypes[name]) for name in self.inputs}
        (result,) = self.session.run([self.output], feeds)
        return types.SimpleNamespace(**{self.output: torch.from_numpy(result)})

    def to(self, device: str) -> OnnxModel:
        return self

    def eval(self) -> OnnxModel:
        return self


class OpenVinoModel(OnnxModel):
    """The same exported ONNX file run by OpenVINO (``--backend openvino``), behind the same call."""

    def __init__(self, folder: str, threads: int, file_name: str = "model.onnx") -> None:
        import openvino
        from transformers import AutoConfig

        # Latency hint and this instance's share of the cores, as ONNX Runtime gets them; f32, as checked at
        # `gallery add` (on a CPU with bf16, OpenVINO's default precision, answers moved by 2e-2 on MiniLM).
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
        self.compiled = openvino.Core().compile_model(str(Path(folder) / file_name), "CPU", config)
        self.inputs = [_port_name(port) for port in self.compiled.inputs]
        self.dtypes = {
            _port_name(port): _dtype(port.get_element_type().get_type_name()) for port in self.compiled.inputs
        }
        self.output = _port_name(self.compiled.output(0))
        self.config = AutoConfig.from_pretrained(folder)
        self.device = _cpu()

    def __call__(self, **batch: Any) -> Any:
        import types

        import torch

        request = self.compiled.create_infer_request()
        feeds = {name: batch[name].cpu().numpy().astype(self.dtypes[name]) for name in self.inputs}
        result = request.infer(feeds)[self.compiled.output(0)]
        return types.SimpleNamespace(**{self.output: torch.from_numpy(np.array(result))})


def _port_name(port: Any) -> str:
    """The graph's own name of an OpenVINO port. A port can carry several tensor names (an input that feeds
    straight into a Cast also gets the Cast's ``/vision_model/...`` name); the exporter's internal names
    start with ``/``, the graph's inputs and outputs do not."""
    names = sorted(port.get_names())
    plain = [name for name in names if not name.startswith("/")]
    return str((plain or names or [port.get_any_name()])[0])


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
        self.device = _cpu()

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


def _dtype(declared: str) -> Any:
    """numpy's dtype for an input type as ONNX Runtime ("tensor(float)") or OpenVINO ("f32") names it."""
    return np.float32 if "float" in declared or declared in ("f32", "f16") else np.int64


def _cpu() -> Any:
    import torch

    return torch.device("cpu")


def forward_is_local(model: Any) -> bool:
    """False when the forward pass is another Triton model: no warm-up call during initialize."""
    return bool(getattr(model, "runs_in_this_process", True))


def load_tokenizer(args: dict[str, str], params: dict[str, str], padding_side: str | None = "right") -> Any:
    """The tokenizer saved beside the weights (or of the hub id, with --no-vendor).

    Encoder templates pool the first token or slice rows by length, so they pad on the right,
    whatever the tokenizer was saved with; generation pads on the left.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        weights_location(args, params), trust_remote_code=trust_remote_code(params)
    )
    if padding_side is not None:
        tokenizer.padding_side = padding_side
    return tokenizer


def load_model(auto_class: Any, args: dict[str, str], params: dict[str, str], device_name: str) -> Any:
    """The model as PyTorch (the default) or, when added with --backend onnx, as an OnnxModel
    (onnxruntime in this process) or a TritonOnnxModel (Triton's onnxruntime backend)."""
    source = weights_location(args, params)
    if params.get(PARAM_BACKEND) == "onnx" and params.get(PARAM_ONNX_MODEL):
        inputs = params.get(PARAM_ONNX_INPUTS, "input_ids,attention_mask").split(",")
        return TritonOnnxModel(params[PARAM_ONNX_MODEL], inputs, params.get(PARAM_ONNX_OUTPUT, "logits"), source)
    file_name = params.get(PARAM_ONNX_FILE, "model.onnx")
    if params.get(PARAM_BACKEND) == "openvino":
        return OpenVinoModel(source, threads=instance_threads(args), file_name=file_name)
    if params.get(PARAM_BACKEND) == "onnx":
        return OnnxModel(source, threads=instance_threads(args), file_name=file_name)
    model = auto_class.from_pretrained(
        source, dtype=torch_dtype(device_name), trust_remote_code=trust_remote_code(params)
    )
    return model.to(device_name).eval()


def load_towers(args: dict[str, str], params: dict[str, str]) -> tuple[Any, Any] | None:
    """An image-text model exported as two graphs (``--backend auto|onnx|openvino``): its (vision, text)
    towers, each called as ``tower(**inputs).image_embeds`` / ``.text_embeds``; None when it is served
    with PyTorch. ONNX Runtime or OpenVINO, as ``gallery add`` chose."""
    towers = params.get(PARAM_ONNX_TOWERS)
    if not towers:
        return None
    source = weights_location(args, params)
    engine = OpenVinoModel if params.get(PARAM_BACKEND) == "openvino" else OnnxModel
    vision, text = towers.split(",")
    return engine(source, instance_threads(args), vision), engine(source, instance_threads(args), text)


def engine_class(name: str, parameter: str, option: str) -> Any:
    """The engine a config names (``parameter``, written by ``gallery add``'s ``option``): the class ``ENGINE`` of
    the module ``NAME_engine.py`` beside the template's model.py, copied there by ``gallery add`` from its
    registry of engines (``tritonhf/gallery/families/*/engines.py``, one list per family). A ValueError naming the
    way out when there is no such module; an engine whose own import fails raises that error."""
    try:
        module = importlib.import_module(f"{name}_engine")
    except ModuleNotFoundError as error:
        if error.name != f"{name}_engine":  # the engine's own import failed: that is the error to read
            raise
        raise ValueError(
            f"parameter {parameter} is {name!r}, and there is no {name}_engine.py beside model.py: add the model "
            f"again with gallery add {option} NAME."
        ) from error
    return module.ENGINE


def trust_remote_code(params: dict[str, str]) -> bool:
    """Run code shipped with the model? Only when added with --trust-remote-code."""
    return params.get(PARAM_TRUST_REMOTE_CODE) == "true"


def weights_location(args: dict[str, str], params: dict[str, str]) -> str:
    """Where to load weights from: the vendored folder, a local path, or a hub id (--no-vendor)."""
    location = params.get(PARAM_WEIGHTS, VENDORED_WEIGHTS_DIR)
    version_dir = Path(args["model_repository"]) / args["model_version"]
    if (version_dir / location).exists():
        return str(version_dir / location)
    return location


def device(args: dict[str, str], params: dict[str, str]) -> str:
    """``cuda:N`` when the instance is a GPU one (or "auto" finds a GPU), else ``cpu``."""
    import torch

    wanted = params.get(PARAM_DEVICE, "auto")
    if params.get(PARAM_BACKEND) in OWN_POOL_ENGINES:
        return "cpu"  # ONNX Runtime's CPU execution provider, OpenVINO's CPU plugin
    gpu_wanted = args.get("model_instance_kind") == "GPU" or wanted in ("gpu", "auto")
    if gpu_wanted and torch.cuda.is_available():
        return f"cuda:{args.get('model_instance_device_id', '0')}"
    return "cpu"


def torch_dtype(device_name: str) -> Any:
    """fp16 on a GPU (half the memory, tensor cores), fp32 on the CPU (fast kernels there)."""
    import torch

    return torch.float16 if device_name.startswith("cuda") else torch.float32


def instance_threads(args: dict[str, str]) -> int:
    """Intra-op threads per instance: the ``threads`` parameter, else cores/N for N instances."""
    groups = model_config(args).get("instance_group", [{}])
    instances = max(1, sum(int(group.get("count", 1)) for group in groups))
    return int_parameter(parameters(args), PARAM_THREADS, max(1, (os.cpu_count() or 1) // instances))


# Engines that run the forward pass on a thread pool of their own (``--backend``); torch only glues.
OWN_POOL_ENGINES = ("onnx", "openvino")


def torch_threads(args: dict[str, str]) -> int:
    """torch's intra-op threads for this instance: its share of the cores when torch runs the model, one
    when ONNX Runtime or OpenVINO does. There torch only pads and pools between passes, on tensors small
    enough that a second thread saves nothing; but each such op wakes torch's OpenMP pool, which then
    spins on the cores the engine's threads need for the next pass (measured in docs/performance.md)."""
    if parameters(args).get(PARAM_BACKEND) in OWN_POOL_ENGINES:
        return 1
    return instance_threads(args)


def limit_threads(args: dict[str, str]) -> None:
    """Share the cores between instances (torch's intra-op thread pool; see ``torch_threads``)."""
    import torch

    torch.set_num_threads(torch_threads(args))


def eos_ids(folder: str, config: Any, tokenizer: Any) -> set[int]:
    """A causal LM's end-of-text ids: its generation config's, else its model config's, else its tokenizer's."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(folder).eos_token_id
    except OSError:  # no generation_config.json: the model config's, else the tokenizer's
        eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return set(eos if isinstance(eos, list) else [eos]) - {None}


def max_length(tokenizer: Any, config: Any, default: int = 512, params: dict[str, str] | None = None) -> int:
    """The longest input the model takes, in tokens (special tokens included). A sentence-transformers model's
    ``max_seq_length`` (parameter) replaces the tokenizer's limit, as its library cuts there."""
    declared = int_parameter(params or {}, PARAM_MAX_SEQ_LENGTH, 0, minimum=0)
    tokenizer_limit = declared or getattr(tokenizer, "model_max_length", None)
    limits = [
        value
        for value in (tokenizer_limit, getattr(config, "max_position_embeddings", None))
        if isinstance(value, int) and 0 < value < 1_000_000
    ]
    return min(limits) if limits else default


def start(
    args: dict[str, str], auto_class: Any, padding_side: str | None = "right"
) -> tuple[dict[str, str], str, Any, Any]:
    """What a text template's ``initialize`` begins with, in one call: (its parameters, the device, the tokenizer,
    the model). The threads are limited to the instance's share first; the model is PyTorch, or ONNX Runtime when
    the model was added with ``--backend onnx`` (``load_model``)."""
    params = parameters(args)
    limit_threads(args)
    where = device(args, params)
    tokenizer = load_tokenizer(args, params, padding_side)
    return params, where, tokenizer, load_model(auto_class, args, params, where)
