"""``Client``: one method per gallery task over HTTP or gRPC.

Each task method turns Python values into the task's tensors (names and types from
``tritonhf.tasks``), splits inputs larger than the model's ``max_batch_size`` into
chunks sent concurrently, reassembles the answers in input order, and returns the
task's result type. Every failure is raised as a ``tritonhf.errors`` type.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, overload

import numpy as np

from tritonhf.errors import (
    AmbiguousModelError,
    ClientError,
    InvalidInputError,
    ModelNotReadyError,
    RequestTimeoutError,
    ServerUnavailableError,
)
from tritonhf.sdk import codecs
from tritonhf.sdk._transport import Transport, connect, translate_error
from tritonhf.sdk.results import Classification, Entity, ModelInfo, ZeroShotClassification
from tritonhf.tasks import PARAM_TASK, wire_datatype

# Worth retrying within a call's timeout: the server restarting, a model being repaired.
TRANSIENT = (ServerUnavailableError, ModelNotReadyError)
URL_ENV = "TRITONHF_URL"
API_KEY_ENV = "TRITONHF_API_KEY"
API_KEY_HEADER = "tritonhf-key"  # the header the server's restricted model-repository API checks
DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 60.0
T = TypeVar("T")


def default_url() -> str:
    """``$TRITONHF_URL``, else the server `tritonhf up` started in the default workspace, else :8000."""
    if os.environ.get(URL_ENV):
        return os.environ[URL_ENV]
    try:
        state = json.loads((_default_workspace() / "run" / "server.json").read_text())
        host = "127.0.0.1" if state["host"] in ("0.0.0.0", "::") else state["host"]
        return f"http://{host}:{state['http_port']}"
    except (OSError, ValueError, KeyError):
        return DEFAULT_URL


def default_api_key() -> str | None:
    """``$TRITONHF_API_KEY``, else the key a server bound beyond loopback wrote into the workspace."""
    if os.environ.get(API_KEY_ENV):
        return os.environ[API_KEY_ENV]
    try:
        return (_default_workspace() / "run" / "api-key").read_text().strip() or None
    except OSError:
        return None


def _default_workspace() -> Path:
    return Path(os.environ.get("TRITONHF_WORKSPACE", "triton_workspace"))


class Client:
    """A typed client for models served by tritonhf (or any Triton model, with ``infer``).

    ``url`` says the protocol: ``http://127.0.0.1:8000`` or ``grpc://127.0.0.1:8001``.
    ``timeout`` (seconds) bounds every call unless the call gives its own.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        concurrency: int = 8,
        api_key: str | None = None,
    ) -> None:
        self.url = url or default_url()
        self.timeout = timeout
        self._concurrency = concurrency
        key = api_key or default_api_key()
        headers = {API_KEY_HEADER: key} if key else {}
        self._transport: Transport = connect(self.url, concurrency=concurrency, timeout=timeout, headers=headers)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tritonhf")
        self._configs: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- plumbing

    def _call(self, model: str | None, action: Callable[[], T], deadline: float | None = None) -> T:
        """Run ``action``, translating errors. With a ``deadline`` (monotonic seconds), transient
        failures (server unreachable or restarting, model being repaired) are retried with
        backoff until the deadline, then raised."""
        delay = 0.1
        while True:
            try:
                try:
                    return action()
                except ClientError:
                    raise
                except Exception as exc:
                    raise translate_error(exc, model, self.url) from exc
            except TRANSIENT:
                if deadline is None or time.monotonic() + delay >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _config(self, model: str) -> dict[str, Any]:
        if model not in self._configs:
            deadline = time.monotonic() + self.timeout
            self._configs[model] = self._call(model, lambda: self._transport.model_config(model), deadline)
        return self._configs[model]

    def _max_batch(self, model: str) -> int:
        return int(self._config(model).get("max_batch_size", 0))

    def models(self) -> list[ModelInfo]:
        """Every model in the server's repository, with its state and (gallery) task."""
        index = self._call(None, self._transport.repository_index, time.monotonic() + self.timeout)
        found = []
        for entry in index:
            name, state = str(entry.get("name", "")), str(entry.get("state", "UNKNOWN"))
            task, batch = None, 0
            if state == "READY":
                config = self._config(name)
                task = config.get("parameters", {}).get(PARAM_TASK, {}).get("string_value")
                batch = int(config.get("max_batch_size", 0))
            found.append(
                ModelInfo(name, str(entry.get("version", "")), state, task, batch, str(entry.get("reason", "")))
            )
        return found

    def resolve_model(self, tasks: Sequence[str], model: str | None) -> str:
        """``model`` itself, or the single ready model of the first task that has any."""
        if model is not None:
            if not isinstance(model, str) or not model:
                raise InvalidInputError(f"model must be a model name (str), not {model!r}.")
            return model
        ready = [info for info in self.models() if info.ready]
        for task in tasks:
            candidates = [info.name for info in ready if info.task == task]
            if len(candidates) == 1:
                return candidates[0]
            if len(candidates) > 1:
                raise AmbiguousModelError(
                    f"Several ready {task} models: {', '.join(candidates)}. Pass model=NAME to choose one."
                )
        others = ", ".join(f"{i.name} ({i.task or 'no task'})" for i in ready) or "none"
        raise AmbiguousModelError(
            f"No ready {' or '.join(tasks)} model on {self.url}. Ready models: {others}. Add one with "
            f"`tritonhf gallery add {tasks[0]} --model ...`, or pass model=NAME."
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server reports ready; ``ServerUnavailableError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self._transport.is_ready():
                    return
            except Exception:  # not up yet: connection refused and friends
                pass
            time.sleep(0.2)
        raise ServerUnavailableError(f"The server at {self.url} was not ready within {timeout:.0f} s.")

    def _run_batched(
        self,
        model: str,
        rows: int,
        build: Callable[[slice], dict[str, np.ndarray[Any, Any]]],
        outputs: list[str],
        timeout: float | None,
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Send rows in chunks of at most max_batch_size, concurrently; concatenate in order."""
        limit = timeout if timeout is not None else self.timeout
        size = self._max_batch(model) or rows
        chunks = [slice(start, min(start + size, rows)) for start in range(0, rows, size)]

        def send(chunk: slice) -> dict[str, np.ndarray[Any, Any]]:
            return self._transport.infer(model, build(chunk), outputs, limit)

        deadline = time.monotonic() + limit
        if len(chunks) == 1 and (self._transport.protocol == "grpc" or limit >= self.timeout):
            # One chunk: send it from this thread (no hand-over to the pool); the transport itself
            # bounds the call (gRPC deadline, or the HTTP client's network timeout = this timeout).
            return self._call(model, lambda: send(chunks[0]), deadline)
        futures = [self._pool.submit(self._call, model, lambda c=chunk: send(c), deadline) for chunk in chunks]
        try:
            parts = [future.result(timeout=max(deadline - time.monotonic(), 0.001)) for future in futures]
        except FutureTimeout:
            for future in futures:
                future.cancel()
            raise RequestTimeoutError(
                f"Model '{model}' did not answer {rows} inputs within {limit:.0f} s. Raise timeout= or send fewer.",
                model,
            ) from None
        return {name: _concat([part[name] for part in parts]) for name in outputs}

    # ---------------------------------------------------------------- tasks

    @overload
    def classify(  # type: ignore[overload-overlap]  # str is also a Sequence[str]
        self, texts: str, model: str | None = None, top_k: None = None, timeout: float | None = None
    ) -> Classification: ...
    @overload
    def classify(
        self, texts: Sequence[str], model: str | None = None, top_k: None = None, timeout: float | None = None
    ) -> list[Classification]: ...
    @overload
    def classify(  # type: ignore[overload-overlap]  # str is also a Sequence[str]
        self, texts: str, model: str | None = None, *, top_k: int, timeout: float | None = None
    ) -> list[Classification]: ...
    @overload
    def classify(
        self, texts: Sequence[str], model: str | None = None, *, top_k: int, timeout: float | None = None
    ) -> list[list[Classification]]: ...

    def classify(
        self,
        texts: str | Sequence[str],
        model: str | None = None,
        top_k: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """The best label per text, or with ``top_k`` the k best labels per text."""
        items, single = codecs.text_list(texts)
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
            raise InvalidInputError(f"top_k must be a positive int, not {top_k!r}.")
        if not items:
            return []
        name = self.resolve_model(("text-classification", "zero-shot-classification"), model)
        takes_top_k = any(i.get("name") == "TOP_K" for i in self._config(name).get("input", []))

        def build(rows: slice) -> dict[str, np.ndarray[Any, Any]]:
            inputs = {"TEXT": codecs.bytes_column(items[rows])}
            if top_k is not None and takes_top_k:
                inputs["TOP_K"] = codecs.column(top_k, "INT32", rows.stop - rows.start)
            return inputs

        outputs = ["LABEL", "SCORE"] if top_k is None else ["LABELS", "SCORES"]
        result = self._run_batched(name, len(items), build, outputs, timeout)
        if top_k is None:
            found: list[Any] = [
                Classification(str(label), float(score))
                for label, score in zip(codecs.decode(result["LABEL"])[:, 0], result["SCORE"][:, 0])
            ]
        else:
            found = [
                [Classification(str(label), float(score)) for label, score in zip(labels[:top_k], scores[:top_k])]
                for labels, scores in zip(codecs.decode(result["LABELS"]), result["SCORES"])
            ]
        return found[0] if single else found

    @overload
    def zero_shot(  # type: ignore[overload-overlap]  # str is also a Sequence[str]
        self, texts: str, labels: Sequence[str] | None = None, model: str | None = None, timeout: float | None = None
    ) -> ZeroShotClassification: ...
    @overload
    def zero_shot(
        self,
        texts: Sequence[str],
        labels: Sequence[str] | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> list[ZeroShotClassification]: ...

    def zero_shot(
        self,
        texts: str | Sequence[str],
        labels: Sequence[str] | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Candidate labels ranked per text; ``labels`` overrides the model's default labels."""
        items, single = codecs.text_list(texts)
        candidates = None
        if labels is not None:
            candidates, _ = codecs.text_list(labels, "labels")
            if not candidates or not all(label.strip() for label in candidates):
                raise InvalidInputError("labels must be a non-empty list of non-empty strings.")
        if not items:
            return []
        name = self.resolve_model(("zero-shot-classification",), model)

        def build(rows: slice) -> dict[str, np.ndarray[Any, Any]]:
            inputs = {"TEXT": codecs.bytes_column(items[rows])}
            if candidates is not None:
                inputs["CANDIDATE_LABELS"] = codecs.bytes_matrix([candidates] * (rows.stop - rows.start))
            return inputs

        result = self._run_batched(name, len(items), build, ["LABELS", "SCORES"], timeout)
        found = [
            ZeroShotClassification(tuple(str(x) for x in ranked), tuple(float(s) for s in scores))
            for ranked, scores in zip(codecs.decode(result["LABELS"]), result["SCORES"])
        ]
        return found[0] if single else found

    @overload
    def ner(self, texts: str, model: str | None = None, timeout: float | None = None) -> list[Entity]: ...  # type: ignore[overload-overlap]
    @overload
    def ner(
        self, texts: Sequence[str], model: str | None = None, timeout: float | None = None
    ) -> list[list[Entity]]: ...

    def ner(self, texts: str | Sequence[str], model: str | None = None, timeout: float | None = None) -> Any:
        """Named entities per text, with character offsets into that text."""
        items, single = codecs.text_list(texts)
        if not items:
            return []
        name = self.resolve_model(("token-classification",), model)
        result = self._run_batched(
            name, len(items), lambda rows: {"TEXT": codecs.bytes_column(items[rows])}, ["ENTITIES"], timeout
        )
        found = [[Entity(**entity) for entity in json.loads(text)] for text in codecs.decode(result["ENTITIES"])[:, 0]]
        return found[0] if single else found

    def embed(
        self,
        texts: str | Sequence[str],
        model: str | None = None,
        normalize: bool | None = None,
        timeout: float | None = None,
    ) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One float32 vector per text: an array of shape (n, dim) (n = 1 for a single str)."""
        items, _ = codecs.text_list(texts)
        if normalize is not None and not isinstance(normalize, bool):
            raise InvalidInputError(f"normalize must be True, False or None, not {normalize!r}.")
        name = self.resolve_model(("feature-extraction",), model) if items or model else ""
        if not items:
            dims = self._config(name).get("output", [{}])[0].get("dims", [0]) if name else [0]
            return np.zeros((0, int(dims[-1]) if dims else 0), dtype=np.float32)

        def build(rows: slice) -> dict[str, np.ndarray[Any, Any]]:
            inputs = {"TEXT": codecs.bytes_column(items[rows])}
            if normalize is not None:
                inputs["NORMALIZE"] = codecs.column(normalize, "BOOL", rows.stop - rows.start)
            return inputs

        return self._run_batched(name, len(items), build, ["EMBEDDING"], timeout)["EMBEDDING"].astype(np.float32)

    # ---------------------------------------------------------------- generation

    def _generation_inputs(
        self,
        text: str,
        chat: bool,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        seed: int | None,
        stop: Sequence[str] | None,
    ) -> dict[str, np.ndarray[Any, Any]]:
        inputs = {"text_input": codecs.bytes_column([text])}
        for key, value, datatype in (
            ("max_tokens", max_tokens, "INT32"),
            ("temperature", temperature, "FP32"),
            ("top_p", top_p, "FP32"),
            ("seed", seed, "INT64"),
        ):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise InvalidInputError(f"{key} must be a number, not {value!r}.")
                inputs[key] = codecs.column(value, datatype, 1)
        if stop:
            stops, _ = codecs.text_list(stop, "stop")
            inputs["stop"] = codecs.bytes_matrix([stops])
        if chat:
            inputs["chat"] = codecs.column(True, "BOOL", 1)
        return inputs

    def _stream(self, model: str, inputs: dict[str, np.ndarray[Any, Any]], timeout: float | None) -> Iterator[str]:
        """Chunks as they arrive. A transient failure before the first chunk reopens the stream
        (within the timeout); after it, a failure raises: a stream never ends silently as if complete."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)

        def open_stream() -> tuple[Iterator[str], str | None]:
            chunks = self._transport.stream(model, inputs, max(deadline - time.monotonic(), 0.001))
            return chunks, next(chunks, None)

        chunks, first = self._call(model, open_stream, deadline)
        if first is None:
            return
        yield first
        while (chunk := self._call(model, lambda: next(chunks, None))) is not None:
            yield chunk

    def generate(
        self,
        prompt: str,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        stream: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Generated text for ``prompt``; with ``stream=True`` an iterator of chunks as they arrive."""
        if not isinstance(prompt, str):
            raise InvalidInputError(f"prompt must be a str, not {type(prompt).__name__}.")
        return self._generation(prompt, False, model, max_tokens, temperature, top_p, seed, stop, stream, timeout)

    def chat(
        self,
        messages: Sequence[dict[str, str]],
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        stream: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """The assistant's answer to chat ``messages`` ({"role", "content"} dicts) of an instruct model."""
        if not isinstance(messages, Sequence) or not all(isinstance(m, dict) and "content" in m for m in messages):
            raise InvalidInputError('messages must be a list of {"role": ..., "content": ...} dicts.')
        text = json.dumps(list(messages))
        return self._generation(text, True, model, max_tokens, temperature, top_p, seed, stop, stream, timeout)

    def _generation(
        self,
        text: str,
        chat: bool,
        model: str | None,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        seed: int | None,
        stop: Sequence[str] | None,
        stream: bool,
        timeout: float | None,
    ) -> Any:
        inputs = self._generation_inputs(text, chat, max_tokens, temperature, top_p, seed, stop)
        chunks = self._stream(self.resolve_model(("text-generation",), model), inputs, timeout)
        return chunks if stream else "".join(chunks)

    # ---------------------------------------------------------------- any model

    def infer(self, model: str, timeout: float | None = None, **inputs: Any) -> dict[str, np.ndarray[Any, Any]]:
        """Run any model: inputs by name as Python values or arrays; outputs as arrays (BYTES -> str)."""
        config = self._config(model)
        batched = int(config.get("max_batch_size", 0)) > 0
        specs = {spec["name"]: spec for spec in config.get("input", [])}
        unknown = sorted(set(inputs) - set(specs))
        if unknown:
            raise InvalidInputError(
                f"Model '{model}' has no input(s) {', '.join(unknown)}; it takes {', '.join(specs) or 'none'}.", model
            )
        arrays = {
            name: codecs.to_tensor(value, wire_datatype(specs[name]["data_type"]), specs[name].get("dims", []), batched)
            for name, value in inputs.items()
        }
        outputs = [spec["name"] for spec in config.get("output", [])]
        limit = timeout if timeout is not None else self.timeout
        deadline = time.monotonic() + limit
        result = self._call(model, lambda: self._transport.infer(model, arrays, outputs, limit), deadline)
        return {name: codecs.decode(array) for name, array in result.items()}

    def statistics(self, model: str = "") -> dict[str, Any]:
        """Triton's inference statistics (counts, queue and compute time, batch sizes)."""
        return self._call(model or None, lambda: self._transport.statistics(model))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _concat(parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
