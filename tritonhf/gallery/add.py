"""Add a model to a repository: template, config, weights (and their ONNX / OpenVINO forms).

    REPOSITORY/NAME/config.pbtxt       built from the task's signature (gallery.config)
    REPOSITORY/NAME/1/model.py         the task's template, copied unchanged
    REPOSITORY/NAME/1/tritonhf_runtime/    the helpers templates share (tritonhf/runtime/),
                                       so the repository serves without tritonhf installed
    REPOSITORY/NAME/1/weights/         the vendored weights, config and tokenizer
    REPOSITORY/NAME__onnx/1/model.onnx with --backend onnx on a server that has Triton's
                                       onnxruntime backend: the forward pass, called by NAME

A model is built in a hidden folder beside the repository and renamed into place when
complete, so an interrupted ``add`` (Ctrl-C, full disk, failed download) leaves the
repository as it was.
Listing and removing live in ``listing.py``, checking in ``validate.py``, names in ``naming.py``.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from tritonhf._progress import Progress, SilentProgress
from tritonhf._version import __version__
from tritonhf.bootstrap.layout import Workspace
from tritonhf.errors import GalleryError, InvalidNameError, ModelExistsError, ModelSourceError
from tritonhf.gallery import (
    calibrate,
    generation,
    gguf_export,
    models,
    onnx_export,
    speech,
    speech_encoder,
    speech_engines,
    tower_export,
    whisper_openvino,
)
from tritonhf.gallery.config import (
    ModelOptions,
    build_config,
    build_onnx_part_config,
    config_to_text,
    parse_config,
    part_config_to_text,
)
from tritonhf.gallery.listing import parameters_of_folder, remove_model
from tritonhf.gallery.naming import check_name, default_name
from tritonhf.runtime.audio import (
    CT2_FOLDER,
    OPENVINO_ENCODER,
    OPENVINO_WHISPER,
    PARAM_COMPUTE_TYPE,
    PARAM_ENCODER,
    PARAM_MAX_AUDIO_SECONDS,
)
from tritonhf.runtime.common import PARAM_ONNX_DIFF, PARAM_OPENVINO_DIFF
from tritonhf.runtime.images import IMAGE_BACKEND, PARAM_IMAGE_BACKEND, PARAM_MAX_IMAGE_PIXELS
from tritonhf.tasks import (
    ONNX_PART_SUFFIX,
    PARAM_BACKEND,
    PARAM_DEVICE,
    PARAM_ENGINE,
    PARAM_ONNX_FILE,
    PARAM_ONNX_INPUTS,
    PARAM_ONNX_MODEL,
    PARAM_ONNX_OUTPUT,
    PARAM_SOURCE,
    PARAM_TASK,
    PARAM_TRUST_REMOTE_CODE,
    PARAM_VERSION,
    PARAM_WEIGHTS,
    RUNTIME_DIR,
    VENDORED_WEIGHTS_DIR,
    Task,
    get_task,
)

PARAM_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
VERSION = "1"
# auto: ONNX Runtime for encoder tasks when the export checks out, CTranslate2 for Whisper where it measures faster
BACKENDS = ("auto", "pytorch", "onnx", "openvino", "ctranslate2")
QUANTIZATIONS = ("int8",)
PARAM_BACKEND_REASON = "tritonhf.backend_reason"
PARAM_CALIBRATION = (
    "tritonhf.engine_calibration"  # --backend auto: both engines' figures on the machine it was added on
)
# Where --backend onnx runs model.onnx: Triton's native onnxruntime backend (a second model,
# NAME__onnx), onnxruntime inside the Python backend, or "auto": native when the server
# installed beside the repository has that backend.
ONNX_RUNTIMES = ("auto", "native", "python")


def parse_params(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; keys are checked, values stay data in the config."""
    params: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not PARAM_KEY.match(key) or key.startswith("tritonhf."):
            raise InvalidNameError(
                f"--param {pair!r} must be KEY=VALUE with a KEY of letters, digits, '_', '-', '.' "
                "(keys starting with 'tritonhf.' are reserved)."
            )
        params[key] = value
    return params


def template_source(task: Task) -> str:
    """The template's model.py, read from the package data."""
    return (
        resources.files("tritonhf.gallery")
        .joinpath("templates")
        .joinpath(task.template)
        .joinpath("model.py")
        .read_text()
    )


def write_runtime(version_dir: Path) -> None:
    """The runtime package every model.py imports (tritonhf/runtime), copied beside it as ``tritonhf_runtime/``."""
    target = version_dir / RUNTIME_DIR
    target.mkdir(exist_ok=True)
    for entry in resources.files("tritonhf").joinpath("runtime").iterdir():
        if entry.name.endswith(".py"):
            (target / entry.name).write_text(entry.read_text())


