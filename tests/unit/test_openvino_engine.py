"""The text-generation template on its OpenVINO engine, stepped by hand (no server, no thread).

A tiny Llama is exported by ``gallery add`` to GGUF and served by OpenVINO GenAI's
``ContinuousBatchingPipeline`` through the template. With fp16 weights its greedy answers
equal transformers' ``generate``; with the default int8 weights each answer must equal the
same engine's answer to that prompt alone, however the requests were batched or staggered.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import fake_pb_utils as pb
import pytest
from generation_helpers import check_constraints_among_free, check_sampling_surface, last, request, run, text_of
from template_harness import instantiate
from transformers import AutoTokenizer

from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.installed import openvino_genai_missing as openvino_missing

pytestmark = pytest.mark.skipif(openvino_missing() is not None, reason=str(openvino_missing()))

PROMPTS = [
    "the movie",
    "alice visited paris and london with bob",
    "i",
    "tell me a story about a cat and a dog",
    "hello world",
    "we love the music of this film",
    "bob met carol at acme",
    "the plot is not really good",
]


def _model(tmp_path: Path, tiny: dict[str, Path], weight_format: str = "int8", **params: str) -> Any:
    folder = add_model(
        AddRequest(
            "text-generation",
            str(tiny["llama"]),
            tmp_path / "repo",
            name=f"ov-{weight_format}",
            engine="openvino",
            weight_format=weight_format,
            params=params,
        )
    )
    model = instantiate(folder)
    model.finalize()  # no background thread: the tests step the loop themselves
    return model


@pytest.fixture(scope="module")
def ov_int8(tmp_path_factory: pytest.TempPathFactory, tiny: dict[str, Path]) -> Any:
    return _model(tmp_path_factory.mktemp("ov8"), tiny)


def _alone(model: Any, prompt: str, **options: Any) -> str:
    req = request(prompt, **options)
    model.execute([req])
    run(model)
    return text_of(req)


def test_the_config_says_engine_and_check(ov_int8: Any, tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = add_model(AddRequest("text-generation", str(tiny["llama"]), tmp_path / "r", name="m"))
    text = (folder / "config.pbtxt").read_text()
    assert "# Backend: openvino (" in text and "greedy agreement with transformers fp32" in text
    assert (folder / "1" / "openvino_engine.py").is_file() and (folder / "1" / "weights" / "model.gguf").is_file()
    assert not list((folder / "1" / "weights").glob("*.safetensors")), "served from model.gguf alone"
    assert "on model.gguf (openvino_engine.py)" in text
    # a family the GGUF writer does not know goes to the IR export: test_conformance's generation matrix
    with pytest.raises(GalleryError, match="--engine chooses text-generation"):
        add_model(AddRequest("text-classification", str(tiny["classifier"]), tmp_path / "r", engine="openvino"))


def test_requirements_name_openvino_and_the_engine_plan(tmp_path: Path, tiny: dict[str, Path]) -> None:
    from tritonhf.deploy.requirements import needed_packages
    from tritonhf.gallery.config import ModelOptions
    from tritonhf.gallery.families.generation.choice import plan

    add_model(AddRequest("text-generation", str(tiny["llama"]), tmp_path / "r", name="m", engine="openvino"))
    assert {"openvino", "openvino-genai", "openvino-tokenizers"} <= set(needed_packages(tmp_path / "r"))

    def planned(engine: str, device: str, vendor: bool) -> Any:
        asked = AddRequest("text-generation", "x", tmp_path, engine=engine, vendor=vendor,
                           options=ModelOptions(device=device))  # fmt: skip
        return plan(asked)

    assert planned("auto", "gpu", True).engine.name == "transformers" and "GPU" in planned("auto", "gpu", True).reason
    no_vendor = planned("auto", "cpu", False)
    assert no_vendor.engine.name == "transformers" and "--no-vendor" in no_vendor.reason
    assert planned("auto", "cpu", True).engine.name == "openvino"
    with pytest.raises(GalleryError, match="cannot be used"):
        planned("openvino", "gpu", True)
    with pytest.raises(GalleryError, match="--weight-format"):
        add_model(AddRequest("text-generation", str(tiny["llama"]), tmp_path / "r", name="x", weight_format="int3"))


def test_a_gguf_file_is_served_as_it_is_and_converted_for_transformers(
    tmp_path: Path, tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .gguf source: vendored unchanged for OpenVINO (tokenizer and config read from it), so it answers
    as the same weights exported from the folder do; converted to safetensors (bf16) for transformers,
    so that one answers as transformers on the folder's weights rounded the same way."""
    import torch
    from transformers import AutoModelForCausalLM

    from tritonhf.gallery.families.generation import gguf_export

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the conversions' cache, fresh
    gguf = gguf_export.export(tiny["llama"], tmp_path / "tiny-llama.gguf", "f16").path
    folder = add_model(AddRequest("text-generation", str(gguf), tmp_path / "r", name="ov", engine="openvino"))
    assert (folder / "1" / "weights" / "model.gguf").read_bytes() == gguf.read_bytes()
    assert "the GGUF file's own weights" in (folder / "config.pbtxt").read_text()
    from_gguf, from_folder = instantiate(folder), _model(tmp_path, tiny, weight_format="fp16")
    from_gguf.finalize()
    answers = [_alone(from_gguf, prompt, max_tokens=8) for prompt in PROMPTS[:3]]
    assert answers == [_alone(from_folder, prompt, max_tokens=8) for prompt in PROMPTS[:3]]
    converted = add_model(AddRequest("text-generation", str(gguf), tmp_path / "r", name="pt", engine="transformers"))
    assert list((converted / "1" / "weights").glob("*.safetensors")), "converted for transformers"
    classic = instantiate(converted)
    classic.finalize()
    rounded = AutoModelForCausalLM.from_pretrained(tiny["llama"]).half().bfloat16().float().eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny["llama"])
    for prompt in PROMPTS[:3]:
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = rounded.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        expected = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        assert _alone(classic, prompt, max_tokens=8) == expected


