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
              "logprobs": np.int32, "top_k": np.int32, "min_p": np.float32, "presence_penalty": np.float32,
              "frequency_penalty": np.float32, "repetition_penalty": np.float32}  # fmt: skip
    inputs: dict[str, Any] = {"text_input": pb.texts(prompt)}
    for key, value in options.items():
        if key == "stop":
            inputs[key] = np.array([[v.encode() for v in value]], dtype=object)
        elif key in ("json_schema", "tools", "tool_choice", "logit_bias", "chat_template_kwargs"):
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


def text_of(req: pb.InferenceRequest, name: str = "text_output") -> str:
    """A stream's whole text (``reasoning_output``: its thinking), from the responses that carry it."""
    assert req.sender.closed, "every stream ends with the final flag"
    found = [r for r in req.sender.responses if not r.has_error() and any(t.name() == name for t in r.output_tensors)]
    return "".join(r.output(name)[0, 0].decode() for r in found)


def last(req: pb.InferenceRequest, name: str) -> Any:
    return req.sender.responses[-1].output(name)[0, 0]


def check_sampling_surface(model: Any) -> None:
    """The sampling fields a test can see the effect of, on either engine: top_k=1 is greedy whatever the
    temperature; a repetition or frequency penalty changes a greedy answer that repeats; the same seed with top_k
    and min_p gives the same text; an out-of-range value is the request's 400 naming the field."""

    def alone(prompt: str, **options: Any) -> str:
        req = request(prompt, **options)
        model.execute([req])
        run(model)
        return text_of(req)

    prompt = "the movie the movie the movie"  # a tiny random model repeats a token within 48 greedy ones
    greedy = alone(prompt, max_tokens=48)
    assert alone(prompt, max_tokens=48, temperature=1.0, top_k=1, seed=3) == greedy
    assert alone(prompt, max_tokens=48, repetition_penalty=1.8) != greedy
    assert alone(prompt, max_tokens=48, frequency_penalty=2.0, presence_penalty=1.0) != greedy
    seeded = {"max_tokens": 16, "temperature": 1.0, "top_k": 5, "min_p": 0.05, "seed": 11}
    assert alone(prompt, **seeded) == alone(prompt, **seeded)
    for field, value in (("top_k", -2), ("min_p", 1.5), ("presence_penalty", 2.5), ("repetition_penalty", 0.0)):
        bad = request(prompt, **{field: value})
        model.execute([bad])
        assert bad.sender.closed and field in bad.sender.responses[0].error().message()


def check_constraints_among_free(model: Any, prompts: list[str]) -> pb.InferenceRequest:
    """A JSON-schema answer, a schema the template's compiler refuses and a required tool call, sent among free streams
    (on either engine): the free ones equal their answers alone, the refused one names the type, the held answer and
    the call's arguments follow the schema. Returns the held request, for what an engine checks more of it."""
    import jsonschema

    def alone(prompt: str) -> str:
        req = request(prompt, max_tokens=16)
        model.execute([req])
        run(model)
        return text_of(req)

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "mood": {"enum": ["happy", "sad"]}},
              "required": ["ok", "mood"], "additionalProperties": False}  # fmt: skip
    tool = {"type": "function", "function": {"name": "pick", "parameters": schema}}
    solo = [alone(prompt) for prompt in prompts[:3]]
    held = request("Answer in JSON:", json_schema=schema, max_tokens=40)
    bad = request("x", json_schema={"type": "object", "properties": {"a": {"type": "strange"}}})
    call = request(json.dumps([{"role": "user", "content": "pick"}]), chat=True, tools=[tool], tool_choice="required",
                   max_tokens=60, truncate=True)  # fmt: skip
    free = [request(prompt, max_tokens=16) for prompt in prompts[:3]]
    model.execute([free[0], held, bad, free[1], call, free[2]])
    run(model)
    assert [text_of(r) for r in free] == solo, "a constrained neighbour changed a free answer"
    assert 'Unsupported type "strange"' in bad.sender.responses[0].error().message()
    jsonschema.validate(json.loads(text_of(held)), schema)
    assert last(call, "finish_reason").decode() == "tool_calls"
    (found,) = json.loads(last(call, "tool_calls").decode())
    jsonschema.validate(json.loads(found["arguments"]), schema)
    return held