def write_template(task: Task, version_dir: Path) -> None:
    """model.py (and any module beside it, such as text-generation's engines) and the runtime it imports:
    everything of tritonhf a served model needs."""
    folder = resources.files("tritonhf.gallery").joinpath("templates").joinpath(task.template)
    for entry in folder.iterdir():
        if entry.name.endswith(".py"):
            (version_dir / entry.name).write_text(entry.read_text())
    write_runtime(version_dir)


@dataclass(frozen=True)
class AddRequest:
    """Everything ``gallery add`` needs; the CLI builds one from its options."""

    task: str
    source: str
    repository: Path
    name: str | None = None
    revision: str | None = None
    vendor: bool = True
    allow_pickle: bool = False
    trust_remote_code: bool = False
    backend: str = "auto"  # auto | pytorch | onnx (exported once, served with onnxruntime)
    onnx_runtime: str = "auto"  # with backend onnx: one of ONNX_RUNTIMES
    quantize: str | None = None  # "int8": int8 weights and per-token activations, behind a quality gate
    calibration: tuple[str, ...] = ()  # texts for the int8 gate (default: onnx_export.CALIBRATION)
    force: bool = False  # keep an int8 model that fails its gate
    engine: str = "auto"  # text-generation: auto | openvino | transformers (gallery.generation)
    weight_format: str = "int8"  # text-generation on OpenVINO, exported from a folder: int8 | int4 | fp16
    labels: tuple[str, ...] = ()
    options: ModelOptions = field(default_factory=ModelOptions)
    params: Mapping[str, str] = field(default_factory=dict)


def _task_parameters(task: Task, folder: Path, request: AddRequest) -> dict[str, str]:
    """Task-specific defaults read from the model, then the user's --labels and --param."""
    params: dict[str, str] = {}
    if task.name in ("feature-extraction", "zero-shot-classification"):
        params.update(models.sentence_transformers_options(folder))
    if task.name in ("zero-shot-classification", "zero-shot-image-classification"):
        if request.labels and any("," in label or not label.strip() for label in request.labels):
            raise GalleryError("--labels must be non-empty labels separated by commas.")
        if request.labels:
            params["labels"] = ",".join(label.strip() for label in request.labels)
    if task.takes_images:
        params[PARAM_IMAGE_BACKEND] = IMAGE_BACKEND  # the processor's resize, the same served and in-process
    for key, value in (
        (PARAM_MAX_IMAGE_PIXELS, request.options.max_image_pixels),
        (PARAM_MAX_AUDIO_SECONDS, request.options.max_audio_seconds),
    ):
        if value:
            given = request.params.get(key)
            if given is not None and given != str(value):
                raise GalleryError(f"--param {key}={given} and --{key.replace('_', '-')} {value} disagree: give one.")
            params[key] = str(value)
    params.update(request.params)
    return params


def _output_dims(task: Task, folder: Path) -> dict[str, tuple[int, ...]]:
    """Output dims known only from the model: the embedding size, the number of labels."""
    config = models.model_config(folder)
    if task.name == "feature-extraction" and isinstance(config.get("hidden_size"), int):
        return {"EMBEDDING": (int(config["hidden_size"]),)}
    if task.name == "zero-shot-image-classification" and isinstance(config.get("projection_dim"), int):
        return {"EMBEDDING": (int(config["projection_dim"]),)}  # CLIP's shared space
    if task.name == "zero-shot-image-classification":  # SigLIP: the towers' hidden size is the space
        vision = config.get("vision_config")
        if isinstance(vision, dict) and isinstance(vision.get("hidden_size"), int):
            return {"EMBEDDING": (int(vision["hidden_size"]),)}
    return {}


def native_onnx_available(repository: Path) -> bool:
    """Does the server installed beside ``repository`` (a tritonhf workspace) have the onnxruntime backend?"""
    return (Workspace.at(repository.parent).backends_dir / "onnxruntime").is_dir()


