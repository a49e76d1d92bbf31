"""A causal LM exported to OpenVINO IR for the OpenVINO engine (``--weight-format int4-ir``, ``int8-ir``, ``fp16-ir``).

OpenVINO GenAI reads a GGUF file directly, and that is the default; its IR export with int4 weights runs
faster on the same pipeline and batch-invariant settings (``bench/openvino_ir.py`` measures both; the figures
are in docs/performance.md). optimum-intel exports it (the
exporter OpenVINO GenAI's documentation uses), in the venv of its own that ``gallery add`` makes once for
Whisper (``openvino_exporter.exporter_python``: optimum-intel pins an older transformers); the export writes
the model and its tokenizer and detokenizer as OpenVINO models into ``weights/openvino``. From a GGUF source the
export starts from the weights transformers dequantizes (``models.convert_gguf``), so int4 there quantizes the
GGUF's weights a second time; ``gallery add`` measures the greedy agreement with transformers either way.
"""

from __future__ import annotations

from pathlib import Path

from tritonhf.gallery import openvino_exporter

IR_FOLDER = "openvino"
# --weight-format -> optimum-cli's options: int4 in groups of 64 (a group adjusted where a layer is narrower), every
# layer in int4; int8 per channel
IR_FORMATS = {
    "int4-ir": ["--weight-format", "int4", "--group-size", "64", "--group-size-fallback", "adjust", "--ratio", "1.0"],
    "int8-ir": ["--weight-format", "int8"],
    "fp16-ir": ["--weight-format", "fp16"],
}
EXPORTED_FILES = ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml")


def export(folder: Path, out: Path, weight_format: str) -> None:
    """The causal LM in ``folder`` (safetensors, config, tokenizer) as an OpenVINO IR in ``out``; a
    ModelSourceError says why it could not be (``--engine auto`` then serves with transformers)."""
    openvino_exporter.export_model(folder, out, "text-generation-with-past", IR_FORMATS[weight_format],
                                   EXPORTED_FILES, "Fix: --engine transformers serves it as it is")  # fmt: skip
