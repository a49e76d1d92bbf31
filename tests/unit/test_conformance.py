"""The conformance matrix: tiny models of many architectures added with ``gallery add`` and answered as their own
library answers (sentence-transformers' ``encode``, transformers' pipelines).

Each model is added for real (export, engine, the add-time check against the library), then its template is run
here on several requests in one ``execute`` (rows of different prompts, lengths and options mixed, as Triton's
batcher mixes them) and every row is compared with the library's answer for that input alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import fake_pb_utils as pb
import numpy as np
import pytest
from template_harness import answers, instantiate

from harness import conformance
from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, add_model
from tritonhf.gallery.listing import parameters_of_folder
from tritonhf.gallery.reference import PARAM_REFERENCE_CHECK

pytestmark = pytest.mark.slow
TEXTS = ["a wonderful movie", "the plot was awful and the actors were not good at all", "paris", "i love this film"]
LABELS = ["sports", "politics", "technology"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("conformance")
    built = {}
    for name, build in conformance.builders().items():
        folder = root / name.replace("/", "__")
        folder.mkdir()
        built[name] = build(folder)
    return built


def _add(tmp_path: Path, task: str, source: Path, backend: str = "onnx", **extra: object) -> Path:
    request = AddRequest(task=task, source=str(source), repository=tmp_path / "repo", backend=backend,
                         onnx_runtime="python", **extra)  # type: ignore[arg-type]  # fmt: skip
    return add_model(request)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _library_vectors(folder: Path, texts: list[str], prompt_name: str | None) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    return np.stack([model.encode([text], prompt_name=prompt_name)[0] for text in texts])


EMBEDDERS = [f"{arch}/feature-extraction" for arch in conformance.ENCODERS] + [
    f"st/{name}" for name in conformance.SENTENCE_VARIANTS
]


@pytest.mark.parametrize("name", EMBEDDERS)
def test_embeddings_are_sentence_transformers_vectors(tmp_path: Path, models: dict[str, Path], name: str) -> None:
    folder = models[name]
    added = _add(tmp_path, "feature-extraction", folder)
    assert "sentence-transformers' encode" in parameters_of_folder(added)[PARAM_REFERENCE_CHECK]
    prompts = ["", *json.loads((folder / "config_sentence_transformers.json").read_text())["prompts"]]
    model = instantiate(added)
    try:
        # one request per prompt, each with every text, and one with rows asking for other prompts: one execute
        requests = [
            pb.InferenceRequest(TEXT=pb.texts(*TEXTS), PROMPT_NAME=pb.texts(*[p] * len(TEXTS))) for p in prompts
        ]
        mixed = [prompts[i % len(prompts)] for i in range(len(TEXTS))]
        requests.append(pb.InferenceRequest(TEXT=pb.texts(*TEXTS), PROMPT_NAME=pb.texts(*mixed)))
        responses = answers(model, requests)
    finally:
        model.finalize()
    for prompt, response in zip([*prompts, None], responses):
        assert not response.has_error(), response.error().message()
        got = response.output("EMBEDDING")
        if prompt is None:
            wanted = np.stack([_library_vectors(folder, [t], p or None)[0] for t, p in zip(TEXTS, mixed)])
        else:
            wanted = _library_vectors(folder, TEXTS, prompt or None)
        assert got.shape == wanted.shape
        assert _cosine(got, wanted).min() >= 0.9999
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(wanted, axis=1), rtol=1e-4)


def test_an_unknown_prompt_fails_its_request_alone(tmp_path: Path, models: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "feature-extraction", models["st/weightedmean"]))
    try:
        bad = pb.InferenceRequest(TEXT=pb.texts("paris"), PROMPT_NAME=pb.texts("nonsense"))
        good = pb.InferenceRequest(TEXT=pb.texts("paris"), PROMPT_NAME=pb.texts("query"))
        refused, answered = answers(model, [bad, good])
    finally:
        model.finalize()
    assert refused.has_error() and "'nonsense' is not one of this model's prompts" in refused.error().message()
    assert "query" in refused.error().message()
    wanted = _library_vectors(models["st/weightedmean"], ["paris"], "query")
    assert _cosine(answered.output("EMBEDDING"), wanted).min() >= 0.9999


def test_the_default_prompt_can_be_chosen_at_add(tmp_path: Path, models: dict[str, Path]) -> None:
    folder = models["st/weightedmean"]
    model = instantiate(_add(tmp_path, "feature-extraction", folder, default_prompt_name="passage"))
    try:
        (response,) = answers(model, [pb.InferenceRequest(TEXT=pb.texts("paris"))])
    finally:
        model.finalize()
    assert _cosine(response.output("EMBEDDING"), _library_vectors(folder, ["paris"], "passage")).min() >= 0.9999
    with pytest.raises(GalleryError, match="'nope' is not one of the model's prompts"):
        _add(tmp_path, "feature-extraction", folder, name="other", default_prompt_name="nope")


def test_gallery_add_refuses_a_model_served_different_from_its_library(tmp_path: Path, models: dict[str, Path]) -> None:
    # a user's --param overriding the folder's pooling: the add-time check finds the vectors are not the model's
    with pytest.raises(GalleryError, match=r"below 0\.9999: not served"):
        _add(tmp_path, "feature-extraction", models["st/max"], params={"pooling": "mean"})
    assert not (tmp_path / "repo" / "st__max").exists()


def test_a_module_the_template_cannot_run_is_refused_by_name(tmp_path: Path, models: dict[str, Path]) -> None:
    import shutil

    folder = tmp_path / "with-layernorm"
    shutil.copytree(models["st/cls"], folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(GalleryError, match=r"module 'sentence_transformers\.models\.LayerNorm' is not served"):
        _add(tmp_path, "feature-extraction", folder)


def _library_scores(folder: Path, texts: list[str]) -> list[dict[str, float]]:
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(folder), top_k=None, device="cpu")
    return [{item["label"]: item["score"] for item in found} for found in classify(texts)]


CLASSIFIERS = [f"{arch}/text-classification" for arch in conformance.ENCODERS] + ["bert/score", "bert/regression"]


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_classification_scores_are_the_pipeline_s(tmp_path: Path, models: dict[str, Path], name: str) -> None:
    added = _add(tmp_path, "text-classification", models[name])
    assert "text-classification pipeline" in parameters_of_folder(added)[PARAM_REFERENCE_CHECK]
    model = instantiate(added)
    try:
        responses = answers(
            model, [pb.InferenceRequest(TEXT=pb.texts(*TEXTS[:2])), pb.InferenceRequest(TEXT=pb.texts(*TEXTS[2:]))]
        )
    finally:
        model.finalize()
    got = [
        {label.decode(): float(score) for label, score in zip(labels, scores)}
        for response in responses
        for labels, scores in zip(response.output("LABELS"), response.output("SCORES"))
    ]
    wanted = _library_scores(models[name], TEXTS)
    for got_row, wanted_row in zip(got, wanted):
        assert got_row.keys() == wanted_row.keys()
        assert max(abs(got_row[k] - wanted_row[k]) for k in got_row) <= 1e-4
    if name in ("bert/score", "bert/regression"):  # one output: never the softmax over one label (1.0 for all)
        assert len({round(row["LABEL_0"], 6) for row in got}) == len(TEXTS)


@pytest.mark.parametrize("name", ["bert/nli", "deberta-v2/nli"])
def test_zero_shot_with_an_nli_model_is_the_pipeline_s(tmp_path: Path, models: dict[str, Path], name: str) -> None:
    from transformers import pipeline

    added = _add(tmp_path, "zero-shot-classification", models[name], labels=tuple(LABELS))
    assert "zero-shot pipeline" in parameters_of_folder(added)[PARAM_REFERENCE_CHECK]
    model = instantiate(added)
    multi = [False, True, False, True]
    try:
        request = pb.InferenceRequest(TEXT=pb.texts(*TEXTS), MULTI_LABEL=np.array([[m] for m in multi]))
        alone = pb.InferenceRequest(TEXT=pb.texts(TEXTS[0]), CANDIDATE_LABELS=np.array([[b"sports"]], dtype=object))
        response, single = answers(model, [request, alone])
    finally:
        model.finalize()
    classify = pipeline("zero-shot-classification", model=str(models[name]), device="cpu")
    for text, flag, labels, scores in zip(TEXTS, multi, response.output("LABELS"), response.output("SCORES")):
        found = classify(text, candidate_labels=LABELS, multi_label=flag)
        got = {label.decode(): float(score) for label, score in zip(labels, scores)}
        wanted = dict(zip(found["labels"], found["scores"]))  # compared by label: random weights can tie
        assert got.keys() == wanted.keys()
        assert max(abs(got[label] - wanted[label]) for label in got) <= 1e-4
    found = classify(TEXTS[0], candidate_labels=["sports"])  # one label: entailment against contradiction
    np.testing.assert_allclose(single.output("SCORES")[0][:1], found["scores"], atol=1e-4)


@pytest.mark.parametrize("arch", list(conformance.ENCODERS))
def test_ner_adds_and_answers_whatever_the_tokenizer_emits(tmp_path: Path, models: dict[str, Path], arch: str) -> None:
    # the WordPiece tokenizer emits token_type_ids, which DistilBERT, DeBERTa-v2 (no token types), MPNet and
    # ModernBERT do not take: the export and the template feed what the model declares
    added = _add(tmp_path, "token-classification", models[f"{arch}/token-classification"])
    assert "token-classification pipeline" in parameters_of_folder(added)[PARAM_REFERENCE_CHECK]
    model = instantiate(added)
    try:
        (response,) = answers(model, [pb.InferenceRequest(TEXT=pb.texts("alice lives in paris"))])
    finally:
        model.finalize()
    assert not response.has_error()
    json.loads(response.output("ENTITIES")[0][0])


def test_the_matrix_also_holds_on_the_engine_auto_chooses(tmp_path: Path, models: dict[str, Path]) -> None:
    added = _add(tmp_path, "feature-extraction", models["st/qwen3-lasttoken"], backend="auto")
    params = parameters_of_folder(added)
    assert params["tritonhf.backend"] in ("onnx", "openvino")
    assert (
        "cosine (and length ratio) >= 0.9999" in params[PARAM_REFERENCE_CHECK]
        or "1.000000" in params[PARAM_REFERENCE_CHECK]
    )


@pytest.fixture(scope="module")
def causal_lms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("causal-lms")
    built = {}
    for family in conformance.CAUSAL_LMS:
        (root / family).mkdir()
        built[family] = conformance.build_causal_lm(root / family, family)
    return built


@pytest.mark.parametrize("family", list(conformance.CAUSAL_LMS))
def test_every_causal_lm_family_reaches_the_openvino_engine_greedy_equal(
    tmp_path: Path, causal_lms: dict[str, Path], family: str
) -> None:
    # fp16 weights (not quantized): the greedy tokens of the served pipeline, on the settings it is served with,
    # equal transformers' fp32 ones; the GGUF writer's families through model.gguf, the others through the IR
    folder = _add(tmp_path, "text-generation", causal_lms[family], backend="auto", weight_format="fp16")
    params = parameters_of_folder(folder)
    assert params["tritonhf.engine"] == "openvino", params.get("tritonhf.engine_reason")
    check = params["tritonhf.backend_reason"]
    agreed, total = map(int, check.split("greedy agreement with transformers fp32: ")[1].split(" tokens")[0].split("/"))
    assert agreed == total, check
    served = params.get("tritonhf.openvino_model") or params.get("tritonhf.gguf_file")
    assert f"continuous batching on {served}" in check


def test_gpt2_goes_to_the_ir_export_and_says_why(tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = _add(tmp_path, "text-generation", tiny["generator"], backend="auto")
    params = parameters_of_folder(folder)
    assert params["tritonhf.engine"] == "openvino" and params["tritonhf.openvino_model"] == "openvino"
    assert (folder / "1" / "weights" / "openvino" / "openvino_model.xml").is_file()
    text = (folder / "config.pbtxt").read_text()
    assert "ContinuousBatchingPipeline on openvino" in text and "model.gguf" not in text


@pytest.mark.parametrize("family", list(conformance.SEQ2SEQ))
def test_text2text_families_answer_as_generate(tmp_path: Path, family: str) -> None:
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    source = conformance.build_seq2seq(tmp_path / family, family)
    model = instantiate(_add(tmp_path, "summarization", source, backend="auto"))
    model.finalize()  # no background thread: the test runs the wave itself
    requests = [
        pb.InferenceRequest(text_input=pb.texts(text), max_tokens=np.array([[8]], dtype=np.int32)) for text in TEXTS
    ]
    model.execute(requests)
    model.run([model.waiting.popleft() for _ in range(len(model.waiting))])
    tokenizer = AutoTokenizer.from_pretrained(source)
    reference = AutoModelForSeq2SeqLM.from_pretrained(source).eval()
    for request, text in zip(requests, TEXTS):
        with torch.inference_mode():
            out = reference.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=8, do_sample=False,
                                     num_beams=1, no_repeat_ngram_size=0)  # fmt: skip
        wanted = tokenizer.decode(out[0], skip_special_tokens=True)
        got = "".join(r.output("text_output")[0, 0].decode() for r in request.sender.responses if not r.has_error())
        assert got == wanted, (family, text)


def test_a_transformer_that_formats_texts_as_chat_messages_is_refused_by_name(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    # a tokenizer with a chat template: sentence-transformers then embeds each text as a chat message
    import shutil

    folder = tmp_path / "chat"
    shutil.copytree(models["st/qwen3-lasttoken"], folder)
    config = json.loads((folder / "sentence_bert_config.json").read_text())
    config.setdefault("modality_config", {})["message"] = {"method": "forward", "format": "flat"}
    (folder / "sentence_bert_config.json").write_text(json.dumps(config))
    with pytest.raises(GalleryError, match="formats each text as a chat message"):
        _add(tmp_path, "feature-extraction", folder)


def test_the_openvino_engines_penalties_are_the_librarys(tmp_path: Path, causal_lms: dict[str, Path]) -> None:
    """The penalties on OpenVINO GenAI (fp16 weights) answer as their definitions do: repetition_penalty as
    transformers' generate(repetition_penalty=) (greedy), presence and frequency penalties as the transformers
    engine applies OpenAI's (over the answer's tokens); each penalty changes the plain greedy answer here."""
    import torch
    from generation_helpers import request, run, text_of
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = causal_lms["llama"]
    engines = {}
    for engine in ("openvino", "transformers"):
        folder = _add(tmp_path, "text-generation", source, backend="auto", engine=engine, weight_format="fp16",
                      name=f"llama-{engine}")  # fmt: skip
        assert parameters_of_folder(folder)["tritonhf.engine"] == engine
        engines[engine] = instantiate(folder)
        engines[engine].finalize()  # no background thread: stepped here

    def served(engine: str, prompt: str, **options: float) -> str:
        req = request(prompt, max_tokens=16, **options)
        engines[engine].execute([req])
        run(engines[engine])
        return text_of(req)

    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source).eval()
    changed = 0
    for prompt in ("the movie the movie the movie", "tell me a story about a cat", "paris paris paris"):
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=16, do_sample=False, repetition_penalty=1.5,
                                 pad_token_id=tokenizer.eos_token_id)  # fmt: skip
        expected = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        plain = served("openvino", prompt)
        assert served("openvino", prompt, repetition_penalty=1.5) == expected, prompt
        for options in ({"presence_penalty": 1.5}, {"frequency_penalty": 1.0}, {"presence_penalty": -0.5}):
            answer = served("openvino", prompt, **options)
            assert answer == served("transformers", prompt, **options), (prompt, options)
            changed += answer != plain
        changed += expected != plain
    assert changed >= 4, "the penalties changed too few answers to show anything"