def _check_backend(request: AddRequest, task: Task) -> None:
    if request.backend not in BACKENDS:
        raise GalleryError(f"--backend must be one of {', '.join(BACKENDS)}, not {request.backend!r}.")
    if request.onnx_runtime not in ONNX_RUNTIMES:
        raise GalleryError(f"--onnx-runtime must be one of {', '.join(ONNX_RUNTIMES)}, not {request.onnx_runtime!r}.")
    if request.quantize is not None and request.quantize not in QUANTIZATIONS:
        raise GalleryError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, not {request.quantize!r}.")
    if request.onnx_runtime == "native" and (task.name in onnx_export.IMAGE_TASKS or task.name == tower_export.TASK):
        raise GalleryError(f"{task.name} runs its ONNX graphs inside the Python backend: drop --onnx-runtime native.")
    if task.takes_audio:  # PyTorch (int8: per-token Linear layers), CTranslate2 or OpenVINO GenAI (Whisper), no ONNX
        if request.backend == "onnx":
            raise GalleryError(
                f"{task.name} is served with PyTorch, CTranslate2 or OpenVINO GenAI: "
                "--backend auto, pytorch, ctranslate2 or openvino."
            )
        if request.backend in ("ctranslate2", "openvino") and not request.vendor:
            raise GalleryError(
                f"--backend {request.backend} writes the converted model into the repository: no --no-vendor."
            )
        return
    if request.backend == "ctranslate2":
        raise GalleryError(f"--backend ctranslate2 is for Whisper (automatic-speech-recognition), not {task.name}.")
    if request.quantize and (task.name in onnx_export.IMAGE_TASKS or task.name == tower_export.TASK):
        raise GalleryError(f"--quantize int8 is for text encoders; {task.name} is served in fp32 (drop --quantize).")
    if request.backend == "openvino" and request.quantize:
        raise GalleryError("--quantize int8 makes an ONNX Runtime model: use it with --backend onnx (or auto).")
    if request.backend == "openvino" and request.onnx_runtime == "native":
        raise GalleryError("--backend openvino runs model.onnx with OpenVINO inside the Python backend, not natively.")
    if request.backend in ("onnx", "openvino") or request.quantize:
        if task.name != tower_export.TASK:  # image-text models: two graphs (gallery/tower_export.py)
            onnx_export.check_exportable(task.name)
        if request.backend == "pytorch":
            raise GalleryError("--quantize int8 quantizes the ONNX model: use --backend onnx (or auto).")
        if not request.vendor:
            raise GalleryError(
                f"--backend {request.backend} writes model.onnx into the repository; "
                "it cannot be used with --no-vendor."
            )


def _onnx_or_why_not(request: AddRequest, task: Task) -> str | None:
    """None when the ONNX path should be tried; else why the model is served with PyTorch."""
    if request.backend == "pytorch":
        return "--backend pytorch"
    if task.name not in onnx_export.EXPORTABLE:
        return f"{task.name} runs on PyTorch"
    if not request.vendor:
        return "--no-vendor keeps a reference, and model.onnx must be written into the repository"
    missing = onnx_export.onnx_available()
    if missing is not None and request.backend == "onnx":
        raise GalleryError(f"--backend onnx needs onnx and onnxruntime: {missing}.")
    return missing


def _free(repository: Path, name: str) -> Path:
    target = repository / name
    if target.exists():
        raise ModelExistsError(
            f"A model named {name!r} already exists in {repository}. Choose another --name, or remove it "
            f"first with `tritonhf gallery remove {name}`."
        )
    return target


