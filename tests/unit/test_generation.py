"""The text-generation template's scheduler, stepped by hand on the tiny GPT-2 (no server, no thread).

Each test stops the background decode thread and calls ``step()`` itself, so admission,
leaving, cancellation and budgets are checked step by step, deterministically. Every
streamed answer is compared with ``model.generate`` run alone on the same prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fake_pb_utils as pb
import pytest
from generation_helpers import check_sampling_surface, last, reference, request, run, text_of
from template_harness import instantiate
from transformers import AutoTokenizer

from tritonhf.gallery import AddRequest, add_model

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture
def generator(tmp_path: Path, tiny: dict[str, Path]) -> Any:
    return _model(tmp_path, tiny, {})


def _model(tmp_path: Path, tiny: dict[str, Path], params: dict[str, str]) -> Any:
    folder = add_model(
        AddRequest(
            "text-generation",
            str(tiny["generator"]),
            tmp_path / "repo",
            name="gen",
            params=params,
            engine="transformers",
        )
    )
    model = instantiate(folder)
    model.finalize()  # no background thread: the tests step the scheduler themselves
    return model


def test_a_batch_of_prompts_of_different_lengths_each_equal_generate(generator: Any, tiny: dict[str, Path]) -> None:
    prompts = ["the movie", "alice visited paris and london with bob", "i", "tell me a story about a cat and a dog"]
    requests = [request(p, max_tokens=12) for p in prompts]
    assert generator.execute(requests) is None
    run(generator)
    for req, prompt in zip(requests, prompts):
        assert text_of(req) == reference(tiny["generator"], prompt, 12)
        assert last(req, "finish_reason").decode() in ("stop", "length")
        assert last(req, "completion_tokens") <= 12


def test_a_late_request_joins_at_the_next_step_and_both_stay_correct(generator: Any, tiny: dict[str, Path]) -> None:
    first = request("the movie was", max_tokens=30)
    generator.execute([first])
    for _ in range(5):
        generator.step()
    (running,) = generator.running
    assert len(running.tokens) == 6 and not first.sender.closed  # prefill's token + 5 decode steps
    late = request("alice visited", max_tokens=10)
    generator.execute([late])
    generator.step()  # admitted, prefilled and one decode step: it has its first tokens now
    assert len(generator.running) == 2, "a late request does not wait for the running one to finish"
    assert len(generator.running[1].tokens) == 2 and len(running.tokens) == 7
    run(generator)
    assert text_of(first) == reference(tiny["generator"], "the movie was", 30)
    assert text_of(late) == reference(tiny["generator"], "alice visited", 10)


def test_finished_rows_leave_the_batch_and_the_cache(generator: Any, tiny: dict[str, Path]) -> None:
    short, long = request("hello world", max_tokens=2), request("the movie", max_tokens=20)
    generator.execute([short, long])
    generator.step()
    generator.step()
    assert short.sender.closed and generator.running and len(generator.running) == 1
    assert generator.engine.cache.layers[0].keys.shape[0] == 1 and generator.engine.mask.shape[0] == 1
    assert generator.engine.mask[:, 0].sum() > 0, "columns that were padding for every row are trimmed"
    run(generator)
    assert text_of(long) == reference(tiny["generator"], "the movie", 20)


def test_a_cancelled_request_leaves_at_the_next_step(generator: Any, tiny: dict[str, Path]) -> None:
    gone, stays = request("the movie", max_tokens=40), request("alice visited", max_tokens=15)
    generator.execute([gone, stays])
    generator.step()
    generator.step()
    sent = len(gone.sender.responses)
    gone.cancelled = True
    generator.step()
    assert gone.sender.closed and len(gone.sender.responses) == sent, "nothing more is computed or sent for it"
    assert [s.request for s in generator.running] == [stays]
    assert pb.metric_families["tritonhf_cancelled_total"].metrics[-1].value == 1
    run(generator)
    assert text_of(stays) == reference(tiny["generator"], "alice visited", 15)
    waiting = request("never admitted", max_tokens=5)
    waiting.cancelled = True
    generator.execute([waiting])
    generator.step()
    assert waiting.sender.closed and not waiting.sender.responses


def test_a_chunk_the_stub_refuses_ends_only_that_stream(generator: Any, tiny: dict[str, Path]) -> None:
    """A send that raises (a closed sender) ends that one stream, uncounted as a cancellation (its
    client did not cancel); the step and every other stream go on."""
    gone, stays = request("the movie", max_tokens=40), request("alice visited", max_tokens=15)
    generator.execute([gone, stays])
    generator.step()
    generator.step()
    sent = len(gone.sender.responses)
    gone.sender.refusals = 10**6  # from now on
    cancelled = pb.metric_families["tritonhf_cancelled_total"].metrics[-1]
    for _ in range(10):  # a step sends a chunk unless its text is held back (part of a character)
        if [s.request for s in generator.running] == [stays]:
            break
        generator.iterate()  # as the decode thread runs a step: a failed step would end every stream
    assert [s.request for s in generator.running] == [stays], "the refused stream left, the other runs on"
    assert len(gone.sender.responses) == sent and cancelled.value == 0
    assert gone.sender.refusals == 10**6 - 1, "one refused chunk, then nothing more was tried"
    run(generator)
    assert text_of(stays) == reference(tiny["generator"], "alice visited", 15)


def test_max_running_and_the_prefill_budget(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = _model(tmp_path, tiny, {"max_running": "2", "max_prefill_tokens": "4"})
    requests = [request(p, max_tokens=4) for p in ("the movie was good", "a cat", "hello world and more")]
    model.execute(requests)
    model.step()
    assert len(model.running) == 1, "the second prompt would exceed 4 prefill tokens in this step"
    model.step()
    assert len(model.running) == 2 and len(model.waiting) == 1, "never more than max_running"
    run(model)
    for req, prompt in zip(requests, ("the movie was good", "a cat", "hello world and more")):
        assert text_of(req) == reference(tiny["generator"], prompt, 4)


def test_context_limits(generator: Any, tiny: dict[str, Path]) -> None:
    context = generator.context  # 128 for the tiny GPT-2
    long_prompt = "the movie " * 200
    too_many = request("the movie", max_tokens=context - 2)
    too_long = request(long_prompt, max_tokens=5)
    too_long_default = request(long_prompt)
    cut = request(long_prompt, max_tokens=5, truncate=True)
    default = request(long_prompt, truncate=True)
    generator.execute([too_many, too_long, too_long_default, cut, default])
    for refused in (too_many, too_long, too_long_default):  # nothing is cut unless the request asks
        message = refused.sender.responses[0].error().message()
        assert "context length" in message and str(context) in message and refused.sender.closed
    assert "at most" in too_many.sender.responses[0].error().message(), "a prompt that fits is told the room left"
    run(generator)
    full = len(generator.tokenizer(long_prompt)["input_ids"])
    assert last(cut, "prompt_tokens") == context - 5 and last(cut, "completion_tokens") <= 5
    assert last(cut, "prompt_tokens_cut") == full - (context - 5), "the answer says how much of the prompt went"
    assert last(default, "prompt_tokens") + last(default, "completion_tokens") <= context
    assert last(default, "prompt_tokens_cut") == full - last(default, "prompt_tokens")


def test_stop_strings_chat_and_bad_settings(generator: Any, tiny: dict[str, Path]) -> None:
    full = reference(tiny["generator"], "the movie", 20)
    stop = full.strip()[3:6]
    if len(full.strip()) < 7:
        pytest.skip("the random model produced too little text to cut")
    stopped = request("the movie", max_tokens=20, stop=[stop])
    messages = [{"role": "user", "content": "tell me a story"}]
    chat = request(json.dumps(messages), chat=True, max_tokens=5)
    bad = [request("x", max_tokens=-1), request("x", temperature=-0.5), request("not json", chat=True)]
    generator.execute([stopped, chat, *bad])
    run(generator)
    assert text_of(stopped) == full[: full.index(stop)]
    assert last(stopped, "finish_reason").decode() == "stop"
    prompt = AutoTokenizer.from_pretrained(tiny["generator"]).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert text_of(chat) == reference(tiny["generator"], prompt, 5)
    for req, word in zip(bad, ("max_tokens", "temperature", "JSON list")):
        assert word in req.sender.responses[0].error().message() and req.sender.closed


def test_a_seeded_sample_does_not_depend_on_its_neighbours(generator: Any) -> None:
    settings = {"max_tokens": 8, "temperature": 1.0, "top_p": 0.9, "seed": 7}
    alone = request("the cat", **settings)
    generator.execute([alone])
    run(generator)
    crowded = request("the cat", **settings)
    others = [request(p, max_tokens=8, temperature=1.0) for p in ("a dog", "the movie was great")]
    generator.execute([others[0], crowded, others[1]])
    run(generator)
    assert text_of(crowded) == text_of(alone)


def test_a_failing_forward_ends_the_running_streams_and_the_loop_goes_on(generator: Any, tiny: dict[str, Path]) -> None:
    victim = request("the movie", max_tokens=10)
    generator.execute([victim])
    generator.step()
    real = generator.engine.model.forward

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("out of memory")

    generator.engine.model.forward = broken
    generator.iterate()  # one iteration of the decode loop, as its thread runs it
    assert victim.sender.closed and "out of memory" in victim.sender.responses[-1].error().message()
    generator.engine.model.forward = real
    after = request("hello", max_tokens=3)
    generator.execute([after])
    run(generator)
    assert text_of(after) == reference(tiny["generator"], "hello", 3)


def test_metrics_count_tokens_and_first_tokens(generator: Any) -> None:
    """The requests' tokens and first tokens, and not the warm-up's: a model no one asked yet shows none."""
    families = pb.metric_families
    first, made = (families[name].metrics[-1] for name in ("tritonhf_time_to_first_token_seconds",
                                                           "tritonhf_generated_tokens_total"))  # fmt: skip
    assert first.observations == [] and made.value == 0, "the warm-up is not a request"
    requests = [request("the movie", max_tokens=4), request("a cat", max_tokens=4)]
    generator.execute(requests)
    run(generator)
    assert len(first.observations) == 2
    assert made.value == sum(int(last(r, "completion_tokens")) for r in requests)
    assert families["tritonhf_running_sequences"].metrics[-1].value == 0


def test_beyond_max_waiting_a_request_is_refused_at_once_as_busy(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = _model(tmp_path, tiny, {"max_waiting": "2"})
    queued = [request("the movie", max_tokens=3) for _ in range(2)]
    extra = request("one too many", max_tokens=3)
    model.execute([*queued, extra])
    error = extra.sender.responses[0].error()
    assert error.code == pb.TritonError.UNAVAILABLE and "exceeds maximum queue size" in error.message().lower()
    assert extra.sender.closed and len(model.waiting) == 2
    run(model)
    assert all(req.sender.closed and not req.sender.responses[-1].has_error() for req in queued)
    later = request("the movie", max_tokens=3)
    model.execute([later])  # the queue drained: admitted again
    run(model)
    assert text_of(later) == text_of(queued[0])


def test_chat_without_a_chat_template_is_the_callers_400_naming_the_way_out(
    tmp_path: Path, tiny: dict[str, Path]
) -> None:
    """The refusal named no input, so the SDK read it as the model failing (a 500 at the gateway); it names
    input 'chat' now, an InvalidInputError (400), and says which route takes a plain prompt."""
    import shutil

    from tritonhf.errors import InvalidInputError
    from tritonhf.sdk._errors import error_for

    plain = tmp_path / "plain"
    shutil.copytree(tiny["generator"], plain)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in plain.glob("chat_template.*"):
        extra.unlink()
    folder = add_model(
        AddRequest("text-generation", str(plain), tmp_path / "repo", name="plain", engine="transformers")
    )
    model = instantiate(folder)
    model.finalize()
    chat = request(json.dumps([{"role": "user", "content": "hi"}]), chat=True, max_tokens=4)
    model.execute([chat])
    message = chat.sender.responses[0].error().message()
    assert "input 'chat'" in message and "/v1/completions" in message and chat.sender.closed
    assert isinstance(error_for("", message, "plain", "grpc://x"), InvalidInputError), "no status in a stream: the text"


def test_a_new_engine_is_one_module_and_one_line(
    tmp_path: Path, tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof, as docs/guide.md ("How to add an engine") tells it: a module with the engine's methods
    (tests/data/engines/counter_engine.py) and one line in gallery add's registry; `gallery add --engine counter`
    copies the module beside model.py and the template serves with it: streaming, limits and refusals unchanged."""
    from typer.testing import CliRunner

    from tritonhf.cli.main import app
    from tritonhf.gallery.families.generation import engines

    counter = DATA / "engines" / "counter_engine.py"
    line = engines.GenerationEngine("counter", "the counter engine", "counts up", "counter", module=counter)
    monkeypatch.setattr(engines, "GENERATION", (line, *engines.GENERATION))  # the one line
    assert "counter: counts up" in engines.engine_help()
    repository = tmp_path / "repo"
    adding = ["gallery", "add", "text-generation", "--model", str(tiny["generator"]), "--repository", str(repository)]
    added = CliRunner().invoke(app, [*adding, "--engine", "counter", "--name", "c"])
    assert added.exit_code == 0, added.output
    folder = repository / "c"
    assert "tritonhf.engine" in (folder / "config.pbtxt").read_text() and (folder / "1" / "counter_engine.py").is_file()
    model = instantiate(folder)
    model.finalize()  # the tests step the loop themselves
    assert type(model.engine).__name__ == "CounterEngine"
    tokenizer = AutoTokenizer.from_pretrained(tiny["generator"])
    prompt = tokenizer("the movie")["input_ids"]
    expected = tokenizer.decode([model.engine.next_token(prompt, made) for made in range(6)])
    plain, held = request("the movie", max_tokens=6), request("the movie", json_schema={"type": "object"})
    too_long = request("the movie " * 40, max_tokens=8)
    model.execute([plain, held, too_long])
    run(model)
    assert text_of(plain) == expected and last(plain, "completion_tokens") == 6
    assert "counter engine" in held.sender.responses[0].error().message()
    assert "context length of 64" in too_long.sender.responses[0].error().message()
    unknown = CliRunner().invoke(app, [*adding, "--engine", "nope"])
    assert unknown.exit_code != 0 and "counter, openvino, llamacpp, transformers" in unknown.output


