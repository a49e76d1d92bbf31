"""The OpenVINO engine's add-time side: what a device and an install allow, and its weights (a GGUF or IR export)
with their greedy check against transformers.

``--engine auto`` (the default) picks OpenVINO GenAI's continuous batching on a CPU: a GGUF
file is vendored as it is; a hub id or a local folder is exported once to GGUF
(``gguf_export``: int8 weights by default, int4 or fp16 on request), or, for a family the GGUF writer does not
know, to OpenVINO IR with optimum-intel at the same weight width (``ir_export``), and its greedy tokens are
compared with transformers on a few prompts, the figures printed and written into the config.
Where OpenVINO GenAI is missing, the device is a GPU, or the export or the load fails, ``auto``
serves with transformers and says why (as encoders fall back from ONNX to PyTorch);
``--engine openvino`` fails instead.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import installed, sources
from tritonhf.gallery.families.generation import gguf_export, ir_export
from tritonhf.gallery.families.generation.params import PARAM_ENGINE_CHECK
from tritonhf.runtime.openvino_settings import EngineSettings, engine_settings
from tritonhf.tasks import PARAM_ENGINE, PARAM_GGUF_FILE, PARAM_OPENVINO_MODEL, VENDORED_WEIGHTS_DIR

if TYPE_CHECKING:
    from tritonhf.gallery.families.generation.measure import Runner
    from tritonhf.gallery.request import AddRequest

# --weight-format names -> GGUF tensor types of the export (a GGUF source keeps its own).
WEIGHT_FORMATS = {"int8": "q8_0", "int4": "q4_0", "fp16": "f16"}
# The IR export of the same weights, for a family the GGUF writer does not know.
IR_OF_GGUF_FORMAT = {"int8": "int8-ir", "int4": "int4-ir", "fp16": "fp16-ir"}
# The OpenVINO engine's threads and precisions, and whether its answers are batch-invariant (runtime.openvino_settings).
PARAM_ENGINE_SETTINGS = "tritonhf.engine_settings"
# What OpenVINO GenAI's GGUF reader takes (a K-quant file fails an assertion in its gguf_utils/gguf.cpp).
READABLE_GGUF = "llama, qwen2 and qwen3 files in Q4_0, Q4_1, Q8_0 and F16, not K-quants"
# Greedy agreement: a few prompts, this many tokens each, the OpenVINO model against transformers fp32.
CHECK_PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time")
CHECK_TOKENS = 16


def unavailable(request: AddRequest) -> str | None:
    """Why the OpenVINO engine cannot serve a model here (a GPU, --no-vendor, no OpenVINO GenAI); None: it can."""
    device = request.options.device
    if device == "gpu" or (device == "auto" and _cuda_available()):
        return f"--device {device} runs transformers on the GPU (the OpenVINO engine here is for CPUs)"
    if not request.vendor:
        return "--no-vendor keeps a reference, and the OpenVINO engine needs its GGUF file in the repository"
    return installed.openvino_genai_missing()


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


DEFAULT_WEIGHT_FORMAT = "int8"


def weight_format(request: AddRequest) -> str:
    """--weight-format as given, else this family's default."""
    return request.weight_format or DEFAULT_WEIGHT_FORMAT


def check_weight_format(weight_format: str) -> str:
    """The GGUF tensor type of a --weight-format, or the format itself for an IR export (``ir_export``)."""
    if weight_format in ir_export.IR_FORMATS:
        return weight_format
    if weight_format not in WEIGHT_FORMATS:
        known = ", ".join([*WEIGHT_FORMATS, *ir_export.IR_FORMATS])
        raise GalleryError(f"--weight-format must be one of {known}, not {weight_format!r}.")
    return WEIGHT_FORMATS[weight_format]