def add_model(request: AddRequest, progress: Progress | None = None) -> Path:
    """Write ``NAME/config.pbtxt``, ``NAME/1/model.py`` and the weights; return the model folder."""
    progress = progress or SilentProgress()
    task = get_task(request.task)
    name = check_name(request.name or default_name(request.source))
    request.options.check(task)
    _check_backend(request, task)
    repository = request.repository.absolute()
    target = _free(repository, name)
    # Where an ONNX model would run: a second model on Triton's onnxruntime backend ("native"), when
    # asked or when this workspace's server has that backend; else onnxruntime inside the Python backend.
    native = (
        request.backend not in ("pytorch", "openvino")
        and task.name in onnx_export.EXPORTABLE
        and task.name not in onnx_export.IMAGE_TASKS  # pixels go to ONNX Runtime in the stub, not through BLS
        and (request.onnx_runtime == "native" or (request.onnx_runtime == "auto" and native_onnx_available(repository)))
    )
    part_name: str | None = check_name(name + ONNX_PART_SUFFIX) if native else None
    part_target: Path | None = _free(repository, part_name) if part_name else None
    engine = _engine_plan(request, task)
    resolved = _resolve(request, engine, progress)
    if engine and engine.engine == "openvino" and resolved.kind != "gguf":
        why_not = gguf_export.supported(resolved.folder)
        if why_not is not None:
            if request.engine == "openvino":
                raise GalleryError(f"--engine openvino cannot serve {request.source}: {why_not}.")
            engine = generation.EnginePlan("transformers", f"the OpenVINO engine needs a GGUF export, and {why_not}")
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=repository.parent))
    try:
        version_dir = staging / name / VERSION
        version_dir.mkdir(parents=True)
        write_template(task, version_dir)
        engine_params: dict[str, str] = {}
        if request.vendor:
            progress.step(f"Copying weights, config and tokenizer into {name}/{VERSION}/{VENDORED_WEIGHTS_DIR}")
            if engine and engine.engine == "openvino":
                engine, engine_params, resolved = _openvino_weights(request, resolved, version_dir, progress)
            if not engine_params:
                models.vendor(resolved.folder, version_dir / VENDORED_WEIGHTS_DIR, request.allow_pickle)
            weights = VENDORED_WEIGHTS_DIR
        else:
            weights = str(resolved.folder) if resolved.kind != "hub" else request.source
        params = _task_parameters(task, resolved.folder, request)
        backend, reason = "pytorch", _onnx_or_why_not(request, task)
        if reason is not None:
            part_name = part_target = None  # no ONNX model, so no part for it
        else:
            try:
                found, calibrated = _export_onnx(task, name, part_name, version_dir, staging, request, params, progress)
                params.update(found)
                backend, reason = "onnx", f"exported and within {onnx_export.TOLERANCE} of PyTorch"
                if request.backend == "openvino":
                    reason = f"the ONNX export run by OpenVINO, within {onnx_export.TOLERANCE} of PyTorch"
                    backend = "openvino"
                elif calibrated is not None:
                    backend, reason = calibrated
            except ModelSourceError as exc:
                if request.backend in ("onnx", "openvino"):
                    raise
                reason = f"the ONNX export was not usable ({exc})"
                if part_target:
                    shutil.rmtree(staging / part_target.name, ignore_errors=True)
                    part_target = None
        if task.name == tower_export.TASK and request.backend != "pytorch" and request.vendor:
            backend, reason = _export_towers(request, version_dir / VENDORED_WEIGHTS_DIR, params, progress)
        if task.takes_audio:
            backend, reason = _speech_engine(request, version_dir / VENDORED_WEIGHTS_DIR, resolved.folder, params,
                                             progress)  # fmt: skip
        if engine_params:
            backend, reason = (
                "openvino",
                "continuous batching on model.gguf; " + engine_params.pop(generation.PARAM_ENGINE_CHECK),
            )
        elif engine:
            params.update({generation.PARAM_ENGINE_REASON: engine.reason, PARAM_ENGINE: "transformers"})
        params.update(engine_params)
        progress.step(f"Serving {name} with {_ENGINE_NAMES[backend]}: {reason}")
        params.update(
            {
                PARAM_BACKEND: backend,
                PARAM_BACKEND_REASON: reason,
                PARAM_TASK: task.name,
                PARAM_SOURCE: request.source,
                PARAM_VERSION: __version__,
                PARAM_WEIGHTS: weights,
                PARAM_DEVICE: request.options.device,
                PARAM_TRUST_REMOTE_CODE: "true" if request.trust_remote_code else "false",
            }
        )
        options = dataclasses.replace(
            request.options, parameters=params, output_dims=_output_dims(task, resolved.folder)
        )
        config = build_config(task, name, options)
        text = config_to_text(config, task, _notes(params))
        parse_config(text)  # what we write must read back as Triton's ModelConfig
        (staging / name / "config.pbtxt").write_text(text)
        if part_target:
            (staging / part_target.name).replace(part_target)  # the part first: NAME calls it
        try:
            (staging / name).replace(target)
        except OSError:
            if part_target:
                shutil.rmtree(part_target, ignore_errors=True)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


_ENGINE_NAMES = {"onnx": "ONNX Runtime", "pytorch": "PyTorch", "openvino": "OpenVINO", "ctranslate2": "CTranslate2"}
PARAM_INT8_QUALITY = "tritonhf.int8_quality"
PARAM_ENCODER_CHECK = "tritonhf.encoder_check"


def _speech_engine(
    request: AddRequest, vendored: Path, source: Path, params: dict[str, str], progress: Progress
) -> tuple[str, str]:
    """(backend, reason) for a speech model: for a Whisper, CTranslate2 or OpenVINO GenAI where asked or where it
    measures fastest (``gallery.speech_engines``), else PyTorch; with --quantize int8, the chosen engine's int8
    behind its gate."""
    folder = vendored if vendored.is_dir() else source
    if request.backend == "openvino":
        whisper = speech_engines.is_whisper(folder)
        why_not = whisper_openvino.why_not(folder) if whisper else "it runs Whisper models only"
        if why_not is not None:
            raise GalleryError(f"--backend openvino cannot serve {request.source}: {why_not.rstrip('.')}.")
        target = vendored / OPENVINO_WHISPER
        _export_for_openvino(request, folder, target, progress)
        gate = {}
        if request.quantize:
            progress.step("Checking OpenVINO GenAI's int8 export against float32 PyTorch on calibration audio")
            gate = _int8_gate(request, whisper_openvino.check_int8(folder, target), progress)
        return _served_by_openvino(request, vendored, params, "--backend openvino", gate)
    converted = vendored / CT2_FOLDER
    encoder_kept: bool | None = None  # CTranslate2's encoder on OpenVINO (--quantize int8): not yet measured
    why_not = _ct2_or_why_not(request, folder, converted, progress)
    backend, reason = ("pytorch", why_not) if why_not is not None else ("ctranslate2", "--backend ctranslate2")
    if backend == "ctranslate2" and request.backend == "auto":
        exported, gate = _openvino_for_auto(request, folder, vendored / OPENVINO_WHISPER, progress)
        if request.quantize:  # CTranslate2 is timed as it would serve: with its encoder on OpenVINO where kept
            encoder_kept = _ct2_encoder(request, folder, converted, params, progress)
        engines = "PyTorch, CTranslate2 and OpenVINO GenAI" if isinstance(exported, Path) else "PyTorch and CTranslate2"
        progress.step(f"Measuring {engines} on 30 s windows (--backend auto)")
        encoder = converted / OPENVINO_ENCODER if encoder_kept else None
        choice = speech_engines.measure(folder, converted, bool(request.quantize), request.options.instances, exported,
                                        encoder)  # fmt: skip
        progress.step(choice.summary)
        backend, reason = choice.backend, choice.summary
        params[PARAM_CALIBRATION] = choice.summary
        if backend == "openvino":
            return _served_by_openvino(request, vendored, params, reason, gate)
        shutil.rmtree(vendored / OPENVINO_WHISPER, ignore_errors=True)
    if backend == "pytorch":
        shutil.rmtree(converted, ignore_errors=True)
        if request.quantize:
            params.update(_speech_int8(request, folder, progress))
            params[speech.PARAM_QUANTIZE] = "int8"
            reason += "; Linear layers in int8, a scale per token (" + params[PARAM_INT8_QUALITY] + ")"
        return backend, reason
    params[PARAM_COMPUTE_TYPE] = "float32"
    if request.quantize:
        progress.step("Checking CTranslate2's int8 against its float32 on calibration audio")
        params.update(_int8_gate(request, speech_engines.check_ct2_int8(folder, converted), progress))
        params[PARAM_COMPUTE_TYPE] = "int8"
        reason += "; int8 kernels (" + params[PARAM_INT8_QUALITY] + ")"
        if encoder_kept is None:
            encoder_kept = _ct2_encoder(request, folder, converted, params, progress)
        if encoder_kept:
            params[PARAM_ENCODER] = "openvino"
            reason += "; " + params[PARAM_ENCODER_CHECK]
    _drop_pytorch_weights(vendored)  # served from ct2/
    return backend, reason


