"""The gateway's limit options, declared once for `tritonhf openai` and `tritonhf up --openai-port`."""

from __future__ import annotations

from typing import Annotated

import typer

from tritonhf.serve.limits import Limits

_DEFAULTS = Limits()

PayloadLimit = Annotated[
    int, typer.Option(help="Gateway: largest request body in bytes (413 beyond).", rich_help_panel="Gateway limits")
]
MaxClientBatchSize = Annotated[
    int,
    typer.Option(help="Gateway: inputs per request (texts, documents, prompts; 413 beyond).",
                 rich_help_panel="Gateway limits"),
]  # fmt: skip
MaxConcurrentRequests = Annotated[
    int,
    typer.Option(help="Gateway: requests in flight; beyond them 429 with Retry-After, nothing queued.",
                 rich_help_panel="Gateway limits"),
]  # fmt: skip
MaxBatchTokens = Annotated[
    int,
    typer.Option(help="Gateway: tokens of all inputs of one embed/classify/rerank request (413 beyond); counted "
                 "with the model's tokenizer from the repository.", rich_help_panel="Gateway limits"),
]  # fmt: skip
MaxAudioBytes = Annotated[
    int,
    typer.Option(help="Gateway: largest body of a /v1/audio request in bytes (413 beyond; OpenAI's 25 MB).",
                 rich_help_panel="Gateway limits"),
]  # fmt: skip
AllowImageUrls = Annotated[
    bool,
    typer.Option("--allow-image-urls",
                 help="Gateway: fetch images named by http(s) URL in /v1/embeddings (public addresses only, "
                 "--payload-limit bytes, 10 s, no redirects); refused (400) without it.",
                 rich_help_panel="Gateway limits"),
]  # fmt: skip
StoredResponses = Annotated[
    int,
    typer.Option(help="Gateway: responses of /v1/responses kept in memory for GET and previous_response_id (the "
                 "oldest go first).", rich_help_panel="Gateway limits"),
]  # fmt: skip
StoredResponseSeconds = Annotated[
    int,
    typer.Option(help="Gateway: how long a stored response is kept (a 404 naming it after).",
                 rich_help_panel="Gateway limits"),
]  # fmt: skip
DEFAULT_STORED_RESPONSES = _DEFAULTS.stored_responses
DEFAULT_STORED_RESPONSE_SECONDS = _DEFAULTS.stored_response_seconds
DEFAULT_PAYLOAD_LIMIT = _DEFAULTS.payload_limit
DEFAULT_MAX_AUDIO_BYTES = _DEFAULTS.max_audio_bytes
DEFAULT_MAX_CLIENT_BATCH_SIZE = _DEFAULTS.max_client_batch_size
DEFAULT_MAX_CONCURRENT_REQUESTS = _DEFAULTS.max_concurrent_requests
DEFAULT_MAX_BATCH_TOKENS = _DEFAULTS.max_batch_tokens