def test_the_sampling_surface_on_the_transformers_engine(generator: Any) -> None:
    check_sampling_surface(generator)


def test_logit_bias_on_the_transformers_engine(generator: Any, tiny: dict[str, Path]) -> None:
    """OpenAI's logit_bias: 100 makes a token the greedy answer's every token, -100 takes the greedy first token
    away; an id outside the vocabulary is the request's 400 naming the input."""
    tokenizer = AutoTokenizer.from_pretrained(tiny["generator"])

    def alone(**options: Any) -> pb.InferenceRequest:
        req = request("the movie was", max_tokens=6, **options)
        generator.execute([req])
        run(generator)
        return req

    greedy = tokenizer(text_of(alone()))["input_ids"]
    forced = tokenizer("cat")["input_ids"][0]
    assert tokenizer(text_of(alone(logit_bias=json.dumps({str(forced): 100}))))["input_ids"] == [forced] * 6
    assert tokenizer(text_of(alone(logit_bias=json.dumps({str(greedy[0]): -100}))))["input_ids"][0] != greedy[0]
    bad = alone(logit_bias=json.dumps({"999999": 1}))
    assert "logit_bias" in bad.sender.responses[0].error().message()


def test_a_repetition_penalty_answers_as_generate_does(generator: Any, tiny: dict[str, Path]) -> None:
    """vLLM's and transformers' repetition_penalty (a repeated token's logit divided when positive, multiplied when
    negative, over the prompt's and the answer's tokens): the greedy answer is what generate() gives with it, and
    so are top_k=1 and a min_p that only the likeliest token passes, at any temperature."""
    from transformers import AutoModelForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny["generator"])
    model = AutoModelForCausalLM.from_pretrained(tiny["generator"]).eval()
    for prompt, penalty in (("the movie the movie the movie", 1.8), ("tell me a story about a cat", 1.3),
                            ("i love this", 0.7)):  # fmt: skip
        ids = tokenizer(prompt, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=24, do_sample=False, repetition_penalty=penalty,
                             pad_token_id=tokenizer.eos_token_id)  # fmt: skip
        expected = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        for options in ({}, {"temperature": 1.0, "top_k": 1, "seed": 4}, {"temperature": 0.5, "min_p": 1.0, "seed": 5}):
            found = request(prompt, max_tokens=24, repetition_penalty=penalty, **options)
            generator.execute([found])
            run(generator)
            assert text_of(found) == expected, (prompt, penalty, options)


@pytest.mark.parametrize("temperature", [1.175494351e-38, 1e-45, 1e-30])
def test_a_temperature_near_zero_samples_the_likeliest_token_and_draws_among_exact_ties(temperature: float) -> None:
    """Logits of a few hundred divided in FP32 by a temperature near FP32's least are infinite (transformers' own
    sampling then raises on a NaN probability): the template's sampling gives the distribution's answer instead,
    the likeliest token, and a draw among tokens whose logits are exactly equal."""
    import torch

    from tritonhf.runtime.generation import Sampling, Sequence, pick_token

    logits = torch.zeros(64, dtype=torch.float32)
    logits[5], logits[9] = 300.0, 299.5
    picks = {pick_token(Sequence(None, None, [], max_tokens=1, sampling=Sampling(temperature, seed=s)), logits)
             for s in range(20)}  # fmt: skip
    assert picks == {5}
    logits[9] = 300.0  # an exact tie: both are drawn, as at any temperature
    tied = {pick_token(Sequence(None, None, [], max_tokens=1, sampling=Sampling(temperature, seed=s)), logits)
            for s in range(40)}  # fmt: skip
    assert tied == {5, 9}