def _ct2_encoder(
    request: AddRequest, folder: Path, converted: Path, params: dict[str, str], progress: Progress
) -> bool:
    """--quantize int8 on CTranslate2: its encoder on OpenVINO where openvino is installed, gated and measured faster
    (gallery.speech_encoder; the verdict into ``params``); whether it was kept (its file beside the model)."""
    if not calibrate.openvino_available():
        return False
    progress.step("Measuring the encoder on OpenVINO against CTranslate2's (--quantize int8)")
    encoder = speech_encoder.choose(folder, converted, request.options.instances)
    progress.step(encoder.summary)
    params[PARAM_ENCODER_CHECK] = encoder.summary
    return encoder.kept


def _served_by_openvino(
    request: AddRequest, vendored: Path, params: dict[str, str], reason: str, gate: dict[str, str]
) -> tuple[str, str]:
    """(backend, reason) of a Whisper served from its OpenVINO GenAI export: no CTranslate2 conversion or PyTorch
    weights kept; its arithmetic, and its int8 gate's verdict (``gate``), in the config."""
    shutil.rmtree(vendored / CT2_FOLDER, ignore_errors=True)
    _drop_pytorch_weights(vendored)
    params.update(gate)
    params[PARAM_COMPUTE_TYPE] = "int8" if request.quantize else "float32"
    return "openvino", reason + (f"; int8 weights ({gate[PARAM_INT8_QUALITY]})" if gate else "")


def _drop_pytorch_weights(vendored: Path) -> None:
    """A converted model's PyTorch weights, no longer read; config, generation config, tokenizer and processor stay."""
    for weights_file in [*vendored.glob("*.safetensors"), *vendored.glob("pytorch_model*.bin")]:
        weights_file.unlink()


def _export_for_openvino(request: AddRequest, folder: Path, out: Path, progress: Progress) -> None:
    """The Whisper exported for OpenVINO GenAI's WhisperPipeline (gallery.whisper_openvino), int8 weights with
    --quantize int8."""
    if not whisper_openvino.exporter_ready():
        progress.step(f"Making the OpenVINO exporter's venv, once ({whisper_openvino.venv_dir()})")
    progress.step("Exporting the model for OpenVINO GenAI (optimum-intel)")
    whisper_openvino.export(folder, out, "int8" if request.quantize else "fp32")


def _openvino_for_auto(
    request: AddRequest, folder: Path, out: Path, progress: Progress
) -> tuple[Path | str, dict[str, str]]:
    """--backend auto: the folder exported for OpenVINO GenAI, to be measured with the others (with --quantize
    int8, once its int8 passed the gate: the verdict for the config); or why it is not."""
    if not whisper_openvino.exporter_ready():
        return "its exporter's venv is not made here (--backend openvino makes it once)", {}
    why_not = whisper_openvino.why_not(folder)
    if why_not is not None:
        return why_not.rstrip("."), {}
    try:
        _export_for_openvino(request, folder, out, progress)
    except GalleryError as exc:
        return str(exc).rstrip("."), {}
    if not request.quantize:
        return out, {}
    progress.step("Checking OpenVINO GenAI's int8 export against float32 PyTorch on calibration audio")
    found = whisper_openvino.check_int8(folder, out)
    progress.step(found.summary)
    verdict = _int8_verdict(request, found)
    if verdict is None:
        shutil.rmtree(out, ignore_errors=True)
        return f"its int8 is below the gate ({found.summary})", {}
    return out, {PARAM_INT8_QUALITY: verdict}


