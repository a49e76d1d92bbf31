"""The exact Python packages a model repository needs to be served, pinned.

A gallery repository carries its own code (model.py and tritonhf_runtime/ per model), so a
Triton image needs no tritonhf: only what the templates import, at the versions this
workspace's stub environment serves with (numpy < 2: Triton 2.51's stub predates numpy 2).
"""

from __future__ import annotations

from pathlib import Path

from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.errors import DeployError
from tritonhf.gallery.config import parameters_of, parse_config
from tritonhf.runtime.audio import PARAM_ENCODER
from tritonhf.tasks import PARAM_BACKEND, PARAM_ENGINE, PARAM_ONNX_MODEL, PARAM_TASK, TASKS

ALWAYS = ["numpy", "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub"]
_SENTENCEPIECE_FILES = ("spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "source.spm")


def needed_packages(repository: Path) -> list[str]:
    """Distribution names the repository's models import (beyond the standard library)."""
    names = list(ALWAYS)
    folders = sorted(p for p in repository.iterdir() if (p / "config.pbtxt").is_file()) if repository.is_dir() else []
    if not folders:
        raise DeployError(f"{repository} holds no model (NAME/config.pbtxt).")
    for folder in folders:
        params = parameters_of(parse_config((folder / "config.pbtxt").read_text(), where=f"{folder.name}/config.pbtxt"))
        if params.get(PARAM_BACKEND) == "onnx" and not params.get(PARAM_ONNX_MODEL):
            names.append("onnxruntime")  # onnxruntime inside the Python backend
        task = TASKS.get(params.get(PARAM_TASK, ""))
        speech = task is not None and task.takes_audio
        if params.get(PARAM_BACKEND) == "openvino" and params.get(PARAM_ENGINE) != "openvino" and not speech:
            names.append("openvino")  # an encoder's model.onnx run by OpenVINO (the GGUF engine is listed below)
        if params.get(PARAM_ENGINE) == "openvino" or (speech and params.get(PARAM_BACKEND) == "openvino"):
            names += ["openvino", "openvino-genai", "openvino-tokenizers"]  # a GGUF file's or a Whisper's pipeline
        if params.get(PARAM_ENGINE) == "llamacpp":
            names.append("xllamacpp")  # llama.cpp's slots over the GGUF file
        if task is not None and task.takes_images:
            names.append("pillow")  # decoding the images requests carry
        if task is not None and task.takes_audio:
            names += ["soundfile", "soxr"]  # decoding (libsndfile) and resampling the audio requests carry
        if params.get(PARAM_BACKEND) == "ctranslate2":
            names.append("ctranslate2")  # Whisper converted at gallery add (weights/ct2)
        if params.get(PARAM_ENCODER) == "openvino":
            names.append("openvino")  # its encoder on OpenVINO (weights/ct2/openvino_encoder.xml)
        if params.get(PARAM_TASK) in ("text-generation", "text2text-generation"):
            names.append("jinja2")  # chat templates
        if params.get(PARAM_TASK) == "text-generation":
            names += ["xgrammar", "apache-tvm-ffi"]  # response_format and required tool calls (runtime/grammars.py)
        files = {path.name for path in folder.rglob("*") if path.is_file()}
        if files & set(_SENTENCEPIECE_FILES) and "tokenizer.json" not in files:
            names += ["sentencepiece", "protobuf"]  # a slow tokenizer: no tokenizer.json to load fast
    return list(dict.fromkeys(names))


def serving_requirements(repository: Path, environment: StubEnvironment) -> list[str]:
    """``name==version`` lines: the stub environment's versions (local labels like +cpu dropped, so a
    GPU image gets the CUDA build of the same release)."""
    names = needed_packages(repository)
    versions = environment.versions(names)
    missing = [name for name, version in versions.items() if version is None]
    if missing:
        raise DeployError(
            f"The stub environment ({environment.prefix}) lacks {', '.join(missing)}, which the repository's "
            f"models import. Install them there (python -m pip install {' '.join(missing)}) and run this again."
        )
    return [f"{name}=={str(version).split('+')[0]}" for name, version in versions.items()]
