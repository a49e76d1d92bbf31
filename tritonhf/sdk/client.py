"""``Client``: one typed method per gallery task, over HTTP or gRPC, blocking.

A thin I/O shell over the pure core: each method asks ``_plans`` for a ``Plan`` (what to
send and how to read it), resolves the model and sends the chunks through its transport
within one deadline (``_policy``), and returns the plan's result; streams read through
``_generation``. Every failure is raised as a ``tritonhf.errors``
type (``_errors`` maps them).

This file is the one source of both clients: ``tools/generate_aio.py`` writes ``aio.py``
(``AsyncClient``) from it by substitution (``make lint`` checks that it is current). What
differs beyond ``async``/``await`` lives in ``_flavour`` / ``_aio_flavour``.

Timeouts: ``timeout=`` bounds the whole call, retries and chunks included; for a stream it
bounds the whole stream, and ``idle_timeout=`` (optional) the wait between two chunks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, overload

import numpy as np
from typing_extensions import Unpack

from tritonhf._wire.config import ModelConfig
from tritonhf._wire.settings import DEFAULT_TIMEOUT, default_url, key_headers
from tritonhf._wire.transport import Endpoint, StreamHandle, Transport, connect
from tritonhf.errors import ClientError, InferenceError, InvalidInputError, RequestTimeoutError
from tritonhf.sdk import _flavour as flavour
from tritonhf.sdk import _generation as generation
from tritonhf.sdk import _image_plans as image_plans
from tritonhf.sdk import _plans as plans
from tritonhf.sdk import _policy as policy
from tritonhf.sdk import _speech as speech
from tritonhf.sdk._errors import translate
from tritonhf.sdk.media import AudioInput, ImageInput
from tritonhf.sdk.results import (
    Answer,
    ChatResult,
    Classification,
    Embeddings,
    Entity,
    FillMask,
    ModelInfo,
    Ranked,
    TokenLogprob,
    ToolCall,
    Transcription,
    TranscriptionPart,
    Usage,
    ZeroShotClassification,
)
from tritonhf.sdk.sampling import Sampling, SpeechOptions

T = TypeVar("T")
R = TypeVar("R")
P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)
M = TypeVar("M", bound=generation.SchemaModel)  # a response_format class (a pydantic model)


class _Progress(Protocol[P_co]):
    """What a stream has delivered (``_generation.StreamProgress``, ``_speech.SpeechProgress``)."""

    chunks: int

    def read(self, response: Mapping[str, Any]) -> P_co | None: ...

    def stream_error(self, error: ClientError, model: str) -> ClientError: ...


class ResponseStream(Iterator[P]):
    """A decoupled model's answers, as they arrive: the base of the text and transcription streams. Closing it (or
    leaving its ``with`` block, or, for the async stream, cancelling the task) cancels the request on the server."""

    def __init__(
        self,
        client: Client,
        model: str,
        inputs: policy.Tensors,
        deadline: policy.Deadline,
        idle_timeout: float | None,
        progress: _Progress[P],
    ) -> None:
        self._client, self.model, self._inputs = client, model, inputs
        self._deadline, self._idle = deadline, idle_timeout
        self._progress = progress
        self._handle: StreamHandle | None = None
        self._closed = False

    def _open(self) -> None:
        self._handle = self._client._call(
            self.model,
            lambda: self._client._transport.open_stream(self.model, self._inputs, self._wait()),
            self._deadline,
        )

    def _wait(self) -> float:
        remaining = self._deadline.remaining()
        return min(remaining, self._idle) if self._idle is not None else remaining

    def __iter__(self) -> ResponseStream[P]:
        return self

    def __next__(self) -> P:
        attempt = 0
        while not self._closed and self._handle is not None:
            wait = self._wait()
            if wait <= 0:
                self.close()
                raise policy.never_answered(self.model, self._deadline)
            try:
                response = self._handle.next(wait)
            except flavour.CANCELLED:
                self.close()
                raise
            except Exception as exc:
                error = self._error(exc, wait)
                attempt += 1
                delay = policy.retry_delay(error, attempt, self._deadline) if not self._progress.chunks else None
                self._handle.close()
                if delay is None:
                    self._closed = True
                    raise error from exc
                flavour.sleep(delay)  # nothing was delivered yet: open the stream again
                self._open()
                continue
            if response is None:
                self.close()
                break
            found = self._progress.read(response)
            if found is not None:
                return found
        raise StopIteration

    def _error(self, exc: Exception, wait: float) -> ClientError:
        if isinstance(exc, TimeoutError) and self._idle is not None and wait >= self._idle:
            return RequestTimeoutError(
                f"Model '{self.model}' sent nothing for {self._idle:g} s (idle_timeout).", self.model
            )
        if isinstance(exc, TimeoutError):
            return policy.never_answered(self.model, self._deadline)
        error = translate(exc, self.model, self._client.url)
        self._client._directory.forget(self.model, error)
        return self._progress.stream_error(error, self.model)

    def close(self) -> None:
        """Stop the stream; the server stops generating for it."""
        if not self._closed:
            self._closed = True
            if self._handle is not None:
                self._handle.close()

    def __enter__(self) -> ResponseStream[P]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:  # sync only
        self.close()  # sync only


class TextStream(ResponseStream[str]):
    """Generated text, chunk by chunk, as it arrives. Closing it (or leaving its ``with`` block,
    or, for the async stream, cancelling the task) cancels the request on the server.

    After the last chunk, ``usage`` holds the token counts and ``finish_reason`` says why it
    ended ("stop": end of text or a stop string; "length": ``max_tokens``), when the model sends them.
    """

    def __init__(
        self, client: Client, model: str, inputs: policy.Tensors, deadline: policy.Deadline, idle_timeout: float | None
    ) -> None:
        self._text = generation.StreamProgress()
        super().__init__(client, model, inputs, deadline, idle_timeout, self._text)

    @property
    def usage(self) -> Usage | None:
        return self._text.usage

    @property
    def finish_reason(self) -> str | None:
        return self._text.finish_reason

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls the model made (after the last chunk; with ``tools`` offered)."""
        return self._text.tool_calls

    @property
    def content(self) -> str | None:
        """With tool calls: the answer's text outside them (the chunks carry all of it)."""
        return self._text.content

    @property
    def reasoning(self) -> str:
        """A reasoning model's thinking so far: it grows before the text does (a chunk of "" each time it grows
        alone), and is never in the chunks."""
        return self._text.reasoning

    @property
    def logprobs(self) -> list[TokenLogprob]:
        """With ``logprobs`` asked: each token's log-probability so far (it grows with the chunks)."""
        return self._text.logprobs


