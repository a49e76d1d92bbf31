"""CTranslate2, faster-whisper's engine: the Whisper converted at ``gallery add`` into ``weights/ct2`` (float32 weights:
int8 is chosen at load), served in float32 or with ``--quantize int8`` its int8 kernels behind the gate, its encoder
then on OpenVINO where that is gated and measured faster (``ct2_encoder``); and how ``--backend auto`` times it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery import installed, sources
from tritonhf.gallery.families.speech import ct2_encoder, int8
from tritonhf.gallery.families.speech.measure import TIMED_TOKENS, Ready, Window
from tritonhf.gallery.families.speech.whisper import is_whisper, leaves_out
from tritonhf.gallery.request import PARAM_INT8_QUALITY, AddRequest, Choice, int8_gate
from tritonhf.runtime.audio import CT2_FOLDER, OPENVINO_ENCODER, PARAM_COMPUTE_TYPE, PARAM_ENCODER

PARAM_ENCODER_CHECK = "tritonhf.encoder_check"  # its encoder on OpenVINO, measured (--quantize int8)
WORKERS = 2  # batches CTranslate2 runs at once when served (WORKERS in the template's ctranslate2_engine.py)


def weights(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """``--backend ctranslate2``: the Whisper converted into ``weights/ct2``, or a GalleryError saying why not."""
    why_not = convert_for(request, folder, vendored / CT2_FOLDER, progress)
    if why_not is not None:
        raise GalleryError(f"--backend ctranslate2 cannot serve {request.source}: {why_not.rstrip('.')}.")
    return served(request, folder, vendored, "--backend ctranslate2", {}, None, progress)


def prepare(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Ready | str:
    """``--backend auto``: the Whisper converted (with --quantize int8, its encoder on OpenVINO measured and gated, so
    that CTranslate2 is timed as it would serve), or why not."""
    converted = vendored / CT2_FOLDER
    why_not = convert_for(request, folder, converted, progress)
    if why_not is not None:
        return why_not
    params: dict[str, str] = {}
    kept = encoder(request, folder, converted, params, progress) if request.quantize else None
    encoder_file = converted / OPENVINO_ENCODER if kept else None
    return Ready(lambda window: timer(converted, encoder_file, window),
                 lambda reason, found: served(request, folder, vendored, reason, found, kept, progress),
                 params)  # fmt: skip


def served(
    request: AddRequest,
    folder: Path,
    vendored: Path,
    reason: str,
    params: dict[str, str],
    encoder_kept: bool | None,
    progress: Progress,
) -> Choice:
    """The choice of CTranslate2 on ``weights/ct2`` (the PyTorch weights dropped): float32, or with --quantize int8
    its int8 kernels behind the gate and its encoder on OpenVINO where kept (``encoder_kept``; None: not yet
    measured)."""
    params = {**params, PARAM_COMPUTE_TYPE: "float32"}
    if request.quantize:
        progress.step("Checking CTranslate2's int8 against its float32 on calibration audio")
        params.update(int8_gate(request, check_int8(folder, vendored / CT2_FOLDER), progress))
        params[PARAM_COMPUTE_TYPE] = "int8"
        reason += "; int8 kernels (" + params[PARAM_INT8_QUALITY] + ")"
        if encoder_kept is None:
            encoder_kept = encoder(request, folder, vendored / CT2_FOLDER, params, progress)
        if encoder_kept:
            params[PARAM_ENCODER] = "openvino"
            reason += "; " + params[PARAM_ENCODER_CHECK]
    sources.drop_source_weights(vendored)  # served from weights/ct2
    return Choice("ctranslate2", reason, params, label="CTranslate2")


def encoder(request: AddRequest, folder: Path, converted: Path, params: dict[str, str], progress: Progress) -> bool:
    """--quantize int8: the encoder on OpenVINO where openvino is installed, gated and measured faster
    (``ct2_encoder``; the verdict into ``params``); whether it was kept (its file beside the model)."""
    if not installed.openvino_available():
        return False
    progress.step("Measuring the encoder on OpenVINO against CTranslate2's (--quantize int8)")
    found = ct2_encoder.choose(folder, converted, request.options.instances)
    progress.step(found.summary)
    params[PARAM_ENCODER_CHECK] = found.summary
    return found.kept


def convert_for(request: AddRequest, folder: Path, converted: Path, progress: Progress) -> str | None:
    """The model converted for CTranslate2 into ``converted``: None when it was, else why not."""
    why_not = _why_not(request, folder)
    if why_not is None:
        progress.step("Converting the model for CTranslate2")
        try:
            convert(folder, converted)
        except GalleryError as exc:
            why_not = str(exc)
    return why_not


def _why_not(request: AddRequest, folder: Path) -> str | None:
    """Why CTranslate2 cannot serve the model; None when it can."""
    if not is_whisper(folder):
        return "CTranslate2 runs Whisper models only"
    if not request.vendor:
        return "--no-vendor keeps a reference, and the converted model must be written into the repository"
    return installed.ctranslate2_missing() or leaves_out(folder, "CTranslate2")


def convert(folder: Path, out: Path) -> None:
    """The Whisper in ``folder`` as a CTranslate2 model in ``out`` (float32 weights: int8 is chosen at load)."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter
    from transformers import GenerationConfig

    try:
        TransformersConverter(str(folder)).convert(str(out), quantization=None, force=True)
        converted = ctranslate2.models.Whisper(str(out), device="cpu", intra_threads=1)
        generation: Any = GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError, NotImplementedError, RuntimeError) as exc:
        raise GalleryError(f"CTranslate2 could not convert the Whisper in {folder} ({exc}).") from exc
    multilingual = bool(getattr(generation, "is_multilingual", False) and getattr(generation, "lang_to_id", None))
    if converted.is_multilingual != multilingual:  # it could not detect languages, or would expect them
        raise GalleryError(
            f"CTranslate2 reads the Whisper in {folder} as {'' if converted.is_multilingual else 'not '}multilingual, "
            f"its generation config says {'' if multilingual else 'not '}multilingual."
        )