def _ct2_or_why_not(request: AddRequest, folder: Path, converted: Path, progress: Progress) -> str | None:
    """None once the model is converted for CTranslate2 into ``converted``; else why it is served with PyTorch
    (a GalleryError instead when --backend ctranslate2 asked for it)."""
    if request.backend == "pytorch":
        return "--backend pytorch"
    if not speech_engines.is_whisper(folder):
        why_not: str | None = "CTranslate2 runs Whisper models only"
    elif not request.vendor:
        why_not = "--no-vendor keeps a reference, and the converted model must be written into the repository"
    else:
        why_not = speech_engines.ct2_available() or speech_engines.ct2_leaves_out(folder)
    if why_not is None:
        progress.step("Converting the model for CTranslate2")
        try:
            speech_engines.convert(folder, converted)
        except GalleryError as exc:
            why_not = str(exc)
    if why_not is not None and request.backend == "ctranslate2":
        raise GalleryError(f"--backend ctranslate2 cannot serve {request.source}: {why_not.rstrip('.')}.")
    return why_not


def _int8_gate(request: AddRequest, found: speech.Int8Check, progress: Progress) -> dict[str, str]:
    """The int8 gate's verdict: its summary for the config, or a refusal (unless --force)."""
    progress.step(found.summary)
    verdict = _int8_verdict(request, found)
    if verdict is None:
        raise GalleryError(
            f"{found.summary}: below the gate, so int8 is refused. Keep fp32 (drop --quantize), or pass --force."
        )
    return {PARAM_INT8_QUALITY: verdict}


def _int8_verdict(request: AddRequest, found: speech.Int8Check) -> str | None:
    """The int8 gate's summary for the config (said when --force keeps a model below it); None when refused."""
    if not found.passed and not request.force:
        return None
    return found.summary + (" (kept with --force)" if not found.passed else "")


def _speech_int8(request: AddRequest, folder: Path, progress: Progress) -> dict[str, str]:
    """A PyTorch speech model's int8 gate (gallery.speech): its verdict, or a refusal."""
    progress.step("Checking dynamic int8 (Linear layers) against fp32 on calibration audio")
    return _int8_gate(request, speech.check_int8(folder), progress)


def _engine_plan(request: AddRequest, task: Task) -> generation.EnginePlan | None:
    """text-generation's engine to try; None for the other tasks (which take no --engine)."""
    if task.name != "text-generation":
        if request.engine != "auto":
            raise GalleryError(f"--engine chooses text-generation's engine; {task.name} takes --backend.")
        return None
    generation.check_weight_format(request.weight_format)
    return generation.plan(request.engine, request.options.device, request.vendor)


def _resolve(request: AddRequest, engine: generation.EnginePlan | None, progress: Progress) -> models.ResolvedSource:
    """The source as a folder; for the OpenVINO engine, a GGUF file is not converted (its tokenizer and
    config are read, and the file itself is vendored)."""
    path = Path(request.source).expanduser()
    if engine and engine.engine == "openvino" and path.suffix == ".gguf" and path.is_file():
        return models.ResolvedSource(request.source, "gguf", models.gguf_metadata(path.absolute(), progress))
    return models.resolve(request.source, request.revision, progress)


def _openvino_weights(
    request: AddRequest, resolved: models.ResolvedSource, version_dir: Path, progress: Progress
) -> tuple[generation.EnginePlan, dict[str, str], models.ResolvedSource]:
    """model.gguf and its checks; with --engine auto, a failed export or load falls back to transformers
    (a GGUF source is then converted as transformers needs it)."""
    weights_dir = version_dir / VENDORED_WEIGHTS_DIR
    try:
        settings = generation.settings_for(request.params, request.options.instances)
        found = generation.add_openvino_weights(resolved, weights_dir, request.weight_format, progress, settings)
        return generation.EnginePlan("openvino", ""), found, resolved
    except ModelSourceError as exc:
        if request.engine == "openvino":
            raise
        progress.step(f"The OpenVINO engine is not usable ({exc}); serving with transformers")
        shutil.rmtree(weights_dir, ignore_errors=True)
        if resolved.kind == "gguf":
            resolved = models.resolve(request.source, request.revision, progress)
        return generation.EnginePlan("transformers", f"the OpenVINO engine was not usable ({exc})"), {}, resolved


