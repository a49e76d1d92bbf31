"""A streamed transcription, free of I/O: what each response of a streaming speech model (added
with ``--stream``) says. Parts carry ``TEXT_DELTA`` and the new ``SEGMENTS``; the last response
is the whole answer (``TEXT`` ...), the same one a model added without ``--stream`` gives."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tritonhf.errors import ClientError
from tritonhf.sdk._generation import scalar, stream_error
from tritonhf.sdk.results import Segment, Transcription, TranscriptionPart


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