def test_fp16_export_agrees_with_transformers(tmp_path: Path, tiny: dict[str, Path]) -> None:
    """The add-time check measures it: greedy tokens of the fp16 export against transformers fp32. Two
    engines' numerics differ in the last bits, so near-ties may flip late tokens of a random model; a
    wrong export (rotary layout, tied head) would disagree from the first token."""
    model = _model(tmp_path, tiny, weight_format="fp16")
    config = (tmp_path / "repo" / "ov-fp16" / "config.pbtxt").read_text()
    pattern = r"greedy agreement with transformers fp32: (\d+)/(\d+) tokens .*first token (\d+)/(\d+)"
    found = re.search(pattern, config)
    assert found, config
    agreed, total, first, prompts = (int(group) for group in found.groups())
    assert first == prompts and agreed >= 0.75 * total
    requests = [request(p, max_tokens=12) for p in PROMPTS[:4]]
    model.execute(requests)
    run(model)
    for req, prompt in zip(requests, PROMPTS[:4]):
        assert last(req, "finish_reason").decode() in ("stop", "length")
        assert last(req, "prompt_tokens") == len(AutoTokenizer.from_pretrained(tiny["llama"])(prompt)["input_ids"])


def test_staggered_streams_each_equal_their_solo_answer(ov_int8: Any) -> None:
    solo = [_alone(ov_int8, p, max_tokens=20) for p in PROMPTS]
    requests = [request(p, max_tokens=20) for p in PROMPTS]
    for req in requests:  # one new request every step, as 8 staggered clients would arrive
        ov_int8.execute([req])
        ov_int8.step()
    assert len(ov_int8.running) > 1, "the requests ran together"
    run(ov_int8)
    assert [text_of(r) for r in requests] == solo


