"""Which optional engines are installed here: None when one imports, else what to install (a line ``gallery add``
says when it serves a model without that engine)."""

from __future__ import annotations


def openvino_genai_missing() -> str | None:
    """None when OpenVINO GenAI can be imported here; else what to install."""
    try:
        import openvino_genai  # noqa: F401
    except ImportError as exc:
        return f"openvino-genai is not installed ({exc}; pip install 'tritonhf[openvino]')"
    return None


def openvino_available() -> bool:
    """Does OpenVINO (the runtime, not GenAI) import here?"""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def onnx_missing() -> str | None:
    """None when onnx and onnxruntime import, else why not (for `gallery add`'s explanation)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime is not installed ({exc.name}); pip install 'tritonhf[onnx]'"
    return None


def ctranslate2_missing() -> str | None:
    """None when CTranslate2 imports, else why not."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as exc:
        return f"ctranslate2 is not installed ({exc}; pip install 'tritonhf[audio]')"
    return None


def llamacpp_missing() -> str | None:
    """None when llama.cpp's Python build (xllamacpp) imports, else why not."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError as exc:
        return f"xllamacpp is not installed ({exc}; pip install 'tritonhf[llamacpp]')"
    return None
