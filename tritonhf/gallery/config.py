"""config.pbtxt from a task signature, built as Triton's own ``ModelConfig`` protobuf.

Building the message (rather than formatting text) means every field name and enum is
checked by protobuf, and user-given values (a source path, a parameter) are escaped by
the text-format writer instead of being pasted into a template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonhf.bootstrap.autocomplete import GALLERY_HEADER
from tritonhf.errors import GalleryError
from tritonhf.tasks import PARAM_PART_OF, Task, TensorSpec

DEVICES = ("auto", "cpu", "gpu")

_HEADER = (
    GALLERY_HEADER + " from the {task} template.\n"
    "# Fields are Triton's ModelConfig (model_config.proto); `tritonhf gallery validate` checks them.\n"
    "# dynamic_batching with no queue delay, one instance on all cores: a lone request does not\n"
    "# wait, and requests that arrive while the model is busy are batched together. A queue delay or\n"
    "# a second instance made a lone request slower on a CPU; two instances can raise throughput for\n"
    "# clients calling Triton directly at high concurrency, not behind tritonhf's gateway (bench/batching.py,\n"
    "# the figures in tritonhf's docs/performance.md). On a GPU, try preferred_batch_size and a small delay.\n"
)


_PART_HEADER = (
    "# Written by `tritonhf gallery add --backend onnx`: the forward pass of model {owner}, run by\n"
    "# Triton's native onnxruntime backend. {owner}'s model.py tokenizes the texts of all its requests,\n"
    "# sends them here as one batch (a BLS call), and turns the answer into its outputs. No batch axis\n"
    "# of its own (max_batch_size 0): {owner} batches; this model runs whatever batch it is given.\n"
)


@dataclass(frozen=True)
class ModelOptions:
    """What `gallery add` lets the user choose about how a model is served."""

    max_batch_size: int = 0  # 0: the task's default
    instances: int = 1
    device: str = "auto"
    # Requests Triton queues for the model before it answers UNAVAILABLE ("Exceeds maximum queue size"):
    # -1 is the default (four full batches), 0 no bound. A backstop against queueing without end: once
    # Triton refuses, the requests it admits stall (tests/integration/test_overload.py), so the gateway's
    # --max-concurrent-requests is where overload is refused in normal operation.
    max_queue_size: int = -1
    # Speech: a decoupled model that answers in parts as each window ends (gallery add --stream).
    stream: bool = False
    # Media: the largest image (width x height) and the longest audio a request may send, checked from the
    # file's header before it is decoded (0: the template's default); written as the model's parameters.
    max_image_pixels: int = 0
    max_audio_seconds: int = 0
    parameters: Mapping[str, str] = field(default_factory=dict)
    output_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # e.g. EMBEDDING -> (384,)

    def check(self, task: Task) -> None:
        if self.stream and not task.takes_audio:
            raise GalleryError(
                f"--stream is for automatic-speech-recognition; {task.name} models stream or not by their task."
            )
        if not 0 <= self.max_batch_size <= 4096:
            raise GalleryError(f"--max-batch-size must be between 1 and 4096, not {self.max_batch_size}.")
        if not 1 <= self.instances <= 64:
            raise GalleryError(f"--instances must be between 1 and 64, not {self.instances}.")
        for option, value, fits, kind in (
            ("--max-image-pixels", self.max_image_pixels, task.takes_images, "image"),
            ("--max-audio-seconds", self.max_audio_seconds, task.takes_audio, "speech"),
        ):
            if value < 0:
                raise GalleryError(f"{option} must be 1 or more (0: the template's default), not {value}.")
            if value and not fits:
                raise GalleryError(f"{option} is for {kind} tasks; {task.name} models take no {kind} input.")
        if self.max_queue_size < -1:
            raise GalleryError(f"--max-queue-size must be 0 (no bound) or more, not {self.max_queue_size}.")
        if self.device not in DEVICES:
            raise GalleryError(f"--device must be one of {', '.join(DEVICES)}, not {self.device!r}.")


QUEUED_BATCHES = 4  # the default queue bound, in full batches


def _tensor(spec: TensorSpec, message: Any, dims: tuple[int, ...] | None = None) -> None:
    message.name = spec.name
    message.data_type = mc.DataType.Value(spec.data_type)
    message.dims.extend(dims or spec.dims)


def _add_instances(config: mc.ModelConfig, options: ModelOptions) -> None:
    group = config.instance_group.add()
    group.count = options.instances
    # KIND_GPU makes Triton place one instance per GPU; "auto" lets model.py use a GPU if there is one.
    group.kind = mc.ModelInstanceGroup.KIND_GPU if options.device == "gpu" else mc.ModelInstanceGroup.KIND_CPU


def build_config(task: Task, name: str, options: ModelOptions) -> mc.ModelConfig:
    """The ModelConfig for a model of ``task`` called ``name``."""
    options.check(task)
    config = mc.ModelConfig(name=name, backend="python")
    config.max_batch_size = options.max_batch_size or task.default_max_batch_size
    for spec in task.inputs:
        tensor = config.input.add()
        _tensor(spec, tensor)
        tensor.optional = spec.optional
    for spec in task.outputs:
        _tensor(spec, config.output.add(), options.output_dims.get(spec.name))
    config.dynamic_batching.SetInParent()
    queue = QUEUED_BATCHES * config.max_batch_size if options.max_queue_size == -1 else options.max_queue_size
    if queue and not task.decoupled:  # decoupled templates keep their own queue (parameter max_waiting)
        config.dynamic_batching.default_queue_policy.max_queue_size = queue
    _add_instances(config, options)
    if task.decoupled or options.stream:
        config.model_transaction_policy.decoupled = True
    for key, value in sorted(options.parameters.items()):
        config.parameters[key].string_value = value
    return config


def build_onnx_part_config(
    name: str,
    owner: str,
    inputs: Sequence[str],
    output: str,
    output_dims: Sequence[int],
    options: ModelOptions,
    rank: int = 0,
) -> mc.ModelConfig:
    """The config of the model that runs ``owner``'s model.onnx on Triton's onnxruntime backend.

    Inputs are token tensors [batch, sequence] INT64; the output is ``logits`` [batch, labels]
    or ``last_hidden_state`` [batch, sequence, hidden]. A warm-up request runs at load time.
    """
    config = mc.ModelConfig(name=name, backend="onnxruntime", max_batch_size=0)
    for input_name in inputs:
        config.input.add(name=input_name, data_type=mc.TYPE_INT64, dims=[-1, -1])
    rank = rank or (2 if output == "logits" else 3)  # [batch, labels] or [batch, sequence, hidden|labels]
    rank_dims = [-1] * (rank - len(output_dims)) + list(output_dims)
    config.output.add(name=output, data_type=mc.TYPE_FP32, dims=rank_dims)
    _add_instances(config, options)
    warmup = config.model_warmup.add(name="eight tokens", batch_size=1)
    for input_name in inputs:
        sample = warmup.inputs[input_name]
        sample.data_type = mc.TYPE_INT64
        sample.dims.extend([1, 8])
        sample.zero_data = True
    config.parameters[PARAM_PART_OF].string_value = owner
    return config


def part_config_to_text(config: mc.ModelConfig, owner: str) -> str:
    return _PART_HEADER.format(owner=owner) + str(text_format.MessageToString(config))


def config_to_text(config: mc.ModelConfig, task: Task, notes: Sequence[str] = ()) -> str:
    """The config as text, after a header of comments (and ``notes``: why this backend, measured quality)."""
    # A note may quote what a tool printed (an exporter's error): every line of it stays a comment.
    extra = "".join(f"# {part}\n" for line in notes for part in line.splitlines() or [""])
    return _HEADER.format(task=task.name) + extra + str(text_format.MessageToString(config))


def parse_config(text: str, where: str = "config.pbtxt") -> mc.ModelConfig:
    """Parse config text the way Triton does; a clear error with the line on failure."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise GalleryError(f"{where} does not parse as Triton's ModelConfig: {exc}") from exc
    return config


def parameters_of(config: mc.ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}
