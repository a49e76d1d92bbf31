"""The ONNX Runtime path: export a model to ONNX once, check it against PyTorch, serve it.

Encoder tasks take this path by default (``--backend auto``): ``gallery add`` exports the
model with dynamic batch and sequence axes, runs both versions on sample texts and keeps the
export only if every output is within ``TOLERANCE`` of PyTorch; otherwise the model is served
with PyTorch and ``gallery add`` says why. The same template runs it, either with onnxruntime
inside the Python backend, or (when the server has Triton's native onnxruntime backend) by
calling a second model that holds only ``model.onnx``. Clients see the same tensors.

``--quantize int8`` (opt-in) adds dynamic int8 quantization, measured on MiniLM here
(``make bench`` has the figures): ONNX Runtime's pre-processing, then per-channel int8 weights.
Per-channel keeps MiniLM's embeddings at cosine 0.993 mean / 0.990 min to fp32 where
per-tensor ("naive") gave 0.964 / 0.943. A quality gate runs at ``gallery add`` on a
calibration set (yours, or ``CALIBRATION``) and refuses the int8 model below ``GATES``
unless ``--force``; its figures go into the config.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError

TOLERANCE = 1e-3
ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
SAMPLES = ["This movie is absolutely wonderful", "short", "Alice met Bob in Paris to talk about the new office."]
# task -> (transformers auto class, the output the template reads)
EXPORTABLE = {
    "text-classification": ("AutoModelForSequenceClassification", "logits"),
    "text-ranking": ("AutoModelForSequenceClassification", "logits"),
    "token-classification": ("AutoModelForTokenClassification", "logits"),
    "feature-extraction": ("AutoModel", "last_hidden_state"),
    "zero-shot-classification": ("AutoModel", "last_hidden_state"),
    "fill-mask": ("AutoModelForMaskedLM", "logits"),
}
# What an int8 model must keep of the fp32 one, on the calibration texts.
GATES = {"cosine_mean": 0.99, "cosine_min": 0.97, "label_agreement": 0.97, "token_agreement": 0.95}
CALIBRATION = [
    "A cat sits on the mat.",
    "Stock markets fell sharply today after the central bank raised rates again.",
    "The soundtrack is beautiful and the photography stunning.",
    "What a waste of two hours.",
    "Alice met Bob in Paris to talk about the new Acme office.",
    "The recipe needs two eggs, a cup of flour and a pinch of salt.",
    "Rain is expected over the weekend in the north of Scotland.",
    "He fixed the bug in the parser before the release on Monday.",
    "Quantum computers use qubits that can hold superpositions.",
    "Please reset my password; I cannot log in to my account.",
    "The train from Berlin to Munich was delayed by an hour.",
    "She plays the violin in the London Symphony Orchestra.",
    "I loved every minute of it and would watch it again.",
    "The hotel room was dirty and the staff were rude.",
    "Apple and Microsoft reported earnings above expectations.",
    "ok",
]


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the file, its input and output names, and how close it is to PyTorch."""

    path: Path
    inputs: tuple[str, ...]  # input_ids, attention_mask[, token_type_ids]: what the tokenizer gives
    output: str  # logits | last_hidden_state
    output_dims: tuple[int, ...]  # without batch (and sequence) axes: (num_labels,) or (hidden_size,)
    max_abs_diff: float
    rank: int = 2  # of the output: 2 for [batch, labels], 3 for [batch, sequence, hidden|labels]


@dataclass(frozen=True)
class Quantized:
    path: Path
    figures: dict[str, float]  # the gate's measures
    passed: bool
    summary: str  # one line for the config and the console


def check_exportable(task: str) -> None:
    if task not in EXPORTABLE:
        raise GalleryError(
            f"--backend onnx supports {', '.join(EXPORTABLE)}; {task} is served with PyTorch (drop --backend onnx)."
        )


def onnx_available() -> str | None:
    """None when onnx and onnxruntime import, else why not (for `gallery add`'s explanation)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime is not installed ({exc.name}); pip install 'tritonhf[onnx]'"
    return None


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
    if reference.ndim == 2:
        axes[output] = {0: "batch"}
    try:
        # The tracer warns about what it cannot prove (shapes, data-dependent branches); the
        # export is checked against PyTorch below, which is the check those warnings ask for.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
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
    if reference.ndim == 3:  # padding positions are masked out downstream: compare the rest
        mask = sample["attention_mask"].numpy().astype(bool)
        exported, reference_checked = exported[mask], reference[mask]
    else:
        reference_checked = reference
    difference = float(np.abs(exported - reference_checked).max())
    if difference > TOLERANCE:
        path.unlink(missing_ok=True)
        raise ModelSourceError(f"the ONNX export differs from PyTorch by {difference:.2e} (> {TOLERANCE})")
    return Exported(path, tuple(names), output, tuple(reference.shape[-1:]), difference, reference.ndim)


def _session(path: Path) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def quantize(
    task: str, exported: Exported, folder: Path, texts: Sequence[str], pooling: str = "mean", target: Path | None = None
) -> Quantized:
    """int8 weights for ``exported`` (pre-processed, per channel), measured against fp32 on ``texts``."""
    import numpy as np
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if len(texts) < 4:
        raise GalleryError("The calibration set needs at least 4 texts (one per line).")
    target = target or exported.path.with_name(INT8_FILE)
    prepared = exported.path.with_name("model.pre.onnx")
    quant_pre_process(str(exported.path), str(prepared), skip_symbolic_shape=True)
    quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8, per_channel=True)
    prepared.unlink(missing_ok=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=512, return_tensors="np")
    outputs = []
    for path in (exported.path, target):
        session = _session(path)
        feeds = {i.name: batch[i.name].astype(np.int64) for i in session.get_inputs()}
        outputs.append(session.run(None, feeds)[0])
    fp32, int8 = outputs
    mask = batch["attention_mask"].astype(bool)
    figures: dict[str, float]
    if exported.output == "last_hidden_state":
        vectors = []
        for hidden in (fp32, int8):
            if pooling == "cls":
                pooled = hidden[:, 0]
            else:
                weights = mask[..., None].astype(np.float32)
                pooled = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
            vectors.append(pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12))
        cosine = (vectors[0] * vectors[1]).sum(1)
        figures = {"cosine_mean": float(cosine.mean()), "cosine_min": float(cosine.min())}
    elif exported.rank == 3:
        agree = (fp32.argmax(-1) == int8.argmax(-1))[mask]
        figures = {"token_agreement": float(agree.mean())}
    else:
        figures = {"label_agreement": float((fp32.argmax(-1) == int8.argmax(-1)).mean())}
    passed = all(value >= GATES[name] for name, value in figures.items())
    measured = ", ".join(f"{key.replace('_', ' ')} {value:.4f} (gate {GATES[key]})" for key, value in figures.items())
    summary = f"int8 vs fp32 on {len(texts)} calibration texts: {measured}"
    return Quantized(target, figures, passed, summary)
