"""The ONNX Runtime path: export a model to ONNX once, check it against PyTorch, serve it.

``gallery add ... --backend onnx`` exports the model with dynamic batch and sequence axes
into the vendored weights folder (``weights/model.onnx``, beside the config and tokenizer),
runs both versions on sample texts and refuses the export if any output differs by more
than ``TOLERANCE``. The same template then runs it, either with onnxruntime inside the
Python backend, or (when the server has Triton's native onnxruntime backend) by calling a
second model that holds only ``model.onnx``. Clients see the same tensors either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError

TOLERANCE = 1e-3
ONNX_FILE = "model.onnx"
SAMPLES = ["This movie is absolutely wonderful", "short", "Alice met Bob in Paris to talk about the new office."]
# task -> (transformers auto class, the output the template reads)
EXPORTABLE = {
    "text-classification": ("AutoModelForSequenceClassification", "logits"),
    "feature-extraction": ("AutoModel", "last_hidden_state"),
    "zero-shot-classification": ("AutoModel", "last_hidden_state"),
}


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the file, its input and output names, and how close it is to PyTorch."""

    path: Path
    inputs: tuple[str, ...]  # input_ids, attention_mask[, token_type_ids]: what the tokenizer gives
    output: str  # logits | last_hidden_state
    output_dims: tuple[int, ...]  # without batch (and sequence) axes: (num_labels,) or (hidden_size,)
    max_abs_diff: float


def check_exportable(task: str) -> None:
    if task not in EXPORTABLE:
        raise GalleryError(
            f"--backend onnx supports {', '.join(EXPORTABLE)}; {task} is served with PyTorch (drop --backend onnx)."
        )


def export(task: str, folder: Path, destination: Path, progress: Progress) -> Exported:
    """Export ``folder``'s model for ``task`` to ``destination/model.onnx``, checked against PyTorch."""
    check_exportable(task)
    try:
        import numpy as np
        import onnxruntime
        import torch
        import transformers
    except ImportError as exc:
        raise GalleryError(f"--backend onnx needs onnx and onnxruntime: pip install 'tritonhf[onnx]' ({exc}).") from exc
    class_name, output = EXPORTABLE[task]
    progress.step(f"Exporting to ONNX (dynamic batch and sequence axes), checking against PyTorch within {TOLERANCE}")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = getattr(transformers, class_name).from_pretrained(folder, dtype=torch.float32).eval()
    sample = tokenizer(SAMPLES, padding=True, return_tensors="pt")
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]

    class Wrapper(torch.nn.Module):  # keyword arguments in, one named tensor out
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return getattr(self.model(**dict(zip(names, inputs))), output)

    with torch.inference_mode():  # before exporting: tracing can leave the module changed
        reference = getattr(model(**sample), output).numpy()
    path = destination / ONNX_FILE
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, output]}
    try:
        torch.onnx.export(
            Wrapper(),
            tuple(sample[name] for name in names),
            str(path),
            dynamo=False,
            input_names=names,
            output_names=[output],
            dynamic_axes=axes,
            opset_version=17,
        )
    except Exception as exc:  # the exporter raises many kinds
        raise ModelSourceError(f"Could not export {folder} to ONNX: {exc}") from exc
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    exported = session.run(None, {name: sample[name].numpy().astype(np.int64) for name in names})[0]
    if output == "last_hidden_state":  # padding positions are masked out by pooling: compare the rest
        mask = sample["attention_mask"].numpy().astype(bool)
        exported, reference = exported[mask], reference[mask]
    difference = float(np.abs(exported - reference).max())
    if difference > TOLERANCE:
        path.unlink(missing_ok=True)
        raise ModelSourceError(
            f"The ONNX export of {folder} differs from PyTorch by {difference:.2e} (> {TOLERANCE}); serve it with "
            "PyTorch (drop --backend onnx)."
        )
    return Exported(path, tuple(names), output, tuple(reference.shape[-1:]), difference)
