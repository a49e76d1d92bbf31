"""Speech calls, free of I/O: the transcription plan (``Client.transcribe``), and what each response of a
streaming speech model (added with ``--stream``) says. Parts carry ``TEXT_DELTA`` and the new ``SEGMENTS``; the
last response is the whole answer (``TEXT`` ...), the same one a model added without ``--stream`` gives."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tritonhf._wire import codecs
from tritonhf._wire.config import ModelConfig
from tritonhf.errors import ClientError, InvalidInputError
from tritonhf.sdk import media
from tritonhf.sdk._generation import RANGES, check_option, scalar, stream_error
from tritonhf.sdk._plans import Plan, _check_flag, _check_model, _file_column, check_prompt
from tritonhf.sdk._policy import Tensors
from tritonhf.sdk.media import AudioInput
from tritonhf.sdk.results import Segment, Transcription, TranscriptionPart
from tritonhf.sdk.sampling import SpeechOptions
from tritonhf.tasks import AUDIO_TEMPERATURE_MAX, seed_to_wire


def segments(value: Any) -> tuple[Segment, ...]:
    """SEGMENTS' JSON as ``Segment``s."""
    return tuple(Segment(float(s["start"]), float(s["end"]), str(s["text"])) for s in json.loads(str(value or "[]")))


class SpeechProgress:
    """What a transcription stream has delivered: its parts so far, and at its end the whole ``result``."""

    def __init__(self) -> None:
        self.chunks = 0
        self.result: Transcription | None = None

    def read(self, response: Mapping[str, Any]) -> TranscriptionPart | None:
        """A part, or None for the whole answer (kept as ``result``) or an empty response."""
        language = str(scalar(response["SPOKEN_LANGUAGE"])) if "SPOKEN_LANGUAGE" in response else ""
        duration = float(scalar(response["DURATION"])) if "DURATION" in response else 0.0
        if "TEXT" in response:
            self.result = Transcription(str(scalar(response["TEXT"])), language, duration,
                                        segments(scalar(response.get("SEGMENTS"))))  # fmt: skip
            return None
        if "TEXT_DELTA" not in response:
            return None
        self.chunks += 1
        return TranscriptionPart(str(scalar(response["TEXT_DELTA"])), segments(scalar(response.get("SEGMENTS"))),
                                 language, duration)  # fmt: skip

    def stream_error(self, error: ClientError, model: str) -> ClientError:
        return stream_error(self.chunks, error, model)


SPEECH_TASKS = ("automatic-speech-recognition",)


def transcribe(
    audio: AudioInput | Sequence[AudioInput], model: str | None, options: SpeechOptions
) -> Plan[Transcription | list[Transcription]]:
    """``Client.transcribe``: what each file says (encoded bytes go out; the server decodes and resamples)."""
    items, single = media.audio_list(audio)
    _check_model(model)
    unknown = set(options) - set(SpeechOptions.__annotations__)
    if unknown:
        raise InvalidInputError(f"transcribe takes no option {', '.join(sorted(unknown))}; see SpeechOptions.")
    language, prompt = options.get("language"), options.get("prompt")
    task, timestamps = options.get("task", "transcribe"), options.get("timestamps", False)
    temperature, seed, max_tokens = options.get("temperature", 0.0), options.get("seed"), options.get("max_tokens")
    if language is not None and (not isinstance(language, str) or not language.strip()):
        raise InvalidInputError(f"language must be a language code such as 'en', not {language!r}.")
    if task not in ("transcribe", "translate"):
        raise InvalidInputError(f"task must be 'transcribe' or 'translate', not {task!r}.")
    _check_flag("timestamps", timestamps)
    if prompt is not None:
        check_prompt(prompt)
    check_option("temperature", temperature, "FP32", lambda v: 0 <= v <= AUDIO_TEMPERATURE_MAX,
                 f"a number from 0 (greedy) to {AUDIO_TEMPERATURE_MAX:g}")  # fmt: skip
    for key, value in (("seed", seed), ("max_tokens", max_tokens)):
        if value is not None:
            check_option(key, value, *RANGES[key])  # the ranges generation has (runtime/ranges.py)

    def build(config: ModelConfig, rows: slice) -> Tensors:
        n = len(items[rows])
        inputs = {"AUDIO": _file_column(items[rows])}
        if language is not None:
            inputs["LANGUAGE"] = codecs.bytes_matrix([[language.strip()]] * n)
        if task != "transcribe":
            inputs["TASK"] = codecs.bytes_matrix([[task]] * n)
        if timestamps:
            inputs["TIMESTAMPS"] = codecs.column(True, "BOOL", n)
        if prompt:
            inputs["PROMPT"] = codecs.bytes_matrix([[prompt]] * n)
        if temperature:
            inputs["TEMPERATURE"] = codecs.column(float(temperature), "FP32", n)
        if seed is not None:
            inputs["SEED"] = codecs.column(seed_to_wire(seed), "INT64", n)
        if max_tokens is not None:
            inputs["MAX_TOKENS"] = codecs.column(max_tokens, "INT32", n)
        return inputs

    def decode(config: ModelConfig, result: Tensors) -> Transcription | list[Transcription]:
        texts, languages, texts_of_segments = (
            [str(value) for value in codecs.decode(result[name]).reshape(-1)]
            for name in ("TEXT", "SPOKEN_LANGUAGE", "SEGMENTS")
        )
        found = [
            Transcription(
                text=texts[row],
                language=languages[row],
                duration=float(result["DURATION"].reshape(-1)[row]),
                segments=segments(texts_of_segments[row]),
            )
            for row in range(len(items))
        ]
        return found[0] if single else found

    return Plan(
        SPEECH_TASKS,
        model,
        len(items),
        build,
        lambda _: ["TEXT", "SPOKEN_LANGUAGE", "DURATION", "SEGMENTS"],
        decode,
        lambda _: [],
    )
