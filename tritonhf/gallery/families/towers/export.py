"""Image-text models (CLIP, SigLIP) as two ONNX graphs: the vision tower and the text tower.

The template needs each tower on its own (an image's vector, a text's vector; labels are texts),
so ``gallery add`` exports ``vision.onnx`` (pixel_values -> image_embeds, dynamic batch) and
``text.onnx`` (input_ids [and attention_mask] -> text_embeds, dynamic batch and sequence; SigLIP's
text tower takes no mask, as it was trained) from the model's own ``get_image_features`` and
``get_text_features``. Each is kept only when it gives PyTorch's vectors within
``TOLERANCE`` on sample images and texts (sizes and lengths that differ); the scale
(and SigLIP's bias) that turn cosines into label scores are read here and written into the
config, so the PyTorch weights need not be kept. Why: on a CPU ONNX Runtime and OpenVINO run
CLIP's vision tower well ahead of PyTorch (``make bench``: bench/clip.py).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery.onnx_engines import SAMPLES, TOLERANCE, image_samples
from tritonhf.runtime.common import PARAM_LOGIT_BIAS, PARAM_LOGIT_SCALE, PARAM_ONNX_DIFF, PARAM_ONNX_TOWERS

VISION, TEXT = "vision.onnx", "text.onnx"


@dataclass(frozen=True)
class Towers:
    """What the export wrote, and the figures the config keeps."""

    vision: Path
    text: Path
    text_inputs: tuple[str, ...]
    max_abs_diff: float
    parameters: dict[str, str]
    pixels: dict[str, Any]  # the sample inputs the graphs were checked on, for later checks and timing
    texts: dict[str, Any]


def _features(output: Any) -> Any:
    """transformers 5 may return a model output holding the pooled projection; older versions the tensor."""
    import torch

    return output if isinstance(output, torch.Tensor) else output.pooler_output


def samples(folder: Path) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(pixel inputs, text inputs, is SigLIP): three images of other sizes, three texts of other lengths,
    as the template prepares them (SigLIP's texts padded to the full length, without a mask)."""
    import numpy as np
    import transformers

    pixels = image_samples(folder)
    config = transformers.AutoConfig.from_pretrained(folder)
    siglip = str(config.model_type).startswith("siglip")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    if siglip:
        encoded = tokenizer(SAMPLES, padding="max_length", truncation=True, return_tensors="np")
        texts = {"input_ids": encoded["input_ids"].astype(np.int64)}
    else:
        encoded = tokenizer(SAMPLES, padding=True, truncation=True, return_tensors="np")
        texts = {name: encoded[name].astype(np.int64) for name in ("input_ids", "attention_mask")}
    return pixels, texts, siglip


def export(folder: Path, progress: Progress) -> Towers:
    """Write ``folder/vision.onnx`` and ``folder/text.onnx`` from the model in ``folder``, checked against PyTorch."""
    try:
        import numpy as np
        import onnxruntime
        import torch
        import transformers
    except ImportError as exc:
        raise GalleryError(f"ONNX export needs onnx and onnxruntime: pip install 'tritonhf[onnx]' ({exc}).") from exc
    progress.step(f"Exporting the vision and text towers to ONNX, checking against PyTorch within {TOLERANCE}")
    model = transformers.AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    pixels, texts, _ = samples(folder)

    class Vision(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: Any) -> Any:
            return _features(self.model.get_image_features(pixel_values=pixel_values))

    class Text(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return _features(self.model.get_text_features(**dict(zip(texts, inputs))))

    worst = 0.0
    for module, file_name, feeds, output in (
        (Vision(), VISION, pixels, "image_embeds"),
        (Text(), TEXT, texts, "text_embeds"),
    ):
        names = list(feeds)
        tensors = tuple(torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in names)
        with torch.inference_mode():
            reference = module(*tensors).numpy()
        axes = {name: {0: "batch"} if name == "pixel_values" else {0: "batch", 1: "sequence"} for name in names}
        path = folder / file_name
        try:
            with warnings.catch_warnings():  # the tracer's warnings ask for the check made below
                warnings.simplefilter("ignore")
                torch.onnx.export(module, tensors, str(path), dynamo=False, input_names=names, output_names=[output],
                                  dynamic_axes={**axes, output: {0: "batch"}}, opset_version=17)  # fmt: skip
        except Exception as exc:  # the exporter raises many kinds
            raise ModelSourceError(
                f"Could not export {folder}'s {file_name.split('.')[0]} tower to ONNX: {exc}"
            ) from exc
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        difference = float(np.abs(session.run(None, feeds)[0] - reference).max())
        if difference > TOLERANCE:
            raise ModelSourceError(f"the ONNX {file_name} differs from PyTorch by {difference:.2e} (> {TOLERANCE})")
        worst = max(worst, difference)
    parameters = {
        PARAM_ONNX_TOWERS: f"{VISION},{TEXT}",
        PARAM_LOGIT_SCALE: repr(float(model.logit_scale.detach().exp())),
        PARAM_ONNX_DIFF: f"{worst:.2e}",
    }
    bias = getattr(model, "logit_bias", None)
    if bias is not None:
        parameters[PARAM_LOGIT_BIAS] = repr(float(bias.detach()))
    return Towers(folder / VISION, folder / TEXT, tuple(texts), worst, parameters, pixels, texts)


def check_openvino(towers: Towers) -> float:
    """OpenVINO's run of both graphs against ONNX Runtime's (itself within the tolerance of PyTorch): the
    largest difference; ``ModelSourceError`` when OpenVINO is missing, fails, or differs by more."""
    try:
        import numpy as np
        import onnxruntime
        import openvino
    except ImportError as exc:
        raise ModelSourceError(f"OpenVINO is not installed ({exc})") from exc
    worst = 0.0
    for path, feeds in ((towers.vision, towers.pixels), (towers.text, towers.texts)):
        expected = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        try:
            compiled = openvino.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            got = compiled(feeds)[compiled.output(0)]
        except Exception as exc:  # OpenVINO raises its own kinds for graphs it cannot read or compile
            raise ModelSourceError(f"OpenVINO could not run {path.name}: {exc}") from exc
        worst = max(worst, float(np.abs(got - expected).max()))
    if worst > TOLERANCE:
        raise ModelSourceError(f"OpenVINO's run of the towers differs by {worst:.2e} (> {TOLERANCE})")
    return worst