def _export_towers(request: AddRequest, weights: Path, params: dict[str, str], progress: Progress) -> tuple[str, str]:
    """(backend, reason) for an image-text model: both towers in ONNX when they match PyTorch, run by ONNX
    Runtime or (``--backend openvino``, or ``auto`` where it measures faster) OpenVINO; else PyTorch."""
    missing = onnx_export.onnx_available()
    try:
        if missing is not None:
            raise ModelSourceError(missing)
        towers = tower_export.export(weights, progress)
    except ModelSourceError as exc:
        if request.backend in ("onnx", "openvino"):
            raise
        return "pytorch", f"the ONNX export was not usable ({exc})"
    params.update(towers.parameters)
    backend, reason = "onnx", f"both towers exported, within {onnx_export.TOLERANCE} of PyTorch"
    if request.backend == "openvino" or (request.backend == "auto" and calibrate.openvino_available()):
        try:
            difference = tower_export.check_openvino(towers)
            if request.backend == "openvino":
                backend, reason = "openvino", f"{reason}, run by OpenVINO"
            else:
                progress.step("Measuring ONNX Runtime and OpenVINO on the vision tower (--backend auto)")
                choice = _measure_vision(weights, towers, request.options.instances)
                params[PARAM_CALIBRATION] = choice.summary
                progress.step(choice.summary)
                backend = choice.backend
                if backend == "openvino":
                    reason += ", run by OpenVINO (kept over ONNX Runtime by measuring both here)"
                else:
                    reason += "; kept over OpenVINO by measuring both here"
            if backend == "openvino":
                params[PARAM_OPENVINO_DIFF] = f"{difference:.2e}"
        except ModelSourceError as exc:
            if request.backend == "openvino":
                raise
            reason += f"; OpenVINO not used ({exc})"
    for tensor_file in weights.glob("*.safetensors"):
        tensor_file.unlink()  # served from the two graphs; config, tokenizer and processor stay
    return backend, reason


def _measure_vision(weights: Path, towers: tower_export.Towers, instances: int) -> calibrate.Choice:
    """The vision tower (where an image-text model spends its time) on both engines: the sample images one
    at a time and in a batch of 8, two short rounds (a ViT-B/32 batch takes about a second on 2 cores)."""
    import torch

    pixels = torch.from_numpy(towers.pixels["pixel_values"])
    lone = [{"pixel_values": pixels[index : index + 1]} for index in range(len(pixels))]
    full = {"pixel_values": pixels[[index % len(pixels) for index in range(8)]]}
    return calibrate.compare_inputs(weights, tower_export.VISION, lone, full, instances, "image", (2, 3, 1))


def _calibrates(request: AddRequest, task: Task, part_name: str | None) -> bool:
    """``--backend auto`` on a text encoder run inside the Python backend: measure OpenVINO against ONNX Runtime."""
    return (
        request.backend == "auto"
        and part_name is None
        and not request.quantize
        and task.name not in onnx_export.IMAGE_TASKS
        and calibrate.openvino_available()
    )


def _calibrate(
    task: Task,
    weights: Path,
    exported: onnx_export.Exported,
    request: AddRequest,
    found: dict[str, str],
    progress: Progress,
) -> tuple[str, str]:
    """(backend, reason): OpenVINO when it gives PyTorch's answers and measures faster here, else ONNX Runtime.
    Runs before the PyTorch weights are removed (OpenVINO's answers are checked against them)."""
    exported_reason = f"exported and within {onnx_export.TOLERANCE} of PyTorch"
    progress.step("Measuring ONNX Runtime and OpenVINO on this machine (--backend auto; a few seconds)")
    try:
        difference = onnx_export.check_openvino(task.name, weights, exported)
        choice = calibrate.compare(
            weights, exported.path.name, list(onnx_export.CALIBRATION), request.options.instances
        )
    except ModelSourceError as exc:
        return "onnx", f"{exported_reason}; OpenVINO not used ({exc})"
    found[PARAM_CALIBRATION] = choice.summary
    progress.step(choice.summary)
    if choice.backend == "onnx":
        return "onnx", f"{exported_reason}; kept over OpenVINO by measuring both here"
    found[PARAM_OPENVINO_DIFF] = f"{difference:.2e}"
    measured = "kept over ONNX Runtime by measuring both here"
    reason = f"the ONNX export run by OpenVINO ({measured}), within {onnx_export.TOLERANCE} of PyTorch"
    return "openvino", reason


