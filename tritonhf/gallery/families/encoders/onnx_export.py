"""The ONNX Runtime path: export a model to ONNX once, check it against PyTorch, serve it.

Encoder tasks take this path by default (``--backend auto``): ``gallery add`` exports the
model with dynamic batch and sequence axes, runs both versions on sample texts and keeps the
export only if every output is within ``TOLERANCE`` of PyTorch; otherwise the model is served
with PyTorch and ``gallery add`` says why. The same template runs it, either with onnxruntime
inside the Python backend, or (when the server has Triton's native onnxruntime backend) by
calling a second model that holds only ``model.onnx``. Clients see the same tensors.

``--quantize int8`` (opt-in) rewrites every MatMul with a constant weight to int8: weights
per output channel, activations per token (each token's own absolute maximum). Per token is
what keeps an input's answer independent of its batch: ONNX Runtime's dynamic quantization
takes one activation scale for the whole tensor, i.e. for the whole batch, so one text's
embedding moved with its neighbours (cosine 0.963 alone vs batched, measured on MiniLM here)
and a long text in a batch coarsened every short one. Per token, MiniLM's embeddings stay at
cosine 0.996 mean / 0.984 min to fp32 on ``CALIBRATION`` and are bit-identical alone and
batched; in-process at batch 32 on 2 cores it runs about as fast as dynamic quantization, ~2x fp32
(``make bench`` has the served figures). A quality gate runs at ``gallery add`` on a
calibration set (yours, or ``CALIBRATION``): it refuses the int8 model below ``GATES``, or if
any text's output alone differs from its output in the padded batch, unless ``--force``; its
figures go into the config.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery.onnx_engines import SAMPLES, TOLERANCE, image_samples
from tritonhf.runtime.common import PARAM_ZERO_SHOT_METHOD
from tritonhf.runtime.sentence import pool
from tritonhf.tasks import ONNX_MODEL_FILE

BATCH_DRIFT = 1e-4  # int8: largest difference allowed between a text alone and in a padded batch
ONNX_FILE = ONNX_MODEL_FILE
INT8_FILE = "model.int8.onnx"
# task -> (transformers auto class, the output the template reads)
EXPORTABLE = {
    "text-classification": ("AutoModelForSequenceClassification", "logits"),
    "text-ranking": ("AutoModelForSequenceClassification", "logits"),
    "token-classification": ("AutoModelForTokenClassification", "logits"),
    "feature-extraction": ("AutoModel", "last_hidden_state"),
    "zero-shot-classification": ("AutoModel", "last_hidden_state"),
    "fill-mask": ("AutoModelForMaskedLM", "logits"),
    "image-classification": ("AutoModelForImageClassification", "logits"),
}
IMAGE_TASKS = ("image-classification",)  # exported with pixel_values in, checked on sample images
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


def samples(task: str, folder: Path) -> dict[str, Any]:
    """The export's sample inputs as numpy arrays, in the order the graph takes them: token ids (and
    masks) of ``SAMPLES`` for text tasks, the image processor's ``pixel_values`` of three sample images
    (sizes and colours that differ) for image tasks."""
    import transformers

    if task in IMAGE_TASKS:
        return image_samples(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    encoded = tokenizer(SAMPLES, padding=True, return_tensors="np")
    taken = forward_inputs(task, folder)
    return {
        name: encoded[name]
        for name in ("input_ids", "attention_mask", "token_type_ids")
        if name in taken and name in encoded
    }


def forward_inputs(task: str, folder: Path) -> set[str]:
    """The inputs the model's forward takes, whatever its tokenizer emits (a BERT tokenizer's token_type_ids
    in front of DistilBERT): read from the class the task's auto class picks, without loading weights."""
    import inspect

    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    auto_class = getattr(transformers, EXPORTABLE[task][0])
    try:
        model_class = auto_class._model_mapping[type(config)]
    except (KeyError, AttributeError) as exc:
        raise ModelSourceError(
            f"{folder}: {auto_class.__name__} has no model class for {type(config).__name__}"
        ) from exc
    return set(inspect.signature(model_class.forward).parameters)


def graph_task(task: str, params: Mapping[str, str]) -> str:
    """The task whose graph serves ``task``: a zero-shot model that is an NLI classifier is exported as a text
    classifier (its logits), an embedding model as an encoder (its token vectors)."""
    if task == "zero-shot-classification" and params.get(PARAM_ZERO_SHOT_METHOD) == "entailment":
        return "text-classification"
    return task


def _feeds(sample: dict[str, Any]) -> dict[str, Any]:
    """The sample as the graph's inputs: token tensors int64, pixels float32."""
    import numpy as np

    return {name: value.astype(np.float32 if name == "pixel_values" else np.int64) for name, value in sample.items()}