def settings_for(params: Mapping[str, str], instances: int = 1) -> EngineSettings:
    """The OpenVINO engine's settings for a model added with ``params`` (``--param``), as the template will
    choose them on an instance's share of this machine's cores; a GalleryError names a bad value."""
    try:
        return engine_settings(params, max(1, (os.cpu_count() or 1) // max(1, instances)))
    except ValueError as exc:
        raise GalleryError(f"--param {exc}.") from exc


def add_openvino_weights(
    resolved: sources.ResolvedSource,
    weights_dir: Path,
    weight_format: str,
    progress: Progress,
    settings: EngineSettings,
) -> dict[str, str]:
    """``weights_dir`` gets model.gguf (or with an IR format, the IR export in ``openvino/``) with the tokenizer
    and config; the parameters that say how it was made and checked, on the ``settings`` it will be served with.
    Raises ModelSourceError when the export or the load fails. An export is compared with transformers on the
    weights it was made from (a GGUF source's dequantized ones for an IR), which are then removed."""
    ir = weight_format in ir_export.IR_FORMATS
    served = weights_dir / (ir_export.IR_FOLDER if ir else gguf_export.GGUF_FILE)
    if resolved.kind == "gguf" and not ir:
        sources.vendor_metadata(resolved.folder, weights_dir)
        progress.step(f"Copying {Path(resolved.given).name} into the repository as {served.name}")
        shutil.copy2(Path(resolved.given).expanduser(), served)
        summary = _check_loads(served, weights_dir, settings) + "; the GGUF file's own weights (no export)"
    else:
        source = resolved.folder
        if resolved.kind == "gguf":
            source = sources.convert_gguf(Path(resolved.given).expanduser(), progress)
        sources.vendor(source, weights_dir)
        if ir:
            progress.step(f"Exporting to OpenVINO IR ({weight_format}) with optimum-intel")
            ir_export.export(weights_dir, served, weight_format)
            made = f"OpenVINO IR, {weight_format.removesuffix('-ir')} weights"
        else:
            tensor_type = check_weight_format(weight_format)
            progress.step(f"Exporting to GGUF ({tensor_type} weights) for OpenVINO GenAI")
            gguf_export.export(weights_dir, served, tensor_type)
            made = f"{tensor_type} weights"
        progress.step("Comparing its greedy tokens with transformers")
        summary = f"{made}; " + _check_agreement(served, weights_dir, settings)
        sources.drop_source_weights(weights_dir)  # served from model.gguf or openvino/
    progress.step(summary)
    return {
        PARAM_ENGINE: "openvino",
        (PARAM_OPENVINO_MODEL if ir else PARAM_GGUF_FILE): served.name,
        PARAM_ENGINE_CHECK: summary,
        PARAM_ENGINE_SETTINGS: settings.describe(),
    }


def _pipeline(gguf_file: Path, settings: EngineSettings) -> object:
    """The pipeline as the template serves it (text_generation/openvino_engine.py), on the same settings."""
    import openvino_genai

    scheduler = openvino_genai.SchedulerConfig()
    scheduler.cache_size = 1
    properties = {"INFERENCE_NUM_THREADS": settings.threads, **settings.properties}
    try:
        return openvino_genai.ContinuousBatchingPipeline(str(gguf_file), scheduler, "CPU", properties)
    except RuntimeError as exc:
        if gguf_file.suffix == ".gguf":  # its reader's assertion says nothing a user can act on: what it reads does
            raise ModelSourceError(
                f"OpenVINO GenAI's GGUF reader cannot read {gguf_file.name} ({sources.gguf_kind(gguf_file)}): it "
                f"reads {READABLE_GGUF}"
            ) from exc
        raise ModelSourceError(f"OpenVINO GenAI could not load {gguf_file.name}: {str(exc).splitlines()[0]}") from exc


def runner(gguf_file: Path, folder: Path, params: Mapping[str, str], request: AddRequest) -> Runner:
    """How ``--engine auto`` times this engine: the pipeline as served (the model's settings), every prompt one
    request, all at once, each to exactly ``tokens`` greedy tokens."""
    pipeline = _pipeline(gguf_file, settings_for(request.params, request.options.instances))
    return lambda prompt_ids, tokens: _greedy(pipeline, prompt_ids, tokens, ignore_eos=True)


def _greedy(pipeline: object, prompt_ids: list[list[int]], tokens: int, ignore_eos: bool = False) -> list[list[int]]:
    """Each prompt's greedy continuation, one request per prompt, batched by the pipeline."""
    import numpy as np
    import openvino
    import openvino_genai

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = tokens
    config.ignore_eos = ignore_eos
    handles = [
        pipeline.add_request(index, openvino.Tensor(np.array([ids], dtype=np.int64)), config)  # type: ignore[attr-defined]
        for index, ids in enumerate(prompt_ids)
    ]
    outputs: list[list[int]] = [[] for _ in handles]
    while any(handle.get_status() == openvino_genai.GenerationStatus.RUNNING for handle in handles):
        pipeline.step()  # type: ignore[attr-defined]
        for handle, output in zip(handles, outputs):
            if handle.can_read():
                for result in handle.read().values():
                    output.extend(int(token) for token in result.generated_ids)
    return outputs


def _check_loads(gguf_file: Path, folder: Path, settings: EngineSettings) -> str:
    from transformers import AutoTokenizer

    started = time.monotonic()
    pipeline = _pipeline(gguf_file, settings)
    loaded = time.monotonic() - started
    ids = AutoTokenizer.from_pretrained(folder)(CHECK_PROMPTS[0])["input_ids"]
    if not _greedy(pipeline, [ids], 4)[0]:
        raise ModelSourceError(f"OpenVINO GenAI loaded {gguf_file.name} but generated nothing")
    return f"loads in {loaded:.1f} s and generates"


def _check_agreement(gguf_file: Path, folder: Path, settings: EngineSettings) -> str:
    """Greedy tokens of the GGUF model on OpenVINO against the HuggingFace model on transformers fp32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in CHECK_PROMPTS]
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    expected = []
    with torch.inference_mode():
        for ids in prompt_ids:
            out = reference.generate(
                torch.tensor([ids]), max_new_tokens=CHECK_TOKENS, do_sample=False, pad_token_id=pad
            )
            expected.append(out[0, len(ids) :].tolist())
    got = _greedy(_pipeline(gguf_file, settings), prompt_ids, CHECK_TOKENS)
    agreed = first = 0
    for want, have in zip(expected, got):
        same = 0
        for a, b in zip(want, have):
            if a != b:
                break
            same += 1
        agreed += same
        first += bool(same)
    total = sum(len(want) for want in expected)
    if first == 0:
        raise ModelSourceError(
            f"the OpenVINO model's first greedy token differs from transformers' on all {len(prompt_ids)} "
            "check prompts: the export is not the same model"
        )
    return (
        f"greedy agreement with transformers fp32: {agreed}/{total} tokens before the first difference "
        f"({len(prompt_ids)} prompts x {CHECK_TOKENS}), first token {first}/{len(prompt_ids)}"
    )


def source(request: AddRequest, progress: Progress) -> tuple[sources.ResolvedSource, str | None, str | None]:
    """The source as the OpenVINO engine reads it: a GGUF file is not converted (its tokenizer and config are read,
    the file itself is vendored); a family the GGUF writer does not know is exported to OpenVINO IR at the same
    width (that format returned), or, with no IR format of the width asked, cannot be served (why returned)."""
    path = Path(request.source).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        metadata = sources.gguf_metadata(path.absolute(), progress)
        return sources.ResolvedSource(request.source, "gguf", metadata), None, None
    resolved = sources.resolve(request.source, request.revision, progress)
    if resolved.kind == "gguf" or weight_format(request) in ir_export.IR_FORMATS:  # optimum-intel exports any family
        return resolved, None, None
    why_not = gguf_export.supported(resolved.folder)
    if why_not is None:
        return resolved, None, None
    ir_format = IR_OF_GGUF_FORMAT.get(weight_format(request))
    if ir_format is None:
        return resolved, None, f"the OpenVINO engine needs a GGUF export, and {why_not}"
    progress.step(f"Not a GGUF export: {why_not}; exporting to OpenVINO IR ({ir_format}) instead")
    return resolved, ir_format, None


def weights(
    request: AddRequest, weight_format: str, resolved: sources.ResolvedSource, version_dir: Path, progress: Progress
) -> tuple[dict[str, str], sources.ResolvedSource]:
    """model.gguf (or the IR export) and its checks. A GGUF export the check refuses is tried again as the IR export
    of the same width; ModelSourceError when that fails too."""
    weights_dir = version_dir / VENDORED_WEIGHTS_DIR
    formats = [weight_format]
    if resolved.kind != "gguf" and weight_format in IR_OF_GGUF_FORMAT:
        formats.append(IR_OF_GGUF_FORMAT[weight_format])
    settings = settings_for(request.params, request.options.instances)
    for index, tried in enumerate(formats):
        try:
            found = add_openvino_weights(resolved, weights_dir, tried, progress, settings)
            served = found.get(PARAM_OPENVINO_MODEL, found.get(PARAM_GGUF_FILE, ""))
            found[PARAM_ENGINE_CHECK] = f"continuous batching on {served}; {found[PARAM_ENGINE_CHECK]}"
            return found, resolved
        except ModelSourceError as exc:
            shutil.rmtree(weights_dir, ignore_errors=True)
            if index == len(formats) - 1:
                raise
            progress.step(f"The GGUF export is not usable ({exc}); exporting to OpenVINO IR instead")
    raise AssertionError("unreachable: the last format raises")


def notes(params: Mapping[str, str]) -> list[str]:
    """The config's lines about a model served by the OpenVINO engine: its file, its parameters, its settings."""
    served = params.get(PARAM_OPENVINO_MODEL) or params.get(PARAM_GGUF_FILE, "")
    return [
        f"Engine: OpenVINO GenAI's ContinuousBatchingPipeline on {served} (openvino_engine.py); "
        "parameters max_running (sequences), max_prefill_tokens (tokens per step), kv_cache_gb, "
        "prefix_caching (true: a prompt that repeats an earlier one's start reuses its cached keys and values; "
        "off by default on the batch-invariant settings, since a cached prefix can change a near-tie).",
        f"Engine settings: {params.get(PARAM_ENGINE_SETTINGS, '')}.",
    ]
