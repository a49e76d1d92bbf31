"""Which optional engines are installed here: None when one imports, else what to install (a line ``gallery add``
says when it serves a model without that engine)."""

from __future__ import annotations

import importlib


def _missing(modules: tuple[str, ...], package: str, extra: str) -> str | None:
    """None when every module imports, else which did not and what to install."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{package} is not installed ({exc.name or exc}); pip install 'tritonhf[{extra}]'"
    return None


def openvino_genai_missing() -> str | None:
    """None when OpenVINO GenAI can be imported here; else what to install."""
    return _missing(("openvino_genai",), "openvino-genai", "openvino")


def openvino_available() -> bool:
    """Does OpenVINO (the runtime, not GenAI) import here?"""
    return _missing(("openvino",), "openvino", "openvino") is None


def onnx_missing() -> str | None:
    """None when onnx and onnxruntime import, else why not (for `gallery add`'s explanation)."""
    return _missing(("onnx", "onnxruntime"), "onnxruntime", "onnx")


def ctranslate2_missing() -> str | None:
    """None when CTranslate2 imports, else why not."""
    return _missing(("ctranslate2",), "ctranslate2", "audio")


def llamacpp_missing() -> str | None:
    """None when llama.cpp's Python build (xllamacpp) imports, else why not."""
    return _missing(("xllamacpp",), "xllamacpp", "llamacpp")