class TranscriptionStream(ResponseStream[TranscriptionPart]):
    """A file's transcription, part by part, as each window is read (``transcribe(..., stream=True)`` on a model
    added with ``--stream``). Each ``TranscriptionPart`` has the text since the last part (the parts add up to the
    text) and its timed segments. Closing it (or leaving its ``with`` block) stops the server reading the file.

    After the last part, ``result`` is the whole ``Transcription``: what the call without ``stream`` returns.
    """

    def __init__(
        self, client: Client, model: str, inputs: policy.Tensors, deadline: policy.Deadline, idle_timeout: float | None
    ) -> None:
        self._speech = speech.SpeechProgress()
        super().__init__(client, model, inputs, deadline, idle_timeout, self._speech)

    @property
    def result(self) -> Transcription | None:
        return self._speech.result


class Client:
    """A typed client for models served by tritonhf (or any Triton model, with ``infer``).

    ``url`` says the protocol: ``http://127.0.0.1:8000``, ``grpc://127.0.0.1:8001`` or
    ``grpcs://host:8001`` (TLS; ``ca_file`` for a private CA). ``timeout`` (seconds) bounds
    every call unless the call gives its own. ``api_key`` is sent only when given (or set as
    ``$TRITONHF_API_KEY``), for servers whose APIs you restricted yourself. ``transport``
    replaces the network (``tritonhf.sdk.testing.MemoryTransport`` in tests).
    ``unavailable_timeout`` (seconds): how long a call keeps retrying a server it cannot reach
    (default: until ``timeout``); a gateway that must say 503 fast sets a second or two.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        concurrency: int = 8,
        api_key: str | None = None,
        ca_file: str | None = None,
        unavailable_timeout: float | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.timeout = timeout
        self.unavailable_timeout = unavailable_timeout
        if transport is None:
            endpoint = Endpoint.parse(url or default_url())
            transport = connect(endpoint, key_headers(api_key), ca_file)
        self._transport = transport
        self.url = transport.endpoint.url
        self._fan = flavour.FanOut(concurrency)
        self._directory = policy.Directory()

    # ---------------------------------------------------------------- plumbing

    def _call(self, model: str | None, action: flavour.Action[T], deadline: policy.Deadline) -> T:
        """``action()``, with errors translated; transient failures (server restarting, model
        being repaired) retried with backoff while the deadline allows, then raised."""
        attempt = 0
        while True:
            try:
                return action()
            except flavour.CANCELLED:
                raise
            except Exception as exc:
                error = translate(exc, model, self.url)
                self._directory.forget(model, error)
                attempt += 1
                delay = policy.retry_delay(error, attempt, deadline)
                if delay is None:
                    raise error from exc
                flavour.sleep(delay)

    def _deadline(self, timeout: float | None) -> policy.Deadline:
        return policy.Deadline(timeout if timeout is not None else self.timeout, unreachable=self.unavailable_timeout)

    def _config(self, name: str, deadline: policy.Deadline) -> ModelConfig:
        config = self._directory.config(name)
        if config is None:
            raw = self._call(name, lambda: self._transport.model_config(name, deadline.remaining()), deadline)
            config = ModelConfig.parse(raw)
            if not config.name:
                config = dataclasses.replace(config, name=name)
            self._directory.store_config(config)
        return config

    def _models(self, deadline: policy.Deadline) -> list[ModelInfo]:
        models = self._directory.models()
        if models is None:
            index = self._call(None, lambda: self._transport.repository_index(deadline.remaining()), deadline)
            ready = [str(entry.get("name", "")) for entry in index if entry.get("state") == "READY"]
            configs = {name: self._config(name, deadline) for name in ready}
            models = policy.model_infos(index, configs)
            self._directory.store_models(models)
        return models

    def _resolve(self, tasks: Sequence[str], model: str | None, deadline: policy.Deadline) -> str:
        return model if model is not None else policy.choose_model(self._models(deadline), tasks, self.url)

    def _run(self, plan: plans.Plan[R], timeout: float | None) -> R:
        deadline = self._deadline(timeout)
        if plan.rows == 0 and not plan.needs_model_for_empty:
            return plan.empty(None)
        name = self._resolve(plan.tasks, plan.model, deadline)
        config = self._config(name, deadline)
        if plan.rows == 0:
            return plan.empty(config)
        outputs = plan.outputs(config)

        def send(rows: slice) -> policy.Tensors:
            def attempt() -> policy.Tensors:
                # Read again on a retry: a model re-added meanwhile may take smaller batches.
                current = self._config(name, deadline)
                sent = [
                    self._infer(name, current, plan.build(current, piece), outputs, deadline)
                    for piece in policy.split(rows, policy.rows_per_request(current))
                ]
                return policy.merge(sent, outputs)

            return self._call(name, attempt, deadline)

        parts = self._fan.send_all(send, policy.chunks(plan.rows, policy.rows_per_request(config)))
        return plan.decode(config, policy.merge(parts, outputs))

    def _infer(
        self, name: str, config: ModelConfig, inputs: policy.Tensors, outputs: list[str], deadline: policy.Deadline
    ) -> policy.Tensors:
        """One request's answer; a decoupled model's is the last response of its stream (the whole answer)."""
        if not config.decoupled:
            return self._transport.infer(name, inputs, outputs, deadline.remaining())
        handle = self._transport.open_stream(name, inputs, deadline.remaining())
        last: Mapping[str, Any] | None = None
        try:
            while True:
                response = handle.next(deadline.remaining())
                if response is None:
                    break
                last = response
        finally:
            handle.close()
        if last is None or any(output not in last for output in outputs):
            raise InferenceError(f"Model '{name}' ended its stream without the whole answer.", name)
        return policy.response_tensors(last, outputs)

    # ---------------------------------------------------------------- the server

    def models(self, *, timeout: float | None = None) -> list[ModelInfo]:
        """Every model in the server's repository, with its state and (gallery) task."""
        return self._models(self._deadline(timeout))

    def resolve_model(self, tasks: Sequence[str], model: str | None = None) -> str:
        """``model`` itself, or the single ready model of the first of ``tasks`` that has any."""
        return self._resolve(tasks, plans._check_model(model), self._deadline(None))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server reports ready; ``ServerUnavailableError`` after ``timeout``."""
        deadline = self._deadline(timeout)
        while True:
            try:
                if self._transport.is_ready(min(deadline.remaining(), 2.0)):
                    return
                error: ClientError = translate(ConnectionError("the server is not ready yet"), None, self.url)
            except Exception as exc:  # not up yet: connection refused and friends
                error = translate(exc, None, self.url)
            if deadline.remaining() < 0.2:
                raise error
            flavour.sleep(0.2)

    def statistics(self, model: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        """Triton's inference statistics (counts, queue and compute time, batch sizes)."""
        deadline = self._deadline(timeout)
        return dict(
            self._call(model or None, lambda: self._transport.statistics(model, deadline.remaining()), deadline)
        )

    # ---------------------------------------------------------------- tasks

    @overload
    def classify(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self,
        texts: str,
        *,
        model: str | None = None,
        top_k: None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> Classification: ...
    @overload
    def classify(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        top_k: None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[Classification]: ...
    @overload
    def classify(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self, texts: str, *, model: str | None = None, top_k: int, truncate: bool = True, timeout: float | None = None
    ) -> list[Classification]: ...
    @overload
    def classify(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        top_k: int,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[list[Classification]]: ...

    def classify(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        top_k: int | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> Classification | list[Classification] | list[list[Classification]]:
        """The best label per text, or with ``top_k`` the k best labels per text.

        A text longer than the model takes is judged by its beginning (``truncated=True`` in
        the result); ``truncate=False`` refuses it instead (``InvalidInputError``).
        """
        return self._run(plans.classify(texts, model, top_k, truncate), timeout)

    @overload
    def classify_images(  # type: ignore[overload-overlap]  # a str (a path) is also a Sequence[str]
        self, images: ImageInput, *, model: str | None = None, top_k: None = None, timeout: float | None = None
    ) -> Classification: ...
    @overload
    def classify_images(
        self,
        images: Sequence[ImageInput],
        *,
        model: str | None = None,
        top_k: None = None,
        timeout: float | None = None,
    ) -> list[Classification]: ...
    @overload
    def classify_images(  # type: ignore[overload-overlap]  # a str (a path) is also a Sequence[str]
        self, images: ImageInput, *, model: str | None = None, top_k: int, timeout: float | None = None
    ) -> list[Classification]: ...
    @overload
    def classify_images(
        self, images: Sequence[ImageInput], *, model: str | None = None, top_k: int, timeout: float | None = None
    ) -> list[list[Classification]]: ...

    def classify_images(
        self,
        images: ImageInput | Sequence[ImageInput],
        *,
        model: str | None = None,
        top_k: int | None = None,
        timeout: float | None = None,
    ) -> Classification | list[Classification] | list[list[Classification]]:
        """The best label per image, or with ``top_k`` the k best labels per image (an image-classification
        model: ViT, ConvNeXt ...).

        An image is a path, bytes of a JPEG/PNG/WebP/GIF/BMP file, a PIL image or a uint8 array
        ``[H, W(, C)]``; the SDK sends encoded bytes (PIL images and arrays as lossless PNG) and the
        server decodes them as transformers' ``load_image`` does. One image gives one answer, a list a
        list. An image the server cannot use (damaged, unsupported format, past its pixel limit) raises
        ``InvalidInputError`` naming it.
        """
        return self._run(image_plans.classify_images(images, model, top_k), timeout)

    def classify_pairs(
        self,
        pairs: Sequence[tuple[str, str]],
        *,
        model: str | None = None,
        top_k: int | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[list[Classification]]:
        """Each (text, text_pair) classified together, every label best first (or the ``top_k`` best):
        natural-language inference, cross-encoders. What TEI's /predict does with pairs."""
        return self._run(plans.classify_pairs(pairs, model, top_k, truncate), timeout)

    @overload
    def zero_shot(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self,
        texts: str,
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        truncate: bool = True,
        multi_label: bool = False,
        timeout: float | None = None,
    ) -> ZeroShotClassification: ...
    @overload
    def zero_shot(
        self,
        texts: Sequence[str],
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        truncate: bool = True,
        multi_label: bool = False,
        timeout: float | None = None,
    ) -> list[ZeroShotClassification]: ...

    def zero_shot(
        self,
        texts: str | Sequence[str],
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        truncate: bool = True,
        multi_label: bool = False,
        timeout: float | None = None,
    ) -> ZeroShotClassification | list[ZeroShotClassification]:
        """Candidate labels ranked per text; ``labels`` overrides the model's default labels. ``multi_label``
        (an entailment model) scores each label on its own, as transformers' zero-shot pipeline does."""
        return self._run(plans.zero_shot(texts, labels, model, truncate, multi_label), timeout)

    @overload
    def ner(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self, texts: str, *, model: str | None = None, aggregation: str | None = None, timeout: float | None = None
    ) -> list[Entity]: ...
    @overload
    def ner(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        aggregation: str | None = None,
        timeout: float | None = None,
    ) -> list[list[Entity]]: ...

    def ner(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        aggregation: str | None = None,
        timeout: float | None = None,
    ) -> list[Entity] | list[list[Entity]]:
        """Named entities per text, with character offsets into that text (long texts read whole)."""
        return self._run(plans.ner(texts, model, aggregation), timeout)

    def embed(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        prompt_name: str | None = None,
        timeout: float | None = None,
    ) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One float32 vector per text: an array of shape (n, dim) (n = 1 for a single str), as the model's
        sentence-transformers ``encode`` gives it; ``prompt_name`` puts one of the model's prompts first
        (default: the model's default prompt, if it has one).

        With an image-text model (``model=`` a CLIP or SigLIP model) the vectors are in the space of its
        images (``embed_images``), so texts and images compare by cosine.
        """
        return self._run(plans.embed(texts, model, normalize, truncate, prompt_name), timeout)

    @overload
    def transcribe(  # type: ignore[overload-overlap]  # a str (a path) is also a Sequence[str]
        self,
        audio: AudioInput,
        *,
        model: str | None = None,
        timeout: float | None = None,
        stream: Literal[False] = False,
        **options: Unpack[SpeechOptions],
    ) -> Transcription: ...
    @overload
    def transcribe(
        self,
        audio: AudioInput,
        *,
        model: str | None = None,
        timeout: float | None = None,
        stream: Literal[True],
        idle_timeout: float | None = None,
        **options: Unpack[SpeechOptions],
    ) -> TranscriptionStream: ...
    @overload
    def transcribe(
        self,
        audio: Sequence[AudioInput],
        *,
        model: str | None = None,
        timeout: float | None = None,
        stream: Literal[False] = False,
        **options: Unpack[SpeechOptions],
    ) -> list[Transcription]: ...

    def transcribe(
        self,
        audio: AudioInput | Sequence[AudioInput],
        *,
        model: str | None = None,
        timeout: float | None = None,
        stream: bool = False,
        idle_timeout: float | None = None,
        **options: Unpack[SpeechOptions],
    ) -> Transcription | list[Transcription] | TranscriptionStream:
        """What each file says, with an automatic-speech-recognition model (Whisper).

        Audio is a path, the bytes of a WAV/FLAC/OGG/MP3 file, or ``(samples, sampling_rate)``
        (sent as a lossless float WAV); any rate and channel count: the server mixes down and
        resamples. One file gives one ``Transcription``, a list a list. Options (``SpeechOptions``):
        ``language`` the spoken language's code (default: detected, and returned);
        ``task="translate"`` into English; ``timestamps=True`` timed segments (otherwise one
        segment, the whole file); ``prompt`` text that came before (names, spelling, style);
        ``temperature`` > 0 samples, reproducibly with ``seed``; ``max_tokens`` bounds the tokens
        of each 30 s window. Files longer than the window are read whole, window after window. A
        file the server cannot use (damaged, silent, past its length limit) raises
        ``InvalidInputError`` naming it.

        ``stream=True`` (one file, a model added with ``--stream``): a ``TranscriptionStream`` of
        ``TranscriptionPart``s as each window is read; ``idle_timeout`` bounds the wait between two.
        """
        plan = speech.transcribe(audio, model, options)
        if not stream:
            return self._run(plan, timeout)
        if plan.rows != 1:
            raise InvalidInputError("stream=True transcribes one file; send one (or call without stream).")
        deadline = self._deadline(timeout)
        name = self._resolve(plan.tasks, plan.model, deadline)
        config = self._config(name, deadline)
        if not config.decoupled:
            raise InvalidInputError(
                f"Model '{name}' answers whole files: add it with `tritonhf gallery add automatic-speech-recognition "
                "--stream` to stream, or call without stream=True."
            )
        parts = TranscriptionStream(self, name, plan.build(config, slice(0, 1)), deadline, idle_timeout)
        parts._open()
        return parts

    def embed_images(
        self,
        images: ImageInput | Sequence[ImageInput],
        *,
        model: str | None = None,
        normalize: bool | None = None,
        timeout: float | None = None,
    ) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One float32 vector per image, shape (n, dim), from an image-text model (CLIP, SigLIP): the space its
        texts are embedded in (``embed(texts, model=...)``), L2-normalised unless ``normalize=False``.

        Images as for ``classify_images``: a path, file bytes, a PIL image or a uint8 array.
        """
        return self._run(image_plans.embed_images(images, model, normalize), timeout)

    @overload
    def zero_shot_images(  # type: ignore[overload-overlap]  # a str (a path) is also a Sequence[str]
        self,
        images: ImageInput,
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> ZeroShotClassification: ...
    @overload
    def zero_shot_images(
        self,
        images: Sequence[ImageInput],
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> list[ZeroShotClassification]: ...

    def zero_shot_images(
        self,
        images: ImageInput | Sequence[ImageInput],
        *,
        labels: Sequence[str] | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> ZeroShotClassification | list[ZeroShotClassification]:
        """Candidate labels ranked per image by an image-text model (CLIP, SigLIP); ``labels`` overrides the
        labels the model was added with. Each label is read through the model's prompt template ("a photo of
        a {}." by default). Scores as the model defines them: they sum to 1 for CLIP (a softmax over the
        labels), each is its own probability for SigLIP (a sigmoid per label)."""
        return self._run(image_plans.zero_shot_images(images, labels, model), timeout)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        model: str | None = None,
        top_n: int | None = None,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[Ranked]:
        """``documents`` ranked by relevance to ``query`` (a cross-encoder), best first; ``top_n`` keeps the best n.

        Any number of documents: they go out ``max_batch_size`` at a time, concurrently, and are merged in order.
        """
        return self._run(plans.rerank(query, documents, model, top_n, truncate), timeout)

    @overload
    def answer(
        self, question: str, context: str, *, model: str | None = None, top_k: None = None, timeout: float | None = None
    ) -> Answer: ...
    @overload
    def answer(
        self, question: str, context: str, *, model: str | None = None, top_k: int, timeout: float | None = None
    ) -> list[Answer]: ...

    def answer(
        self,
        question: str,
        context: str,
        *,
        model: str | None = None,
        top_k: int | None = None,
        timeout: float | None = None,
    ) -> Answer | list[Answer]:
        """The span of ``context`` that answers ``question`` (extractive QA), or the ``top_k`` best.

        A context longer than the model reads is read in overlapping windows; offsets are into ``context``.
        """
        return self._run(plans.answer(question, context, model, top_k), timeout)

    @overload
    def fill_mask(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]
        self,
        texts: str,
        *,
        model: str | None = None,
        top_k: int = 5,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[FillMask]: ...
    @overload
    def fill_mask(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        top_k: int = 5,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[list[FillMask]]: ...

    def fill_mask(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        top_k: int = 5,
        truncate: bool = True,
        timeout: float | None = None,
    ) -> list[FillMask] | list[list[FillMask]]:
        """The ``top_k`` candidates for the one mask token of each text (the model's, e.g. [MASK]), best first."""
        return self._run(plans.fill_mask(texts, model, top_k, truncate), timeout)

    @overload
    def summarize(
        self,
        text: str,
        *,
        model: str | None = None,
        stream: Literal[False] = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str: ...
    @overload
    def summarize(
        self,
        text: str,
        *,
        model: str | None = None,
        stream: Literal[True],
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> TextStream: ...

    def summarize(
        self,
        text: str,
        *,
        model: str | None = None,
        stream: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str | TextStream:
        """A summary of ``text`` from a text2text model (T5, BART; its ``prefix`` parameter is applied)."""
        inputs = generation.generation_inputs(plans.check_prompt(text), False, sampling)
        return self._generation(inputs, model, stream, timeout, idle_timeout, ("text2text-generation",))

    @overload
    def translate(
        self,
        text: str,
        *,
        model: str | None = None,
        stream: Literal[False] = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str: ...
    @overload
    def translate(
        self,
        text: str,
        *,
        model: str | None = None,
        stream: Literal[True],
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> TextStream: ...

    def translate(
        self,
        text: str,
        *,
        model: str | None = None,
        stream: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str | TextStream:
        """``text`` translated by a text2text model (Marian, T5 with a ``prefix`` parameter)."""
        inputs = generation.generation_inputs(plans.check_prompt(text), False, sampling)
        return self._generation(inputs, model, stream, timeout, idle_timeout, ("text2text-generation",))

    def embeddings(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        normalize: bool | None = None,
        truncate: bool = True,
        prompt_name: str | None = None,
        timeout: float | None = None,
    ) -> Embeddings:
        """Like ``embed``, with how many tokens each text took and which were cut (OpenAI-style usage)."""
        return self._run(plans.embeddings(texts, model, normalize, truncate, prompt_name), timeout)

    def embed_tokens(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        truncate: bool = True,
        prompt_name: str | None = None,
        timeout: float | None = None,
    ) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
        """Every token's vector, one (tokens, dim) array per text, not pooled nor normalised (TEI's /embed_all);
        ``prompt_name``: the tokens of the text with that prompt of the model's before it."""
        return self._run(plans.embed_tokens(texts, model, truncate, prompt_name), timeout)

    def infer(self, model: str, /, *, timeout: float | None = None, **inputs: Any) -> dict[str, np.ndarray[Any, Any]]:
        """Run any model: inputs by name as Python values or arrays; outputs as arrays (BYTES -> str)."""
        return self._run(plans.infer(model, inputs), timeout)

    # ---------------------------------------------------------------- generation

    @overload
    def generate(
        self,
        prompt: str,
        *,
        model: str | None = None,
        stream: Literal[False] = False,
        response_format: generation.ResponseFormat | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str: ...
    @overload
    def generate(
        self,
        prompt: str,
        *,
        model: str | None = None,
        stream: Literal[True],
        response_format: generation.ResponseFormat | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> TextStream: ...

    def generate(
        self,
        prompt: str,
        *,
        model: str | None = None,
        stream: bool = False,
        response_format: generation.ResponseFormat | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str | TextStream:
        """Generated text for ``prompt``; with ``stream=True`` a ``TextStream`` of the chunks. With
        ``response_format`` (a pydantic model class or a JSON Schema dict) the text is held to that schema."""
        wanted = generation.constraint(response_format)
        inputs = generation.generation_inputs(plans.check_prompt(prompt), False, sampling, wanted)
        return self._generation(inputs, model, stream, timeout, idle_timeout)

    @overload
    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        stream: Literal[False] = False,
        response_format: None = None,
        tools: None = None,
        tool_choice: None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str: ...
    @overload
    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        stream: Literal[True],
        response_format: generation.ResponseFormat | None = None,
        tools: generation.ToolSpecs | None = None,
        tool_choice: str | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> TextStream: ...
    @overload
    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        stream: Literal[False] = False,
        response_format: type[M],
        tools: None = None,
        tool_choice: None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> ChatResult[M]: ...
    @overload
    def chat(  # all three None: the first overload's str
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        stream: Literal[False] = False,
        response_format: Mapping[str, Any] | None = None,
        tools: generation.ToolSpecs | None = None,
        tool_choice: str | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> ChatResult[Any]: ...

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        stream: bool = False,
        response_format: generation.ResponseFormat | None = None,
        tools: generation.ToolSpecs | None = None,
        tool_choice: str | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        **sampling: Unpack[Sampling],
    ) -> str | TextStream | ChatResult[Any]:
        """The assistant's answer to chat ``messages`` ({"role", "content"} dicts) of an instruct model. A content may
        be a list of parts, ``{"type": "text", "text": ...}`` and, for an image-text-to-text model, ``{"type":
        "image", "image": ...}`` (bytes of a file, a path, a PIL image or a uint8 array).

        With ``response_format`` (a pydantic model class or a JSON Schema dict) the answer is held to that schema by
        the model's grammar, and a ``ChatResult`` carries it parsed. With ``tools`` (OpenAI's function tools) and
        ``tool_choice`` ("auto", "none", "required" or a tool's name) the ``ChatResult`` carries the calls made; a
        required call is held to the tools' schemas. With ``stream=True`` a ``TextStream`` (its ``tool_calls``
        after the last chunk)."""
        wanted = generation.constraint(response_format, tools, tool_choice)
        text, images = generation.chat_text(messages)
        inputs = generation.generation_inputs(text, True, sampling, wanted)
        tasks = generation.CHAT_TASKS
        if images:  # an image chat: a model of image-text-to-text
            inputs["images"], tasks = generation.image_column(images), (generation.IMAGE_CHAT,)
        if wanted is None or stream:
            return self._generation(inputs, model, stream, timeout, idle_timeout, tasks)
        chunks = self._generation(inputs, model, True, timeout, idle_timeout, tasks)
        assert isinstance(chunks, TextStream)
        with chunks:
            text = "".join([chunk for chunk in chunks])
        return chunks._text.result(text, wanted)

    def _generation(
        self,
        inputs: policy.Tensors,
        model: str | None,
        stream: bool,
        timeout: float | None,
        idle: float | None,
        tasks: Sequence[str] = ("text-generation", "text2text-generation"),
    ) -> str | TextStream:
        deadline = self._deadline(timeout)
        name = self._resolve(tasks, plans._check_model(model), deadline)
        chunks = TextStream(self, name, inputs, deadline, idle)
        chunks._open()
        if stream:
            return chunks
        with chunks:
            return "".join([chunk for chunk in chunks])

    # ---------------------------------------------------------------- lifetime

    def close(self) -> None:
        self._fan.close()
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
