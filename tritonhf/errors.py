"""Every error tritonhf raises on purpose, in one tree.

    TritonHFError
    ├── BootstrapError            installing or laying out the server failed
    ├── StubEnvironmentError      the Python environment the stub would use is unfit (numpy 2 ...)
    ├── ServerError               the server process
    │   ├── ServerStartError      it exited or a model failed while starting (carries diagnoses)
    │   ├── ServerNotRunningError
    │   ├── ServerAlreadyRunningError
    │   └── PortInUseError
    ├── GalleryError              building or checking a model repository
    │   ├── UnknownTaskError
    │   ├── InvalidNameError
    │   ├── ModelExistsError
    │   └── ModelSourceError      weights could not be found, fetched or converted
    ├── DeployError               leaving one machine: manifests, images
    │   └── StorageError          object storage: bad URL, missing bucket, credentials, unreachable
    └── ClientError               talking to a running server (the sdk)
        ├── ServerUnavailableError
        │   └── ServerBusyError   the model's queue is full (Triton's max_queue_size): retried, then raised
        ├── ModelNotFoundError
        ├── ModelNotReadyError
        ├── AmbiguousModelError   model=None matched zero or several models
        ├── InvalidInputError     refused by the sdk (wrong Python type) or the server (shape ...)
        │   ├── ContextLengthError  a text longer than the model takes, and truncate was not asked for
        │   └── InputTooLargeError  an image or audio over the model's limit, refused from its header
        ├── InferenceError        model.py raised while running the request
        ├── PermissionDeniedError the API is restricted and the key is missing or wrong
        ├── WrongProtocolError    the URL's port speaks the other protocol (an HTTP URL at the gRPC port)
        ├── RequestCancelledError the request was cancelled (by the caller, or the server stopping)
        └── RequestTimeoutError   also a builtin TimeoutError

Every message names the thing it is about (a model, an input, a path) and says what to do.
"""

from __future__ import annotations


class TritonHFError(Exception):
    """Base of every error raised by tritonhf."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class BootstrapError(TritonHFError):
    """The server could not be obtained, extracted or laid out."""


class StubEnvironmentError(TritonHFError):
    """The Python environment the backend stub would run in cannot serve models."""


class ServerError(TritonHFError):
    """Something about the tritonserver process."""


class ServerStartError(ServerError):
    """The server exited, or a model failed to load, while starting."""

    def __init__(self, message: str, diagnoses: list[str] | None = None, log_path: str = "") -> None:
        super().__init__(message)
        self.diagnoses = diagnoses or []
        self.log_path = log_path


class ServerNotRunningError(ServerError):
    """No server of this workspace is running."""


class ServerAlreadyRunningError(ServerError):
    """A server of this workspace is already running."""


class PortInUseError(ServerError):
    """A port the server should listen on is taken."""

    def __init__(self, message: str, port: int) -> None:
        super().__init__(message)
        self.port = port


class GalleryError(TritonHFError):
    """Building, changing or checking a model repository failed."""


class UnknownTaskError(GalleryError):
    """The task name is not one of the gallery's."""


class InvalidNameError(GalleryError):
    """A model name or parameter that would flow into generated files is unsafe."""


class ModelExistsError(GalleryError):
    """A model of that name is already in the repository."""


class ModelSourceError(GalleryError):
    """Weights could not be found, fetched or converted."""


class DeployError(TritonHFError):
    """Writing what a cluster needs (manifests, image files) failed or was asked for wrongly."""


class StorageError(DeployError):
    """An object-storage repository (S3) could not be reached, read or written; says why."""


class ClientError(TritonHFError):
    """A request to a running server failed."""

    def __init__(self, message: str, model: str | None = None) -> None:
        super().__init__(message)
        self.model = model


class ServerUnavailableError(ClientError):
    """Nothing answers at the URL, or the connection broke."""


class ServerBusyError(ServerUnavailableError):
    """The model refused the request because its queue is full (overload). The SDK retries it after a
    short wait within the call's deadline; the gateway answers 429 with Retry-After."""


class ModelNotFoundError(ClientError):
    """The server does not know the model."""


class ModelNotReadyError(ClientError):
    """The model exists but is not loaded, or its stub is not healthy."""


class AmbiguousModelError(ClientError):
    """model=None and the server holds zero or several models of the task."""


class InvalidInputError(ClientError, ValueError):
    """The input was refused, by the sdk (a wrong Python type) or the server (datatype, shape, size)."""


class ContextLengthError(InvalidInputError):
    """A text (or a prompt with its ``max_tokens``) is longer than the model's context, and the request
    did not ask to truncate: nothing is cut silently. OpenAI's code for it is ``context_length_exceeded``."""


class InputTooLargeError(InvalidInputError):
    """An image with more pixels, or an audio file longer, than the model's limit (``max_image_pixels``,
    ``max_audio_seconds``): refused from the file's header, before it was decoded. The gateway answers 413."""


class InferenceError(ClientError):
    """The model raised while running the request."""


class PermissionDeniedError(ClientError):
    """The server restricts the API (bound beyond loopback) and the key is missing or wrong."""


class WrongProtocolError(ClientError):
    """The URL's port answered in another protocol: an HTTP URL at Triton's gRPC port (HTTP/2). Not retried."""


class RequestTimeoutError(ClientError, TimeoutError):
    """The request did not finish within its timeout."""


class RequestCancelledError(ClientError):
    """The request was cancelled before it finished (by the caller, or by the server stopping)."""