def test_cancel_stop_strings_chat_and_bad_settings(ov_int8: Any, tiny: dict[str, Path]) -> None:
    full = _alone(ov_int8, "the movie", max_tokens=20)
    if len(full.strip()) < 7:
        pytest.skip("the random model produced too little text to cut")
    stop = full.strip()[3:6]
    gone, stays = request("the movie", max_tokens=40), request("alice visited", max_tokens=15)
    stopped = request("the movie", max_tokens=20, stop=[stop])
    messages = [{"role": "user", "content": "tell me a story"}]
    chat = request(json.dumps(messages), chat=True, max_tokens=5)
    bad = [request("x", max_tokens=-1), request("x", temperature=-0.5), request("not json", chat=True)]
    ov_int8.execute([gone, stays, stopped, chat, *bad])
    ov_int8.step()
    ov_int8.step()
    sent = len(gone.sender.responses)
    gone.cancelled = True
    ov_int8.step()
    assert gone.sender.closed and len(gone.sender.responses) == sent, "nothing more is sent after a cancel"
    assert gone not in [s.request for s in ov_int8.running]
    run(ov_int8)
    assert text_of(stays) == _alone(ov_int8, "alice visited", max_tokens=15)
    assert text_of(stopped) == full[: full.index(stop)] and last(stopped, "finish_reason").decode() == "stop"
    prompt = AutoTokenizer.from_pretrained(tiny["llama"]).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert text_of(chat) == _alone(ov_int8, prompt, max_tokens=5)
    for req, word in zip(bad, ("max_tokens", "temperature", "JSON list")):
        assert word in req.sender.responses[0].error().message() and req.sender.closed
    assert not ov_int8.engine.pipeline.has_non_finished_requests(), "cancelled and stopped requests left OpenVINO"


def test_context_limits_are_the_templates(ov_int8: Any) -> None:
    context = ov_int8.context  # 128 for the tiny Llama
    too_many = request("the movie", max_tokens=context - 2)
    too_long = request("the movie " * 200, max_tokens=4)
    ov_int8.execute([too_many, too_long])
    for refused in (too_many, too_long):
        message = refused.sender.responses[0].error().message()
        assert "context length" in message and str(context) in message and refused.sender.closed


def test_a_seeded_sample_is_reproducible_alone_and_among_others(ov_int8: Any) -> None:
    settings = {"max_tokens": 12, "temperature": 1.0, "top_p": 0.9, "seed": 7}
    alone = _alone(ov_int8, "the cat", **settings)
    assert _alone(ov_int8, "the cat", **settings) == alone
    crowded = request("the cat", **settings)
    others = [request(p, max_tokens=12, temperature=1.0) for p in ("a dog", "the movie was great")]
    ov_int8.execute([others[0], crowded, others[1]])
    run(ov_int8)
    assert text_of(crowded) == alone
    greedy = _alone(ov_int8, "the cat", max_tokens=12)
    assert any(_alone(ov_int8, "the cat", max_tokens=12, temperature=1.5, seed=s) != greedy for s in range(4))


def test_metrics_count_tokens(ov_int8: Any) -> None:
    requests = [request("the movie", max_tokens=4), request("a cat", max_tokens=4)]
    ov_int8.execute(requests)
    run(ov_int8)
    families = pb.metric_families
    generated = sum(int(last(r, "completion_tokens")) for r in requests)
    assert families["tritonhf_generated_tokens_total"].metrics[-1].value >= generated
    assert families["tritonhf_prompt_tokens_total"].metrics[-1].value > 0
    assert families["tritonhf_running_sequences"].metrics[-1].value == 0


