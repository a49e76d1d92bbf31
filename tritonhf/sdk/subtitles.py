"""A transcription's segments as subtitle files: SubRip (.srt) and WebVTT (.vtt), as OpenAI's
``response_format=srt|vtt`` writes them. Used by the CLI and the gateway."""

from __future__ import annotations

from collections.abc import Sequence

from tritonhf.sdk.results import Segment


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{separator}{millis:03d}"


def srt(segments: Sequence[Segment]) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each."""
    cues = [
        f"{index}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
        for index, s in enumerate(segments, start=1)
    ]
    return "\n".join(cues)


def vtt(segments: Sequence[Segment]) -> str:
    """WebVTT: a ``WEBVTT`` header, then ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` cues."""
    cues = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)
