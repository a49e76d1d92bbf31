"""An OpenAI- and TEI-compatible HTTP gateway in front of Triton (FastAPI + uvicorn, on the async SDK).

The web parts (``tritonhf.serve.app``) need the ``serve`` extra; importing this package does not, so
the CLI can read the gateway's limits (``tritonhf.serve.limits``) in an environment without FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonhf.serve.app import create_app, run

__all__ = ["create_app", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tritonhf.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'tritonhf.serve' has no attribute {name!r}")
