"""The gateway's admission limits, named as TEI's router names them, and their command-line form.

A plain dataclass with no web imports: ``tritonhf up`` records the limits (as arguments) in the
state file so that the supervisor restarts the gateway with the same ones.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Limits:
    """What one request may carry and how many may be in flight; beyond them the answer comes at once."""

    payload_limit: int = 2_000_000  # bytes of one request body (TEI's default): 413 beyond
    max_client_batch_size: int = 2048  # inputs (texts, documents, prompts) per request: OpenAI's embeddings limit
    max_concurrent_requests: int = 512  # requests in flight (TEI's default): 429 with Retry-After beyond
    max_batch_tokens: int = 16384  # tokens of all inputs of one encoder request (TEI's default): 413 beyond
    max_audio_bytes: int = 25_000_000  # the body of one /v1/audio request (OpenAI's file limit): 413 beyond
    stored_responses: int = 1000  # responses of /v1/responses kept for previous_response_id (the oldest go first)
    stored_response_seconds: int = 3600  # and for this long each
    # Fetch images named by http(s) URL (public addresses only, --payload-limit bytes, 10 s; serve/fetch.py).
    allow_image_urls: bool = False

    def body_limit(self, path: str) -> tuple[int, str]:
        """The largest body a route takes, and the option that sets it."""
        if path.startswith("/v1/audio/"):
            return self.max_audio_bytes, "--max-audio-bytes"
        return self.payload_limit, "--payload-limit"

    def __post_init__(self) -> None:
        for item in fields(self):
            if not isinstance(getattr(self, item.name), bool) and getattr(self, item.name) < 1:
                raise ValueError(f"--{item.name.replace('_', '-')} must be at least 1, not {getattr(self, item.name)}.")

    def argv(self) -> list[str]:
        """The gateway process's arguments for these limits."""
        found: list[str] = []
        for item in fields(self):
            value, flag = getattr(self, item.name), f"--{item.name.replace('_', '-')}"
            found += ([flag] if value else []) if isinstance(value, bool) else [flag, str(value)]
        return found

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        for item in fields(Limits):
            flag = f"--{item.name.replace('_', '-')}"
            if isinstance(item.default, bool):
                parser.add_argument(flag, action="store_true")
            else:
                parser.add_argument(flag, type=int, default=item.default)

    @classmethod
    def from_arguments(cls, namespace: argparse.Namespace) -> Limits:
        return cls(**{item.name: getattr(namespace, item.name) for item in fields(cls)})
