"""Requests to the text-generation template and the checks on its streams (shared by both engines' tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fake_pb_utils as pb
import numpy as np
from transformers import AutoModelForCausalLM, AutoTokenizer


def reference(folder: Path, prompt: str, max_tokens: int) -> str:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def request(prompt: str, **options: Any) -> pb.InferenceRequest:
    dtypes = {"max_tokens": np.int32, "temperature": np.float32, "top_p": np.float32, "seed": np.int64,
              "logprobs": np.int32}  # fmt: skip
    inputs: dict[str, Any] = {"text_input": pb.texts(prompt)}
    for key, value in options.items():
        if key == "stop":
            inputs[key] = np.array([[v.encode() for v in value]], dtype=object)
        elif key in ("json_schema", "tools", "tool_choice"):
            inputs[key] = pb.texts(value if isinstance(value, str) else json.dumps(value))
        elif key in ("chat", "truncate"):
            inputs[key] = np.array([[value]])
        else:
            inputs[key] = np.array([[value]], dtype=dtypes[key])
    return pb.InferenceRequest(**inputs)


def run(model: Any, steps: int = 10_000) -> int:
    """Step until nothing runs or waits; returns the steps taken."""
    taken = 0
    while (model.running or model.waiting) and taken < steps:
        model.step()
        taken += 1
    return taken


def text_of(req: pb.InferenceRequest) -> str:
    assert req.sender.closed, "every stream ends with the final flag"
    return "".join(r.output("text_output")[0, 0].decode() for r in req.sender.responses if not r.has_error())


def last(req: pb.InferenceRequest, name: str) -> Any:
    return req.sender.responses[-1].output(name)[0, 0]