def timer(converted: Path, encoder_file: Path | None, window: Window) -> Callable[[int], Callable[[], object]]:
    """CTranslate2 as the template runs it: ``WORKERS`` parts at once, each row encoded alone on OpenVINO when
    ``encoder_file`` is given."""
    import ctranslate2

    compute = "int8" if window.int8 else "float32"
    ct2 = ctranslate2.models.Whisper(str(converted), device="cpu", compute_type=compute, intra_threads=window.threads,
                                     inter_threads=WORKERS)  # fmt: skip
    encode = None
    if encoder_file is not None:
        import openvino

        compiled = openvino.Core().compile_model(str(encoder_file), "CPU", {"INFERENCE_NUM_THREADS": window.threads})
        encode = compiled.create_infer_request()

    def rows(count: int) -> Callable[[], object]:
        batch = np.ascontiguousarray(np.repeat(window.features, count, axis=0), dtype=np.float32)
        parts = np.array_split(np.arange(count), min(WORKERS, count))

        def run() -> None:
            inputs = batch
            if encode is not None:
                inputs = np.stack([encode.infer([batch[row : row + 1]])[0][0] for row in range(count)])
            pending = [ct2.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(inputs[part])),
                                    [window.prompt] * len(part), beam_size=1, max_length=2 * TIMED_TOKENS,
                                    suppress_tokens=window.suppress, asynchronous=True) for part in parts]  # fmt: skip
            for results in pending:
                for result in results:
                    result.result()

        return run

    return rows


def check_int8(folder: Path, ct2_folder: Path) -> int8.Int8Check:
    """CTranslate2's int8 against its float32 on the calibration clips: encoder states, and the first greedy tokens."""
    import ctranslate2
    from transformers import AutoProcessor, GenerationConfig

    auto: Any = AutoProcessor  # untyped in transformers
    extractor = auto.from_pretrained(folder).feature_extractor
    start = [GenerationConfig.from_pretrained(folder).decoder_start_token_id]
    kinds = ("float32", "int8")
    engines = [ctranslate2.models.Whisper(str(ct2_folder), device="cpu", compute_type=kind) for kind in kinds]
    cosines, agree = [], []
    for seed, seconds in enumerate(int8.CALIBRATION_SECONDS):
        audio = int8.calibration_audio(seconds, extractor.sampling_rate, seed)
        features = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]
        view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features, dtype=np.float32))
        states = [np.asarray(engine.encode(view)).ravel() for engine in engines]
        cosines.append(int8.cosine(*states))
        tokens = [engine.generate(view, [start], beam_size=1, max_length=2 * int8.GATE_TOKENS)[0].sequences_ids[0]
                  for engine in engines]  # fmt: skip
        agree.append(int8.agreement(*tokens))
    return int8.Int8Check(min(cosines), float(np.mean(agree)))
