"""Encoded audio in, a model's waveform out: decoding with limits, mixing down and resampling.

Requests carry encoded files (WAV, FLAC, OGG/Vorbis or Opus, MP3), never samples: one decoder
(libsndfile, through ``soundfile``) for every client, and a compressed file stays small on the
wire. Each file is read as float32, its channels averaged to mono, and resampled to the model's
rate with soxr (high quality), which is what a careful user does in-process; the harness's
reference reads the same file the same way with its own code.

Limits come before the samples: libsndfile reads the length from the header, so a file past
``max_seconds`` is refused before anything is decoded. A refused file fails its request alone
(``BadRequest``): empty, damaged, an unsupported format, no samples, or silent (all zeros:
nothing to transcribe, which a model would answer with invented text).

A row may also be a ``data:`` URI (``data:audio/wav;base64,...``): the only way a file travels
through Triton's JSON generate routes, which a streaming (decoupled) speech model is called on
over HTTP. No audio format starts with ``data:``, so the two never mix up.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from .common import BadRequest

DEFAULT_MAX_AUDIO_SECONDS = 3600  # an hour: a meeting, a lecture; longer is a batch job, not a request
# Whisper on CTranslate2 (--backend ctranslate2): the converted model's folder inside the weights,
# and the arithmetic it runs in (float32, or int8 with --quantize int8).
CT2_FOLDER = "ct2"
PARAM_COMPUTE_TYPE = "tritonhf.compute_type"
# With --quantize int8, where it measured faster: Whisper's encoder on OpenVINO (the speech family's ct2_encoder),
# saved beside the converted model; CTranslate2 decodes from its states.
PARAM_ENCODER = "tritonhf.encoder"
OPENVINO_ENCODER = "openvino_encoder.xml"
# Whisper on OpenVINO GenAI's WhisperPipeline (--backend openvino): the exported folder inside the weights.
OPENVINO_WHISPER = "openvino"
PARAM_MAX_AUDIO_SECONDS = "max_audio_seconds"
FORMATS = "WAV, FLAC, OGG (Vorbis, Opus) or MP3"


def long_form_settings(generation: Any) -> list[str]:
    """The settings of a Whisper generation config that make transformers read a long file otherwise than window
    after window alone (``longform.py`` beside the template): the previous windows' text in the decoder's prompt
    (``condition_on_prev_tokens``), or windows scored as silence skipped (``no_speech_threshold``). PyTorch then
    leaves the whole file to ``generate``; CTranslate2 does neither, so ``gallery add`` serves such a model on
    PyTorch and the template refuses it on CTranslate2."""
    asked = {
        "condition_on_prev_tokens": bool(getattr(generation, "condition_on_prev_tokens", None)),
        "no_speech_threshold": getattr(generation, "no_speech_threshold", None) is not None,
    }
    return [name for name, wanted in asked.items() if wanted]


def decode_audio(data: bytes, sampling_rate: int, max_seconds: float = DEFAULT_MAX_AUDIO_SECONDS) -> Any:
    """One encoded file as float32 mono samples at ``sampling_rate``; ``BadRequest`` saying what is wrong."""
    import numpy as np
    import soundfile

    data = unwrap_data_uri(data)
    if not data:
        raise BadRequest(f"is empty (0 bytes); send the bytes of a {FORMATS} file.")
    try:
        info = soundfile.info(io.BytesIO(data))
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as exc:
        raise BadRequest(
            f"is not audio libsndfile can read ({_reason(exc)}, {len(data)} bytes); send {FORMATS}."
        ) from None
    if info.frames <= 0 or info.samplerate <= 0:
        raise BadRequest(f"is a {info.format} file with no samples.")
    seconds = info.frames / info.samplerate
    if seconds > max_seconds:
        raise BadRequest(
            f"is {seconds:,.1f} s long, over the limit of {max_seconds:,g} s (parameter {PARAM_MAX_AUDIO_SECONDS}); "
            "send a shorter file."
        )
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError) as exc:
        raise BadRequest(f"is a damaged or truncated {info.format} file ({_reason(exc)}).") from None
    if samples.shape[0] == 0:
        raise BadRequest(f"is a {info.format} file with no samples.")
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    if not np.any(mono):
        raise BadRequest(f"is silent ({mono.shape[0] / rate:.2f} s of zeros): there is nothing to transcribe.")
    return resample(mono, rate, sampling_rate)


def unwrap_data_uri(data: bytes) -> bytes:
    """The file inside a ``data:[type];base64,PAYLOAD`` row, or ``data`` itself when it is not one."""
    if not data.startswith(b"data:"):
        return data
    head, comma, payload = data.partition(b",")
    if not comma or not head.endswith(b";base64"):
        raise BadRequest("is a data: URI that is not base64 (send data:audio/wav;base64,PAYLOAD).")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("is a data: URI whose payload is not valid base64.") from None


def resample(samples: Any, rate: int, target: int) -> Any:
    """``samples`` (float32 mono) at ``target`` Hz: soxr's high quality, unchanged when the rates agree."""
    import numpy as np

    if rate == target:
        return np.ascontiguousarray(samples, dtype=np.float32)
    import soxr

    return soxr.resample(samples, rate, target, quality="HQ").astype(np.float32, copy=False)


def _reason(exc: BaseException) -> str:
    """libsndfile's own words ("Format not recognised"), not the BytesIO object's repr."""
    text = str(getattr(exc, "error_string", "") or exc).strip().rstrip(".")
    return text or type(exc).__name__