def _export_onnx(
    task: Task,
    name: str,
    part_name: str | None,
    version_dir: Path,
    staging: Path,
    request: AddRequest,
    params: dict[str, str],
    progress: Progress,
) -> tuple[dict[str, str], tuple[str, str] | None]:
    """Export model.onnx (beside the tokenizer, or into the NAME__onnx part), quantize it when asked;
    the parameters that say so, and (``--backend auto``, measured) the engine to run it with and why.
    PyTorch weights are removed only once the export is kept."""
    weights_dir = version_dir / VENDORED_WEIGHTS_DIR
    destination = staging / part_name / VERSION if part_name else weights_dir
    destination.mkdir(parents=True, exist_ok=True)
    exported = onnx_export.export(task.name, weights_dir, destination, progress)
    found: dict[str, str] = {PARAM_ONNX_DIFF: f"{exported.max_abs_diff:.2e}"}
    if request.backend == "openvino":  # the same file, run by OpenVINO: it must give PyTorch's answer too
        progress.step(f"Checking OpenVINO's run of model.onnx against PyTorch within {onnx_export.TOLERANCE}")
        found[PARAM_OPENVINO_DIFF] = f"{onnx_export.check_openvino(task.name, weights_dir, exported):.2e}"
    calibrated = None
    if _calibrates(request, task, part_name):
        calibrated = _calibrate(task, weights_dir, exported, request, found, progress)
    if request.quantize == "int8":
        progress.step("Quantizing to int8 (weights per channel, activations per token), measuring it against fp32")
        texts = request.calibration or tuple(onnx_export.CALIBRATION)
        quantized = onnx_export.quantize(task.name, exported, weights_dir, texts, params.get("pooling", "mean"))
        progress.step(quantized.summary)
        if not quantized.passed and not request.force:
            raise GalleryError(
                f"{quantized.summary}: below the gate, so the int8 model is refused. Keep fp32 (drop --quantize), "
                "or pass --force to serve it anyway."
            )
        found["tritonhf.int8_quality"] = quantized.summary + (" (kept with --force)" if not quantized.passed else "")
        if part_name:  # Triton's onnxruntime backend loads model.onnx: the int8 model takes its place
            quantized.path.replace(exported.path)
        else:
            exported.path.unlink()
            found[PARAM_ONNX_FILE] = onnx_export.INT8_FILE
    for tensor_file in weights_dir.glob("*.safetensors"):
        tensor_file.unlink()  # served from the ONNX file; config and tokenizer stay
    if part_name is None:
        openvino = request.backend == "openvino" or (calibrated is not None and calibrated[0] == "openvino")
        progress.step(
            f"the ONNX model will run with {'OpenVINO' if openvino else 'onnxruntime'} inside the Python backend"
        )
        return found, calibrated
    progress.step(f"the ONNX model will run on Triton's onnxruntime backend, as model {part_name}")
    part = build_onnx_part_config(
        part_name, name, exported.inputs, exported.output, exported.output_dims, request.options, exported.rank
    )
    text = part_config_to_text(part, name)
    parse_config(text)
    (staging / part_name / "config.pbtxt").write_text(text)
    found.update(
        {
            PARAM_ONNX_MODEL: part_name,
            PARAM_ONNX_INPUTS: ",".join(exported.inputs),
            PARAM_ONNX_OUTPUT: exported.output,
        }
    )
    return found, calibrated


def _notes(params: Mapping[str, str]) -> list[str]:
    """Comment lines for the config: which path serves the model and why, and measured quality."""
    notes = [f"Backend: {params.get(PARAM_BACKEND, 'pytorch')} ({params.get(PARAM_BACKEND_REASON, '')})."]
    if params.get(PARAM_ENGINE) == "transformers" and params.get(generation.PARAM_ENGINE_REASON):
        notes.append(f"Engine: transformers, not OpenVINO GenAI: {params[generation.PARAM_ENGINE_REASON]}.")
    if params.get(PARAM_ENGINE) == "openvino":
        notes.append(
            "Engine: OpenVINO GenAI's ContinuousBatchingPipeline on the GGUF file (openvino_engine.py); "
            "parameters max_running (sequences), max_prefill_tokens (tokens per step), kv_cache_gb, "
            "prefix_caching (true: a prompt that repeats an earlier one's start reuses its cached keys and values)."
        )
        notes.append(f"Engine settings: {params[generation.PARAM_ENGINE_SETTINGS]}.")
    if params.get(PARAM_BACKEND) == "onnx":
        notes.append(
            "ONNX Runtime: intra-op threads = this instance's share of the cores, inter-op 1, all graph "
            "optimisations (MiniLM, 2 cores: 613 texts/s vs 573 with 'extended' only; 266-300 on one thread)."
        )
    if PARAM_CALIBRATION in params:
        notes.append(f"Engine measured at gallery add: {params[PARAM_CALIBRATION]}.")
    if "tritonhf.int8_quality" in params:
        notes.append(params["tritonhf.int8_quality"] + ".")
    return notes


def ensure_model(request: AddRequest, progress: Progress | None = None) -> Path | None:
    """Add the model unless the repository already holds it from the same task and source.

    Returns the new model's folder, or None when the one already there was kept. A model of the
    same name from another task or source is replaced: for workspaces a script owns (the demo,
    the examples), not for a user's repository.
    """
    name = check_name(request.name or default_name(request.source))
    existing = request.repository.absolute() / name
    if (existing / "config.pbtxt").is_file():
        params = parameters_of_folder(existing)
        if (params.get(PARAM_TASK), params.get(PARAM_SOURCE)) == (get_task(request.task).name, request.source):
            return None
        remove_model(request.repository, name)
    return add_model(request, progress)
