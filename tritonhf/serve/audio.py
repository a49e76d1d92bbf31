"""OpenAI's speech routes over Triton: ``/v1/audio/transcriptions`` and ``/v1/audio/translations``.

A multipart form as OpenAI defines it: ``file`` (the encoded audio, decoded on the server), ``model``,
``language`` (transcriptions), ``prompt``, ``temperature``, ``response_format`` (json, text, srt, vtt,
verbose_json) and ``timestamp_granularities[]`` (``segment``; word times are not computed, a 400
says so). ``stream=true`` (transcriptions, response_format json or text) sends OpenAI's server-sent
events, ``transcript.text.delta`` as each window is read and ``transcript.text.done`` with the whole
text, from a model added with ``--stream``; a model that answers files whole is a 400 naming
``stream`` (OpenAI ignores it for whisper-1; ignoring an option silently is not this gateway's way).
A client that leaves stops the server reading its file. The body may be up to
``--max-audio-bytes`` (OpenAI's 25 MB) where other routes take ``--payload-limit``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from tritonhf.errors import ClientError, InferenceError
from tritonhf.sdk import AsyncClient, Transcription, subtitles
from tritonhf.serve.answers import OpenAIError, documented
from tritonhf.serve.errors import GatewayError, refused
from tritonhf.serve.shared import client_of, model_for, open_stream, sse, streamed, unless_disconnected
from tritonhf.tasks import AUDIO_TEMPERATURE_MAX

router = APIRouter()
RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
SPEECH_TASKS = ("automatic-speech-recognition",)


@router.post("/v1/audio/transcriptions", response_model=None, responses=documented(dict[str, Any], OpenAIError))
async def transcriptions(
    request: Request,
    file: Annotated[UploadFile, File()],
    model: Annotated[str | None, Form()] = None,
    language: Annotated[str | None, Form()] = None,
    prompt: Annotated[str | None, Form()] = None,
    response_format: Annotated[str, Form()] = "json",
    temperature: Annotated[float, Form()] = 0.0,
    timestamp_granularities: Annotated[list[str] | None, Form(alias="timestamp_granularities[]")] = None,
    stream: Annotated[bool, Form()] = False,
) -> Response:
    """What the file says, in its language."""
    form = _Form(model, language or None, prompt or None, response_format, temperature, timestamp_granularities or [],
                 stream)  # fmt: skip
    return await _answer(request, "transcribe", file, form)


@router.post("/v1/audio/translations", response_model=None, responses=documented(dict[str, Any], OpenAIError))
async def translations(
    request: Request,
    file: Annotated[UploadFile, File()],
    model: Annotated[str | None, Form()] = None,
    prompt: Annotated[str | None, Form()] = None,
    response_format: Annotated[str, Form()] = "json",
    temperature: Annotated[float, Form()] = 0.0,
) -> Response:
    """What the file says, in English."""
    form = _Form(model, None, prompt or None, response_format, temperature, [], False)
    return await _answer(request, "translate", file, form)


@dataclass(frozen=True)
class _Form:
    """The form fields both routes share (translations have no language, timestamps or stream)."""

    model: str | None
    language: str | None
    prompt: str | None
    response_format: str
    temperature: float
    granularities: list[str]
    stream: bool


async def _answer(request: Request, task: str, file: UploadFile, form: _Form) -> Response:
    route = "/v1/audio/transcriptions" if task == "transcribe" else "/v1/audio/translations"
    if form.response_format not in RESPONSE_FORMATS:
        raise refused("response_format", f"is {form.response_format!r}; use one of {', '.join(RESPONSE_FORMATS)}.")
    if form.stream and form.response_format not in ("json", "text"):
        raise refused("response_format", "must be json or text with stream=true (the events carry text).")
    if any(granularity != "segment" for granularity in form.granularities):
        raise refused("timestamp_granularities[]", "supports 'segment' only; word timestamps are not computed.")
    if form.granularities and form.response_format != "verbose_json":
        raise refused("timestamp_granularities[]", "needs response_format=verbose_json (as OpenAI's API).")
    if not 0.0 <= form.temperature <= AUDIO_TEMPERATURE_MAX:
        raise refused("temperature", f"is {form.temperature}; it must be between 0 and {AUDIO_TEMPERATURE_MAX:g}.")
    data = await file.read()
    if not data:
        raise GatewayError(400, "'file' is empty: send the bytes of a WAV, FLAC, OGG or MP3 file.", param="file",
                           code="empty_input")  # fmt: skip
    client = client_of(request)
    name = await model_for(client, form.model, SPEECH_TASKS, route)
    if form.stream:
        return await _events(client, data, name, form)
    timed = form.response_format in ("srt", "vtt", "verbose_json")
    try:  # a client that leaves cancels the Triton call (ClientGone: 499)
        found: Transcription = await unless_disconnected(
            request,
            client.transcribe(data, model=name, language=form.language, task=task, timestamps=timed,
                              prompt=form.prompt, temperature=form.temperature),
        )  # fmt: skip
    except ClientError as error:
        raise GatewayError.of(error, _param(error)) from error
    if form.response_format == "text":
        return PlainTextResponse(found.text + "\n")
    if form.response_format == "srt":
        return PlainTextResponse(subtitles.srt(found.segments))
    if form.response_format == "vtt":
        return PlainTextResponse(subtitles.vtt(found.segments), media_type="text/vtt")
    usage = {"type": "duration", "seconds": math.ceil(found.duration)}
    if form.response_format == "json":
        return JSONResponse({"text": found.text, "usage": usage})
    segments: list[dict[str, Any]] = [
        {"id": index, "start": segment.start, "end": segment.end, "text": segment.text}
        for index, segment in enumerate(found.segments)
    ]  # OpenAI's per-segment log-probabilities and compression ratios are not computed, so not sent
    body = {"task": "transcribe" if task == "transcribe" else "translate", "language": found.language,
            "duration": found.duration, "text": found.text, "segments": segments, "usage": usage}  # fmt: skip
    return JSONResponse(body)


def _param(error: ClientError) -> str:
    """The form field a refusal is about."""
    if "--stream" in error.message:
        return "stream"
    return "language" if "LANGUAGE" in error.message else "prompt" if "PROMPT" in error.message else "file"


async def _events(client: AsyncClient, data: bytes, name: str, form: _Form) -> Response:
    """OpenAI's transcription events: a text delta per part, then the whole text. The first part is read before
    the response starts, so a refused file is a real 400; closing the response cancels the Triton request."""
    call = client.transcribe(data, model=name, language=form.language, prompt=form.prompt,
                             temperature=form.temperature, stream=True)  # fmt: skip
    stream, first = await open_stream(call, _param)

    async def events() -> AsyncIterator[dict[str, Any]]:
        async for part in streamed(stream, first):
            if part.text:
                yield {"type": "transcript.text.delta", "delta": part.text}
        whole = stream.result
        if whole is None:
            raise InferenceError(f"Model '{name}' ended its stream without the whole answer.", name)
        yield {"type": "transcript.text.done", "text": whole.text}

    return sse(events(), stream)
