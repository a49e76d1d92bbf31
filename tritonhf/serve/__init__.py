"""An OpenAI- and TEI-compatible HTTP gateway in front of Triton (FastAPI + uvicorn, on the async SDK)."""

from tritonhf.serve.app import create_app, run

__all__ = ["create_app", "run"]