def test_batch_invariant_settings_by_default_and_the_way_out_is_stated(
    tmp_path: Path, tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant by default (one thread, f32 activations and key/value cache); batch_invariant=false runs on the
    instance's cores with an f16 cache, and the config, the SDK's ModelInfo (so /v1/models) and the template
    say it. threads above one stays invariant with the dynamic quantization off. A bad value is refused at add
    and at load."""
    from google.protobuf import json_format

    from tritonhf._wire.config import ModelConfig
    from tritonhf.gallery.config import parse_config
    from tritonhf.runtime.openvino_settings import engine_settings

    invariant = engine_settings({}, cores=2)
    assert invariant.invariant and invariant.threads == 1
    assert invariant.properties == {"KV_CACHE_PRECISION": "f32", "INFERENCE_PRECISION_HINT": "f32"}
    fast = engine_settings({"batch_invariant": "false"}, cores=2)
    assert not fast.invariant and fast.threads == 2 and fast.properties["KV_CACHE_PRECISION"] == "f16"
    assert (
        engine_settings({"batch_invariant": "false", "kv_cache_precision": "u8"}, 4).properties["KV_CACHE_PRECISION"]
        == "u8"
    )
    two = engine_settings({"threads": "2"}, cores=2)
    assert two.invariant and two.threads == 2 and two.properties["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "0"
    assert two.properties["KV_CACHE_PRECISION"] == "f32" and "batch-invariant" in two.describe()
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" not in engine_settings({"batch_invariant": "false"}, 2).properties
    for bad, match in (({"batch_invariant": "maybe"}, "true or false"), ({"threads": "two"}, "whole number")):
        with pytest.raises(ValueError, match=match):
            engine_settings(bad, cores=2)
        with pytest.raises(GalleryError, match=match):
            add_model(AddRequest("text-generation", str(tiny["llama"]), tmp_path / "bad", engine="openvino",
                                 params=bad))  # fmt: skip

    def parsed(folder: Path) -> ModelConfig:
        config = parse_config((folder / "config.pbtxt").read_text())
        return ModelConfig.parse(json_format.MessageToDict(config, preserving_proto_field_name=True))

    repo = tmp_path / "r"
    default = add_model(AddRequest("text-generation", str(tiny["llama"]), repo, name="inv", engine="openvino"))
    assert "Engine settings: batch-invariant" in (default / "config.pbtxt").read_text()
    assert parsed(default).batch_invariant
    way_out = add_model(AddRequest("text-generation", str(tiny["llama"]), tmp_path / "r", name="fast",
                                   engine="openvino", params={"batch_invariant": "false"}))  # fmt: skip
    text = (way_out / "config.pbtxt").read_text()
    assert "Engine settings: NOT batch-invariant (batch_invariant=false)" in text
    assert not parsed(way_out).batch_invariant
    from typer.testing import CliRunner

    from tritonhf.cli.main import app

    shown = CliRunner().invoke(app, ["gallery", "show", "fast", "--repository", str(tmp_path / "r")])
    assert shown.exit_code == 0 and "batch-invariant: NO" in shown.output and "batch_invariant=false" in shown.output
    shown = CliRunner().invoke(app, ["gallery", "show", "inv", "--repository", str(tmp_path / "r")])
    assert "batch-invariant: yes" in shown.output
    model = instantiate(way_out)
    model.finalize()
    assert _alone(model, "the movie", max_tokens=4) is not None
    pt = add_model(AddRequest("text-generation", str(tiny["llama"]), tmp_path / "r", name="pt", engine="transformers",
                              params={"batch_invariant": "false"}))  # fmt: skip
    assert parsed(pt).batch_invariant, "the transformers engine is invariant whatever the parameter says"


def test_a_schema_and_a_required_call_hold_the_answer_among_free_neighbours(ov_int8: Any) -> None:
    """OpenVINO applies the grammar; the template compiles it first, so a schema the compiler refuses
    is that request's error and never reaches a step the others share."""
    held = check_constraints_among_free(ov_int8, PROMPTS)
    # compact JSON (the template's EBNF): the random model cannot spend its tokens on whitespace, so both finish
    assert last(held, "finish_reason").decode() == "stop"
    assert not ov_int8.engine.pipeline.has_non_finished_requests()


def test_a_failed_step_ends_its_streams_and_the_next_request_is_served(ov_int8: Any, monkeypatch: Any) -> None:
    """A grammar OpenVINO's own copy of xgrammar refuses inside its step (the template's compile passed it) leaves
    the pipeline mid-step; the engine makes a new one, so only that step's streams fail."""
    solo = _alone(ov_int8, PROMPTS[1], max_tokens=12)
    monkeypatch.setattr(ov_int8.grammars, "openvino_grammar", lambda schema: ("json_schema", '{"type": "strange"}'))
    doomed, neighbour = request("x", json_schema={"type": "object"}, max_tokens=8), request(PROMPTS[0], max_tokens=8)
    ov_int8.execute([doomed, neighbour])
    while ov_int8.running or ov_int8.waiting:
        ov_int8.iterate()  # the decode loop's step: a failure ends the streams it was computing
    for req in (doomed, neighbour):
        assert req.sender.closed and "generation failed" in req.sender.responses[-1].error().message()
    monkeypatch.undo()
    assert _alone(ov_int8, PROMPTS[1], max_tokens=12) == solo


def test_logprobs_of_the_chosen_tokens_and_alternatives_refused(ov_int8: Any) -> None:
    """OpenVINO GenAI returns each chosen token's log-probability, no alternatives: asking for them is
    that request's 400, naming the engine."""
    asked, plain = request(PROMPTS[0], max_tokens=12, logprobs=0), request(PROMPTS[0], max_tokens=12)
    alternatives = request(PROMPTS[0], max_tokens=12, logprobs=2)
    ov_int8.execute([asked, plain, alternatives])
    run(ov_int8)
    assert text_of(asked) == text_of(plain)
    entries = [e for r in asked.sender.responses for t in r.output_tensors if t.name() == "logprobs"
               for e in json.loads(t.as_numpy()[0, 0])]  # fmt: skip
    assert len(entries) == last(asked, "completion_tokens") and all(lp <= 0 and top == [] for _, lp, top in entries)
    assert "OpenVINO engine" in alternatives.sender.responses[0].error().message()


@pytest.mark.slow  # optimum-intel's export, in the exporter venv (made once, from the package index)
@pytest.mark.parametrize("weight_format", ["int8-ir", "int4-ir"])
def test_an_ir_export_is_served_and_each_stream_equals_itself_alone(
    tmp_path: Path, tiny: dict[str, Path], weight_format: str
) -> None:
    """--weight-format int4-ir / int8-ir: the model exported to OpenVINO IR (weights/openvino), checked against
    transformers at add, served by the same engine on the batch-invariant settings: staggered streams equal their
    answers alone."""
    model = _model(tmp_path, tiny, weight_format=weight_format)
    folder = tmp_path / "repo" / f"ov-{weight_format}"
    config = (folder / "config.pbtxt").read_text()
    assert f"OpenVINO IR, {weight_format.removesuffix('-ir')} weights; greedy agreement with transformers" in config
    assert (folder / "1" / "weights" / "openvino" / "openvino_model.xml").is_file()
    assert not list((folder / "1" / "weights").glob("*.safetensors")), "served from the IR alone"
    solo = [_alone(model, p, max_tokens=16) for p in PROMPTS]
    requests = [request(p, max_tokens=16) for p in PROMPTS]
    for req in requests:  # one new request every step, as staggered clients would arrive
        model.execute([req])
        model.step()
    assert len(model.running) > 1, "the requests ran together"
    run(model)
    assert [text_of(r) for r in requests] == solo


def test_the_sampling_surface_on_the_openvino_engine(ov_int8: Any) -> None:
    check_sampling_surface(ov_int8)


def test_logit_bias_is_refused_by_the_openvino_engine_by_name(ov_int8: Any) -> None:
    req = request("the movie", max_tokens=4, logit_bias=json.dumps({"5": 10}))
    ov_int8.execute([req])
    message = req.sender.responses[0].error().message()
    assert "logit_bias" in message and "OpenVINO engine" in message and "--engine transformers" in message
