"""What a client needs of a model's config, read from either protocol's JSON (the SDK, bootstrap's admin)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonhf.tasks import (
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MAX_IMAGES,
    IMAGE_CHAT,
    PARAM_BACKEND,
    PARAM_BACKEND_REASON,
    PARAM_BATCH_INVARIANT,
    PARAM_ENGINE,
    PARAM_MATRYOSHKA,
    PARAM_MAX_IMAGE_BYTES,
    PARAM_MAX_IMAGE_PIXELS,
    PARAM_MAX_IMAGES,
    PARAM_REASONING,
    PARAM_TASK,
    wire_datatype,
)


@dataclass(frozen=True)
class ImageLimits:
    """What one request to an image chat model may carry (the model's config; past them, a 4xx naming the limit)."""

    images: int  # images per request
    pixels: int  # pixels per image, read from its header before anything is decoded
    bytes: int  # bytes per encoded image


@dataclass(frozen=True)
class ModelConfig:
    """What the SDK needs of a model's config, read from either protocol's JSON."""

    name: str
    max_batch_size: int = 0
    inputs: Mapping[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # name -> (datatype, dims)
    outputs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # name -> dims
    task: str | None = None
    decoupled: bool = False
    instances: int = 1  # copies of the model that compute at once (instance_group counts)
    # False only for a generation model on OpenVINO added with batch_invariant=false: its answers may change
    # with their batch-mates (every other model answers each input as it would alone).
    batch_invariant: bool = True
    matryoshka: bool = False  # added with --param matryoshka=true: its vectors may be cut to their first N components
    reasoning: bool = False  # a generation model whose chat template thinks (<think>): its thinking comes apart
    engine: str = ""  # what computes it (gallery add's choice: transformers, openvino, onnx, pytorch ...)
    engine_reason: str = ""  # why: what gallery add measured on the machine it was added on
    images: ImageLimits | None = None  # an image chat model's limits

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ModelConfig:
        """HTTP's config JSON, or gRPC's (``{"config": {...}}``, 64-bit numbers as strings)."""
        config = raw.get("config", raw) if isinstance(raw.get("config"), Mapping) else raw
        inputs = {
            str(item["name"]): (
                wire_datatype(str(item.get("data_type", "TYPE_STRING"))),
                tuple(int(dim) for dim in item.get("dims", [])),
            )
            for item in config.get("input", [])
        }
        outputs = {
            str(item["name"]): tuple(int(dim) for dim in item.get("dims", [])) for item in config.get("output", [])
        }
        params = {str(key): str(value.get("string_value", "")) for key, value in config.get("parameters", {}).items()}
        task = params.get(PARAM_TASK)
        policy = config.get("model_transaction_policy", {})
        return cls(
            name=str(config.get("name", "")),
            max_batch_size=int(config.get("max_batch_size", 0) or 0),
            inputs=inputs,
            outputs=outputs,
            task=str(task) if task else None,
            decoupled=bool(policy.get("decoupled", False)),
            instances=max(sum(int(group.get("count", 1) or 1) for group in config.get("instance_group", [])), 1),
            batch_invariant=params.get(PARAM_ENGINE) != "openvino" or params.get(PARAM_BATCH_INVARIANT) != "false",
            matryoshka=params.get(PARAM_MATRYOSHKA, "").lower() == "true",
            reasoning=params.get(PARAM_REASONING) == "think",
            engine=params.get(PARAM_ENGINE) or params.get(PARAM_BACKEND) or "",
            engine_reason=params.get(PARAM_BACKEND_REASON, ""),
            images=_image_limits(params) if task == IMAGE_CHAT else None,
        )


def _image_limits(params: Mapping[str, str]) -> ImageLimits:
    def limit(name: str, default: int) -> int:
        try:
            return int(params.get(name, default))
        except ValueError:  # the template refuses to load with it: the default is no worse a guess here
            return default

    return ImageLimits(limit(PARAM_MAX_IMAGES, DEFAULT_MAX_IMAGES), limit(PARAM_MAX_IMAGE_PIXELS,
                       DEFAULT_MAX_IMAGE_PIXELS), limit(PARAM_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_BYTES))  # fmt: skip
