"""What the tests that drive the gateway with the openai package share: a client of a stack's gateway, and the
answer schema they hold replies to."""

from __future__ import annotations

from typing import Literal

import openai
from pydantic import BaseModel, Field

from tritonhf.bootstrap import Stack


class Weather(BaseModel):
    city: str = Field(max_length=20)
    sunny: bool
    feeling: Literal["warm", "cold", "mild"]


def openai_client(stack: Stack) -> openai.OpenAI:
    """The openai package's client of ``stack``'s gateway (no key on loopback; no retries: a failure shows)."""
    assert stack.state is not None
    return openai.OpenAI(base_url=stack.state.gateway_url, api_key="unused-on-loopback", max_retries=0)
