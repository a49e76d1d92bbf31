"""Ready model.py + config.pbtxt templates for HuggingFace tasks, added to a model repository."""

from tritonhf.gallery.config import ModelOptions, build_config, parse_config
from tritonhf.gallery.repository import (
    AddRequest,
    ModelEntry,
    Problem,
    add_model,
    list_models,
    remove_model,
    validate_repository,
)

__all__ = [
    "AddRequest",
    "ModelEntry",
    "ModelOptions",
    "Problem",
    "add_model",
    "build_config",
    "list_models",
    "parse_config",
    "remove_model",
    "validate_repository",
]
