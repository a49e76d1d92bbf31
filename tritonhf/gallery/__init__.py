"""Ready model.py + config.pbtxt templates for HuggingFace tasks, added to a model repository."""

from tritonhf.gallery.add import add_model, ensure_model
from tritonhf.gallery.config import ModelOptions, build_config, parse_config
from tritonhf.gallery.listing import ModelEntry, list_models, remove_model
from tritonhf.gallery.request import AddRequest
from tritonhf.gallery.validate import Problem, validate_repository

__all__ = [
    "AddRequest",
    "ModelEntry",
    "ModelOptions",
    "Problem",
    "add_model",
    "build_config",
    "ensure_model",
    "list_models",
    "parse_config",
    "remove_model",
    "validate_repository",
]