def _compared(got: Any, reference: Any, sample: dict[str, Any]) -> tuple[Any, Any]:
    """Token outputs at real tokens only (padding positions are masked out downstream)."""
    if reference.ndim == 3 and "attention_mask" in sample:
        mask = sample["attention_mask"].astype(bool)
        return got[mask], reference[mask]
    return got, reference


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
    axes_of_input = "batch" if task in IMAGE_TASKS else "batch and sequence"
    progress.step(f"Exporting to ONNX (dynamic {axes_of_input} axes), checking against PyTorch within {TOLERANCE}")
    sample = samples(task, folder)
    names = list(sample)
    model = getattr(transformers, class_name).from_pretrained(folder, dtype=torch.float32).eval()

    class Wrapper(torch.nn.Module):  # keyword arguments in, one named tensor out
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return getattr(self.model(**dict(zip(names, inputs))), output)

    torch_sample = {name: torch.from_numpy(value) for name, value in _feeds(sample).items()}
    with torch.inference_mode():  # before exporting: tracing can leave the module changed
        reference = getattr(model(**torch_sample), output).numpy()
    path = destination / ONNX_FILE
    axes: dict[str, dict[int, str]] = {
        name: {0: "batch"} if name == "pixel_values" else {0: "batch", 1: "sequence"} for name in names
    }
    axes[output] = {0: "batch"} if reference.ndim == 2 else {0: "batch", 1: "sequence"}
    try:
        # The tracer warns about what it cannot prove (shapes, data-dependent branches); the
        # export is checked against PyTorch below, which is the check those warnings ask for.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Wrapper(),
                tuple(torch_sample[name] for name in names),
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
    exported, reference_checked = _compared(session.run(None, _feeds(sample))[0], reference, sample)
    difference = float(np.abs(exported - reference_checked).max())
    if difference > TOLERANCE:
        path.unlink(missing_ok=True)
        raise ModelSourceError(f"the ONNX export differs from PyTorch by {difference:.2e} (> {TOLERANCE})")
    return Exported(path, tuple(names), output, tuple(reference.shape[-1:]), difference, reference.ndim)


def check_openvino(task: str, folder: Path, exported: Exported) -> float:
    """OpenVINO's run of the exported ``model.onnx`` against PyTorch on the same samples: the largest
    difference; ``ModelSourceError`` when OpenVINO is missing or differs by more than ``TOLERANCE``."""
    try:
        import numpy as np
        import openvino
        import torch
        import transformers
    except ImportError as exc:
        raise ModelSourceError(f"--backend openvino needs openvino: pip install 'tritonhf[openvino]' ({exc})") from exc
    class_name, output = EXPORTABLE[task]
    sample = samples(task, folder)
    feeds = _feeds(sample)
    reference_model = getattr(transformers, class_name).from_pretrained(folder, dtype=torch.float32).eval()
    with torch.inference_mode():
        reference = getattr(reference_model(**{k: torch.from_numpy(v) for k, v in feeds.items()}), output).numpy()
    try:
        # f32 as the runtime compiles it: on CPUs with bf16 OpenVINO would otherwise run in bf16 (2e-2 off on MiniLM).
        compiled = openvino.Core().compile_model(str(exported.path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        got = compiled({name: feeds[name] for name in exported.inputs})[compiled.output(0)]
    except Exception as exc:  # OpenVINO raises its own kinds for graphs it cannot read or compile
        raise ModelSourceError(f"OpenVINO could not run the ONNX export: {exc}") from exc
    got, reference = _compared(got, reference, sample)
    difference = float(np.abs(got - reference).max())
    if difference > TOLERANCE:
        raise ModelSourceError(f"OpenVINO's run of the export differs from PyTorch by {difference:.2e} (> {TOLERANCE})")
    return difference


def _session(path: Path) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _run(session: Any, encoded: Any) -> Any:
    """The session's first output for tokenizer output ``encoded`` (numpy tensors), as int64 feeds."""
    import numpy as np

    return session.run(None, {i.name: np.asarray(encoded[i.name], dtype=np.int64) for i in session.get_inputs()})[0]


def quantize(
    task: str, exported: Exported, folder: Path, texts: Sequence[str], pooling: str = "mean", target: Path | None = None
) -> Quantized:
    """``exported`` in int8 (``int8_per_token``), measured against fp32 and alone vs batched on ``texts``."""
    import numpy as np
    import torch
    import transformers

    if len(texts) < 4:
        raise GalleryError("The calibration set needs at least 4 texts (one per line).")
    target = target or exported.path.with_name(INT8_FILE)
    if not int8_per_token(exported.path, target):
        raise GalleryError("This model has no MatMul with constant weights: nothing for --quantize int8 to do.")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "right"  # rows compared below start at position 0
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=512, return_tensors="np")
    int8_session = _session(target)
    fp32, int8 = _run(_session(exported.path), batch), _run(int8_session, batch)
    drift = 0.0  # each text alone against its row of the padded batch: must be the same answer
    for row, text in enumerate(texts):
        single = _run(int8_session, tokenizer([text], truncation=True, max_length=512, return_tensors="np"))[0]
        in_batch = int8[row, : single.shape[0]] if exported.rank == 3 else int8[row]
        drift = max(drift, float(np.abs(single - in_batch).max()))
    mask = batch["attention_mask"].astype(bool)
    figures: dict[str, float]
    if exported.output == "last_hidden_state":
        vectors = []
        for hidden in (fp32, int8):
            pooled = pool(torch.from_numpy(hidden), torch.from_numpy(mask), pooling).numpy()
            vectors.append(pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12))
        cosine = (vectors[0] * vectors[1]).sum(1)
        figures = {"cosine_mean": float(cosine.mean()), "cosine_min": float(cosine.min())}
    elif exported.rank == 3:
        agree = (fp32.argmax(-1) == int8.argmax(-1))[mask]
        figures = {"token_agreement": float(agree.mean())}
    else:
        figures = {"label_agreement": float((fp32.argmax(-1) == int8.argmax(-1)).mean())}
    passed = all(value >= GATES[name] for name, value in figures.items()) and drift <= BATCH_DRIFT
    measured = ", ".join(f"{key.replace('_', ' ')} {value:.4f} (gate {GATES[key]})" for key, value in figures.items())
    summary = (
        f"int8 vs fp32 on {len(texts)} calibration texts: {measured}; "
        f"alone vs batched max difference {drift:.1e} (gate {BATCH_DRIFT})"
    )
    figures["batch_drift"] = drift
    return Quantized(target, figures, passed, summary)


