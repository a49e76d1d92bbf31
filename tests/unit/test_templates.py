"""Every template's execute(), on tiny local models, against transformers called directly.

Requests are built as the stub delivers them; each test sends several requests in one
``execute`` call (what dynamic batching does) and checks that each gets its own answer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import fake_pb_utils as pb
import numpy as np
import pytest
import torch
from template_harness import answers, instantiate
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    pipeline,
)

from tritonhf.deploy.requirements import needed_packages
from tritonhf.gallery import AddRequest, ModelOptions, add_model

texts = pb.texts


def _add(tmp_path: Path, task: str, source: Path, **extra: object) -> Path:
    return add_model(AddRequest(task=task, source=str(source), repository=tmp_path / "repo", **extra))  # type: ignore[arg-type]


def _reference_probabilities(folder: Path, batch: list[str], multi_label: bool = False) -> np.ndarray:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        logits = model(**tokenizer(batch, padding=True, return_tensors="pt")).logits
    return (torch.sigmoid(logits) if multi_label else torch.softmax(logits, -1)).numpy()


# ------------------------------------------------------------------ text-classification


def test_classification_answers_each_request_with_its_own_rows(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "text-classification", tiny["classifier"]))
    first = pb.InferenceRequest(TEXT=texts("a wonderful movie", "the plot was awful"))
    second = pb.InferenceRequest(TEXT=texts("i love this film"), TOP_K=np.array([[2]], dtype=np.int32))
    bad_utf8 = pb.InferenceRequest(TEXT=texts(b"\xff\xfe broken"))
    missing = pb.InferenceRequest(OTHER=texts("x"))
    responses = answers(model, [first, second, bad_utf8, missing])
    assert len(responses) == 4

    expected = _reference_probabilities(
        tiny["classifier"], ["a wonderful movie", "the plot was awful", "i love this film"]
    )
    labels = ["negative", "neutral", "positive"]
    got_first = responses[0].output("SCORES")
    assert responses[0].output("LABEL").shape == (2, 1)
    for row in range(2):
        assert responses[0].output("LABEL")[row, 0].decode() == labels[int(expected[row].argmax())]
        np.testing.assert_allclose(np.sort(got_first[row])[::-1], np.sort(expected[row])[::-1], atol=1e-5)
    assert responses[1].output("LABELS").shape == (1, 2), "TOP_K=2 returns two labels"
    np.testing.assert_allclose(responses[1].output("SCORE")[0, 0], expected[2].max(), atol=1e-5)
    assert "not valid UTF-8" in responses[2].error().message()
    assert "missing required input 'TEXT'" in responses[3].error().message()


def test_classification_refuses_a_bad_top_k_for_that_request_only(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "text-classification", tiny["classifier"]))
    good = pb.InferenceRequest(TEXT=texts("good"))
    bad = pb.InferenceRequest(TEXT=texts("bad"), TOP_K=np.array([[0]], dtype=np.int32))
    responses = answers(model, [good, bad])
    assert not responses[0].has_error()
    assert "TOP_K" in responses[1].error().message()


def test_multi_label_uses_sigmoid(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "text-classification", tiny["multilabel"]))
    (response,) = answers(model, [pb.InferenceRequest(TEXT=texts("a great film"))])
    expected = _reference_probabilities(tiny["multilabel"], ["a great film"], multi_label=True)
    np.testing.assert_allclose(np.sort(response.output("SCORES")[0]), np.sort(expected[0]), atol=1e-5)


def test_long_text_is_truncated_not_crashing(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "text-classification", tiny["classifier"]))
    (response,) = answers(model, [pb.InferenceRequest(TEXT=texts("movie " * 5000, "", "   "))])
    assert response.output("LABEL").shape == (3, 1)


def test_pairs_are_read_as_pairs_and_singles_beside_them_as_singles(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "text-classification", tiny["classifier"]))
    pairs = pb.InferenceRequest(TEXT=texts("a great film", "dull"), TEXT_PAIR=texts("it was fun", "very boring"))
    single = pb.InferenceRequest(TEXT=texts("a great film"))
    half = pb.InferenceRequest(TEXT=texts("a great film", "dull"), TEXT_PAIR=texts("it was fun", ""))
    together = answers(model, [pairs, single, half])
    tokenizer = AutoTokenizer.from_pretrained(tiny["classifier"])
    reference = AutoModelForSequenceClassification.from_pretrained(tiny["classifier"]).eval()
    with torch.inference_mode():
        for first, second, (response, row) in (
            ("a great film", "it was fun", (together[0], 0)),
            ("dull", "very boring", (together[0], 1)),
            ("a great film", None, (together[1], 0)),
            ("a great film", "it was fun", (together[2], 0)),
            ("dull", None, (together[2], 1)),  # "" is no pair: the text alone, without a pair's separators
        ):
            logits = reference(**tokenizer(first, second, return_tensors="pt")).logits
            expected = torch.softmax(logits, -1)[0].numpy()
            np.testing.assert_allclose(np.sort(response.output("SCORES")[row])[::-1], np.sort(expected)[::-1],
                                       atol=1e-5)  # fmt: skip
    # Fresh requests: a request is answered once (reusing one would hand back its first answer).
    alone_pairs = pb.InferenceRequest(TEXT=texts("a great film", "dull"), TEXT_PAIR=texts("it was fun", "very boring"))
    alone_single = pb.InferenceRequest(TEXT=texts("a great film"))
    for alone, (response, row) in ((alone_pairs, (together[0], 0)), (alone_single, (together[1], 0))):
        (by_itself,) = answers(model, [alone])
        np.testing.assert_array_equal(by_itself.output("SCORES")[0], response.output("SCORES")[row])


# ------------------------------------------------------------------ token-classification


def test_ner_matches_the_transformers_pipeline_with_character_offsets(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "ner", tiny["ner"]))
    sentences = ["alice visited paris with bob", "😀 carol works at acme in 東京 london"]
    reference = pipeline("token-classification", model=str(tiny["ner"]), aggregation_strategy="simple")
    one = pb.InferenceRequest(TEXT=texts(sentences[0]))
    two = pb.InferenceRequest(TEXT=texts(sentences[1]), AGGREGATION=texts("simple"))
    responses = answers(model, [one, two])
    for response, sentence in zip(responses, sentences):
        got = json.loads(response.output("ENTITIES")[0, 0])
        expected = reference(sentence)
        assert [(e["entity_group"], e["start"], e["end"]) for e in got] == [
            (e["entity_group"], e["start"], e["end"]) for e in expected
        ]
        for entity in got:
            assert sentence[entity["start"] : entity["end"]].lower().replace(" ", "") == entity["word"].replace(" ", "")


def test_ner_unknown_aggregation_fails_only_that_request(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "ner", tiny["ner"]))
    good = pb.InferenceRequest(TEXT=texts("alice visited paris"))
    bad = pb.InferenceRequest(TEXT=texts("bob"), AGGREGATION=texts("loudest"))
    responses = answers(model, [good, bad])
    assert not responses[0].has_error()
    assert "AGGREGATION" in responses[1].error().message()


# ------------------------------------------------------------------ feature-extraction


def _reference_embeddings(folder: Path, batch: list[str], pooling: str = "mean") -> np.ndarray:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    encoded = tokenizer(batch, padding=True, return_tensors="pt")
    with torch.inference_mode():
        tokens = model(**encoded).last_hidden_state
    if pooling == "cls":
        return tokens[:, 0].numpy()
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    return ((tokens * mask).sum(1) / mask.sum(1)).numpy()


def test_embeddings_mean_pooled_and_normalised_per_request(tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = _add(tmp_path, "feature-extraction", tiny["encoder"])
    assert 'string_value: "mean"' in (folder / "config.pbtxt").read_text()
    assert "dims: 32" in (folder / "config.pbtxt").read_text()
    model = instantiate(folder)
    batch = ["the cat", "a dog and a cat lives in london"]
    raw = pb.InferenceRequest(TEXT=texts(*batch), NORMALIZE=np.array([[False], [False]]))
    default = pb.InferenceRequest(TEXT=texts(batch[1]))
    responses = answers(model, [raw, default])
    expected = _reference_embeddings(tiny["encoder"], batch)
    np.testing.assert_allclose(responses[0].output("EMBEDDING"), expected, atol=1e-5)
    normalised = responses[1].output("EMBEDDING")
    assert normalised.dtype == np.float32 and normalised.shape == (1, 32)
    np.testing.assert_allclose(normalised[0], expected[1] / np.linalg.norm(expected[1]), atol=1e-5)


def test_token_vectors_of_embed_all_are_the_models_own(tmp_path: Path, tiny: dict[str, Path]) -> None:
    """ALL_TOKENS (TEI's /embed_all): each row's token vectors, zero-padded to the request's longest row,
    equal the model's last hidden state; their mean is the row's pooled vector; a request without it gets none."""
    folder = _add(tmp_path, "feature-extraction", tiny["encoder"])
    model = instantiate(folder)
    batch = ["the cat", "a dog and a cat lives in london"]
    asked = pb.InferenceRequest(TEXT=texts(*batch), NORMALIZE=np.array([[False], [False]]),
                                ALL_TOKENS=np.array([[True], [True]]))  # fmt: skip
    plain = pb.InferenceRequest(TEXT=texts(batch[0]))
    responses = answers(model, [asked, plain])
    tokens = responses[0].output("TOKENS").reshape(-1)
    found = responses[0].output("TOKEN_EMBEDDINGS")
    assert found.shape == (2, tokens.max(), 32) and not found[0, tokens[0] :].any(), "padding is zeros"
    tokenizer, reference = AutoTokenizer.from_pretrained(tiny["encoder"]), AutoModel.from_pretrained(tiny["encoder"])
    for row, text in enumerate(batch):
        with torch.inference_mode():
            expected = reference(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].numpy()
        np.testing.assert_allclose(found[row, : tokens[row]], expected, atol=1e-5)
        np.testing.assert_allclose(found[row, : tokens[row]].mean(0), responses[0].output("EMBEDDING")[row], atol=1e-5)
    assert "TOKEN_EMBEDDINGS" not in [t.name() for t in responses[1].output_tensors]


def test_embeddings_cls_pooling_from_sentence_transformers_config(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "embeddings", tiny["encoder-cls"]))
    (response,) = answers(model, [pb.InferenceRequest(TEXT=texts("hello world"))])
    expected = _reference_embeddings(tiny["encoder-cls"], ["hello world"], pooling="cls")
    np.testing.assert_allclose(response.output("EMBEDDING"), expected, atol=1e-5)


# ------------------------------------------------------------------ zero-shot


def test_zero_shot_scores_sum_to_one_and_labels_can_be_overridden(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "zero-shot", tiny["encoder"], labels=("positive", "negative")))
    default = pb.InferenceRequest(TEXT=texts("a great movie", "an awful film"))
    custom = pb.InferenceRequest(
        TEXT=texts("paris"), CANDIDATE_LABELS=np.array([[b"city", b"animal", b"food"]], dtype=object)
    )
    responses = answers(model, [default, custom])
    assert sorted(label.decode() for label in responses[0].output("LABELS")[0]) == ["negative", "positive"]
    np.testing.assert_allclose(responses[0].output("SCORES").sum(axis=1), [1.0, 1.0], atol=1e-5)
    assert sorted(label.decode() for label in responses[1].output("LABELS")[0]) == ["animal", "city", "food"]
    scores = responses[1].output("SCORES")[0]
    assert list(scores) == sorted(scores, reverse=True)


def test_zero_shot_without_any_labels_is_a_request_error(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "zero-shot", tiny["encoder"]))
    (response,) = answers(model, [pb.InferenceRequest(TEXT=texts("x"))])
    assert "no candidate labels" in response.error().message()


def test_options_reach_the_config(tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = _add(
        tmp_path,
        "text-classification",
        tiny["classifier"],
        name="sst",
        options=ModelOptions(max_batch_size=8, instances=2),
    )
    text = (folder / "config.pbtxt").read_text()
    assert "max_batch_size: 8" in text and "count: 2" in text and 'name: "sst"' in text


# ------------------------------------------------------------------ the ONNX Runtime path


def test_onnx_embeddings_match_pytorch(tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = _add(tmp_path, "feature-extraction", tiny["encoder"], backend="onnx")
    weights = folder / "1" / "weights"
    assert (weights / "model.onnx").is_file() and not list(weights.glob("*.safetensors"))
    assert 'key: "tritonhf.backend"' in (folder / "config.pbtxt").read_text()
    model = instantiate(folder)
    batch = ["the cat", "a dog and a cat lives in london"]
    (response,) = answers(model, [pb.InferenceRequest(TEXT=texts(*batch), NORMALIZE=np.array([[False], [False]]))])
    np.testing.assert_allclose(response.output("EMBEDDING"), _reference_embeddings(tiny["encoder"], batch), atol=1e-3)


def test_onnx_classification_and_zero_shot_match_pytorch(tmp_path: Path, tiny: dict[str, Path]) -> None:
    batch = ["a wonderful movie", "the plot was awful", "i love this film"]
    torch_model = instantiate(_add(tmp_path, "text-classification", tiny["classifier"], name="pt"))
    onnx_model = instantiate(_add(tmp_path, "text-classification", tiny["classifier"], name="ox", backend="onnx"))
    (expected,) = answers(torch_model, [pb.InferenceRequest(TEXT=texts(*batch))])
    (got,) = answers(onnx_model, [pb.InferenceRequest(TEXT=texts(*batch))])
    assert list(got.output("LABEL").ravel()) == list(expected.output("LABEL").ravel())
    np.testing.assert_allclose(got.output("SCORES"), expected.output("SCORES"), atol=1e-3)
    zero = instantiate(_add(tmp_path, "zero-shot", tiny["encoder"], name="zs", backend="onnx", labels=("a", "b")))
    (answer,) = answers(zero, [pb.InferenceRequest(TEXT=texts("the cat"))])
    assert abs(float(answer.output("SCORES").sum()) - 1) < 1e-5


def test_openvino_runs_the_same_export_and_matches_pytorch(tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = _add(tmp_path, "feature-extraction", tiny["encoder"], name="ov", backend="openvino")
    config = (folder / "config.pbtxt").read_text()
    assert 'string_value: "openvino"' in config and "tritonhf.openvino_max_abs_diff" in config
    model = instantiate(folder)
    assert type(model.model).__name__ == "OpenVinoModel"
    batch = ["the cat", "a dog and a cat lives in london"]
    (response,) = answers(model, [pb.InferenceRequest(TEXT=texts(*batch), NORMALIZE=np.array([[False], [False]]))])
    np.testing.assert_allclose(response.output("EMBEDDING"), _reference_embeddings(tiny["encoder"], batch), atol=1e-3)
    # Each row as it is alone, whatever it is batched with (padding to the longer neighbour included).
    for text in batch:
        (alone,) = answers(model, [pb.InferenceRequest(TEXT=texts(text), NORMALIZE=np.array([[False]]))])
        row = batch.index(text)
        np.testing.assert_allclose(alone.output("EMBEDDING")[0], response.output("EMBEDDING")[row], atol=1e-4)
    classifier = instantiate(_add(tmp_path, "text-classification", tiny["classifier"], name="ovc", backend="openvino"))
    reference = instantiate(_add(tmp_path, "text-classification", tiny["classifier"], name="ptc"))
    sentences = ["a wonderful movie", "the plot was awful"]
    (got,) = answers(classifier, [pb.InferenceRequest(TEXT=texts(*sentences))])
    (expected,) = answers(reference, [pb.InferenceRequest(TEXT=texts(*sentences))])
    np.testing.assert_allclose(got.output("SCORES"), expected.output("SCORES"), atol=1e-3)
    assert "openvino" in needed_packages(tmp_path / "repo")


def test_auto_measures_both_engines_and_keeps_the_faster_one_with_both_figures(
    tmp_path: Path, tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tritonhf.gallery import installed, onnx_engines

    folder = _add(tmp_path, "feature-extraction", tiny["encoder"], name="measured")
    config = (folder / "config.pbtxt").read_text()
    figures = re.search(r"ONNX Runtime ([\d.]+) ms for one text, (\d+) texts/s.*OpenVINO ([\d.]+) ms for one text, "
                        r"(\d+) texts/s", config)  # fmt: skip
    assert figures and "tritonhf.engine_calibration" in config, "both engines' figures are in the config"
    onnx = onnx_engines.Speed(float(figures.group(1)), float(figures.group(2)))
    openvino = onnx_engines.Speed(float(figures.group(3)), float(figures.group(4)))
    kept = onnx_engines.choose(onnx, openvino)
    backend = re.search(r'key: "tritonhf.backend"\s*value\s*\{\s*string_value: "(\w+)"', config)
    assert backend and backend.group(1) == kept
    assert ("tritonhf.openvino_max_abs_diff" in config) == (kept == "openvino"), "OpenVINO's check is kept with it"
    assert type(instantiate(folder).model).__name__ == ("OpenVinoModel" if kept == "openvino" else "OnnxModel")
    # Where OpenVINO is missing, auto is ONNX Runtime as before, and says so by not measuring.
    monkeypatch.setattr(installed, "openvino_available", lambda: False)
    plain = (_add(tmp_path, "feature-extraction", tiny["encoder"], name="plain") / "config.pbtxt").read_text()
    assert 'string_value: "onnx"' in plain and "engine_calibration" not in plain


def test_openvino_is_kept_only_when_clearly_faster_under_load_and_not_much_slower_alone() -> None:
    from tritonhf.gallery.onnx_engines import Speed, choose

    onnx = Speed(lone_ms=4.0, batch_per_s=400)
    assert choose(onnx, Speed(4.0, 480)) == "openvino"
    assert choose(onnx, Speed(4.0, 420)) == "onnx", "5% faster is within a noisy machine's drift"
    assert choose(onnx, Speed(6.0, 600)) == "onnx", "a lone request 1.5x slower is not worth it"
    assert choose(onnx, Speed(3.0, 300)) == "onnx"


def test_openvino_is_refused_where_it_cannot_apply(tmp_path: Path, tiny: dict[str, Path]) -> None:
    from tritonhf.errors import GalleryError

    with pytest.raises(GalleryError, match="--quantize int8 makes an ONNX Runtime model"):
        _add(tmp_path, "feature-extraction", tiny["encoder"], name="q", backend="openvino", quantize="int8")
    with pytest.raises(GalleryError, match="not natively"):
        _add(tmp_path, "feature-extraction", tiny["encoder"], name="n", backend="openvino", onnx_runtime="native")


def test_onnx_is_refused_for_tasks_it_does_not_cover(tmp_path: Path, tiny: dict[str, Path]) -> None:
    from tritonhf.errors import GalleryError

    with pytest.raises(GalleryError, match="--backend onnx supports"):
        _add(tmp_path, "text-generation", tiny["generator"], backend="onnx")
    with pytest.raises(GalleryError, match="--quantize int8 quantizes the ONNX model"):
        _add(tmp_path, "ner", tiny["ner"], backend="pytorch", quantize="int8")


def test_no_vendor_keeps_a_reference_and_still_serves(tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = _add(tmp_path, "text-classification", tiny["classifier"], vendor=False)
    assert not (folder / "1" / "weights").exists()
    assert str(tiny["classifier"]) in (folder / "config.pbtxt").read_text()
    (response,) = answers(instantiate(folder), [pb.InferenceRequest(TEXT=texts("a wonderful movie"))])
    assert response.output("LABEL").shape == (1, 1)


def test_int8_is_kept_only_above_its_gate_and_says_how_close_it_is(tmp_path: Path, tiny: dict[str, Path]) -> None:
    from tritonhf.errors import GalleryError
    from tritonhf.gallery.families.encoders.onnx_export import GATES

    try:
        folder = _add(tmp_path, "feature-extraction", tiny["encoder"], name="emb8", quantize="int8")
    except GalleryError as refused:  # a random tiny model may not survive int8: then it must say so
        assert "below the gate" in str(refused) and "--force" in str(refused)
        folder = _add(tmp_path, "feature-extraction", tiny["encoder"], name="emb8", quantize="int8", force=True)
    text = (folder / "config.pbtxt").read_text()
    assert "int8 vs fp32 on 16 calibration texts: cosine mean" in text and f"(gate {GATES['cosine_mean']})" in text
    weights = folder / "1" / "weights"
    assert (weights / "model.int8.onnx").is_file() and not (weights / "model.onnx").exists()
    model = instantiate(folder)
    (response,) = answers(model, [pb.InferenceRequest(TEXT=texts("the cat", "a dog lives in london"))])
    expected = _reference_embeddings(tiny["encoder"], ["the cat", "a dog lives in london"])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    cosine = (response.output("EMBEDDING") * expected).sum(1)
    assert (cosine > 0.9).all(), cosine
    assert "alone vs batched max difference" in text
    # activations are quantized per token: a text's answer does not move with its batch-mates
    long_text = " ".join(["an unusually long and loud neighbour"] * 12)
    (alone,) = answers(model, [pb.InferenceRequest(TEXT=texts("the cat"))])
    (mixed,) = answers(model, [pb.InferenceRequest(TEXT=texts(long_text, "the cat"))])
    np.testing.assert_allclose(mixed.output("EMBEDDING")[1], alone.output("EMBEDDING")[0], atol=1e-5)
    with pytest.raises(GalleryError, match="at least 4 texts"):
        _add(tmp_path, "feature-extraction", tiny["encoder"], name="few", quantize="int8", calibration=("a", "b"))


def test_threads_per_instance_share_the_cores_unless_set() -> None:
    import os

    from tritonhf import runtime

    def args(instances: int, threads: str | None = None, backend: str | None = None) -> dict[str, str]:
        config: dict[str, object] = {"instance_group": [{"count": instances}]}
        parameters = {"threads": threads, runtime.PARAM_BACKEND: backend}
        config["parameters"] = {key: {"string_value": value} for key, value in parameters.items() if value is not None}
        return {"model_config": json.dumps(config)}

    cores = os.cpu_count() or 1
    assert runtime.instance_threads(args(1)) == cores
    assert runtime.instance_threads(args(2)) == max(1, cores // 2)
    assert runtime.instance_threads(args(2, "3")) == 3
    with pytest.raises(ValueError, match="threads"):
        runtime.instance_threads(args(1, "zero"))
    # torch runs the model: it gets the instance's share; an engine with its own pool runs it: torch gets one
    assert runtime.torch_threads(args(1)) == runtime.torch_threads(args(1, backend="pytorch")) == cores
    assert runtime.torch_threads(args(1, "3", backend="ctranslate2")) == 3
    for engine in ("onnx", "openvino"):
        assert runtime.torch_threads(args(1, backend=engine)) == runtime.torch_threads(args(2, "3", engine)) == 1
        assert runtime.instance_threads(args(1, backend=engine)) == cores  # the engine's own pool: all of the share


def test_budget_groups_split_mixed_lengths_where_padding_costs_more_than_a_pass() -> None:
    from tritonhf.runtime import PASS_COST_TOKENS, budget_groups

    same = budget_groups(dict.fromkeys(range(40), 10), 8192, max_rows=16)
    assert [len(group) for group in same] == [16, 16, 8]  # equal lengths: as few passes as allowed
    lengths = {0: 250, 1: 3, 2: 4, 3: 3, 4: 240, 5: 5, 6: 4, 7: 3}
    groups = budget_groups(lengths, 8192)
    assert sorted(row for group in groups for row in group) == list(range(8))  # each row once
    assert [1, 3, 7, 2, 6, 5] in groups  # the short texts together, not padded to 250
    assert not any(0 in group and 1 in group for group in groups)
    cost = sum(PASS_COST_TOKENS + len(g) * max(lengths[r] for r in g) for g in groups)
    one_pass = PASS_COST_TOKENS + 8 * 250
    assert cost < one_pass / 3
    capped = budget_groups({0: 600, 1: 700, 2: 5, 3: 5}, 1000)
    assert all(len(g) == 1 or len(g) * max((600, 700, 5, 5)[r] for r in g) <= 1000 for g in capped)
    assert [0] in capped and [1] in capped  # longer than half the budget: a pass each
