"""The one client tritonhf uses to manage a server it started.

It talks to the server's loopback admin endpoint (the protocol tritonhf keeps on loopback,
unrestricted) through the SDK's own transport (tritonclient), so there is one wire client in
the project, not two; loopback connections never go through a proxy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonhf._wire.codecs import DATATYPES
from tritonhf._wire.config import ModelConfig
from tritonhf._wire.transport import Endpoint, Transport, connect

_PROBE_ROWS = 1


@dataclass(frozen=True)
class ModelStatus:
    """One model as the server's repository index reports it."""

    name: str
    version: str
    state: str
    reason: str = ""


class Admin:
    """Health, model list, configs, load/unload and statistics of one server, each call bounded."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._transport: Transport = connect(Endpoint.parse(url))

    def ready(self) -> bool:
        """Does the server answer ready? False (never an error) while it does not."""
        try:
            return self._transport.is_ready(min(self.timeout, 2.0))
        except Exception:
            return False

    def models(self) -> list[ModelStatus]:
        """Every model of the repository and its state; empty when the server does not answer."""
        try:
            index = self._transport.repository_index(self.timeout)
        except Exception:
            return []
        return [
            ModelStatus(
                str(entry.get("name", "")),
                str(entry.get("version", "")),
                str(entry.get("state", "UNKNOWN")),
                str(entry.get("reason", "")),
            )
            for entry in index
        ]

    def raw_config(self, name: str) -> Mapping[str, Any]:
        """The model's config JSON (empty when the server does not answer)."""
        try:
            raw = self._transport.model_config(name, self.timeout)
        except Exception:
            return {}
        return dict(raw.get("config", raw))

    def metadata(self) -> Mapping[str, Any]:
        try:
            return self._transport.server_metadata(self.timeout)
        except Exception:
            return {}

    def load(self, name: str) -> bool:
        """Load (or reload from the repository) ``name``; True once it is ready."""
        try:
            self._transport.load_model(name, self.timeout)
            return self._transport.is_model_ready(name, self.timeout)
        except Exception:
            return False

    def unload(self, name: str) -> bool:
        try:
            self._transport.unload_model(name, self.timeout)
            return True
        except Exception:
            return False

    def reload(self, name: str, timeout: float = 120.0) -> bool:
        """Unload then load ``name`` (explicit model control); True once it is ready again."""
        with contextlib.suppress(Exception):
            self._transport.unload_model(name, timeout)
        try:
            self._transport.load_model(name, timeout)
            return self._transport.is_model_ready(name, self.timeout)
        except Exception:
            return False

    def probe(self, name: str) -> str | None:
        """One inference of zeros shaped by the model's config; None when it answers, else its error.

        How the supervisor checks a model that has no Python stub to count (a native backend's).
        """
        config = ModelConfig.parse(self.raw_config(name))
        inputs = {}
        for input_name, (datatype, dims) in config.inputs.items():
            shape = [_PROBE_ROWS] if config.max_batch_size else []
            shape += [1 if dim < 0 else dim for dim in dims]
            if datatype == "BYTES":
                inputs[input_name] = np.full(shape, b"x", dtype=np.object_)
            else:
                inputs[input_name] = np.zeros(shape, dtype=DATATYPES[datatype])
        try:
            self._transport.infer(name, inputs, list(config.outputs), self.timeout)
        except Exception as exc:
            return str(exc) or type(exc).__name__
        return None

    def statistics(self, name: str = "") -> Mapping[str, Any]:
        try:
            return self._transport.statistics(name, self.timeout)
        except Exception:
            return {}

    def close(self) -> None:
        self._transport.close()