def int8_per_token(source: Path, target: Path) -> int:
    """Write ``source`` with each MatMul by a constant 2-D weight in int8; return how many.

    For ``Y = X @ W``: ``W`` becomes int8 with one scale per output column; ``X`` is quantized
    at run time with one scale per token (its absolute maximum over the last axis / 127), so
    no token's numbers depend on another token, another text or the batch's padding. The
    int32 product is scaled back by both scales. Everything else stays fp32.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    opset = next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(127.0, np.float32), "int8_127"),
            numpy_helper.from_array(np.array(128.0, np.float32), "int8_128"),
            numpy_helper.from_array(np.array(1.0, np.float32), "int8_1"),
            numpy_helper.from_array(np.array(255.0, np.float32), "int8_255"),
            numpy_helper.from_array(np.array(1e-8, np.float32), "int8_eps"),
            numpy_helper.from_array(np.array(128, np.uint8), "int8_zero_point"),
            numpy_helper.from_array(np.array([-1], np.int64), "int8_last_axis"),
        ]
    )
    nodes = []
    count = 0
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(weight).astype(np.float32)
        w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0
        p = f"int8_{count}_"
        count += 1
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.clip(np.round(w / w_scale), -127, 127).astype(np.int8), p + "w"),
                numpy_helper.from_array(w_scale.astype(np.float32), p + "w_scale"),
            ]
        )
        x = node.input[0]
        if opset >= 18:  # axes became an input in opset 18
            reduce = helper.make_node("ReduceMax", [p + "abs", "int8_last_axis"], [p + "max"], keepdims=1)
        else:
            reduce = helper.make_node("ReduceMax", [p + "abs"], [p + "max"], axes=[-1], keepdims=1)
        nodes += [
            helper.make_node("Abs", [x], [p + "abs"]),
            reduce,
            helper.make_node("Max", [p + "max", "int8_eps"], [p + "max_eps"]),
            helper.make_node("Div", [p + "max_eps", "int8_127"], [p + "x_scale"]),
            # uint8 around 128 (ONNX Runtime's fast u8 x s8 kernel), i.e. symmetric int8 in [-127, 127]
            helper.make_node("Div", [x, p + "x_scale"], [p + "scaled"]),
            helper.make_node("Round", [p + "scaled"], [p + "rounded"]),
            helper.make_node("Add", [p + "rounded", "int8_128"], [p + "shifted"]),
            helper.make_node("Clip", [p + "shifted", "int8_1", "int8_255"], [p + "clipped"]),
            helper.make_node("Cast", [p + "clipped"], [p + "x_q"], to=TensorProto.UINT8),
            helper.make_node("MatMulInteger", [p + "x_q", p + "w", "int8_zero_point"], [p + "product"]),
            helper.make_node("Cast", [p + "product"], [p + "product_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [p + "product_f", p + "x_scale"], [p + "rescaled"]),
            helper.make_node("Mul", [p + "rescaled", p + "w_scale"], [node.output[0]]),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return count
