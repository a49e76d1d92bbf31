"""The rerank, question-answering, fill-mask and text2text templates, on tiny local models, against
the same models run in-process one input at a time (several requests per execute, as batching does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fake_pb_utils as pb
import numpy as np
import pytest
import torch
from template_harness import answers, instantiate
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from harness.invariance import qa_spans
from tritonhf.gallery import AddRequest, add_model

texts = pb.texts


def _add(tmp_path: Path, task: str, source: Path, **extra: Any) -> Path:
    return add_model(AddRequest(task=task, source=str(source), repository=tmp_path / "repo", **extra))


def _matrix(*rows: list[str]) -> np.ndarray:
    width = max(len(row) for row in rows)
    return np.array([[v.encode() for v in row] + [b""] * (width - len(row)) for row in rows], dtype=object)


# ------------------------------------------------------------------ text-ranking


def relevance(folder: Path, query: str, document: str) -> float:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        logit = model(**tokenizer(query, document, truncation="only_second", return_tensors="pt")).logits[0, 0]
    return float(torch.sigmoid(logit))


def test_rerank_scores_each_pair_as_alone_and_orders_them(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "rerank", tiny["cross-encoder"]))
    docs = [["the cat sat", "stock markets", "a kitten", "the movie was great " * 30], ["paris", "london"]]
    one = pb.InferenceRequest(QUERY=texts("a cat", "a city"), DOCUMENTS=_matrix(*docs))
    empty = pb.InferenceRequest(QUERY=texts("x"), DOCUMENTS=_matrix([""]))
    strict = pb.InferenceRequest(QUERY=texts("x"), DOCUMENTS=_matrix(["movie " * 200]), TRUNCATE=np.array([[False]]))
    first, refused, too_long = answers(model, [one, empty, strict])
    for row, (query, row_docs) in enumerate(zip(("a cat", "a city"), docs)):
        expected = [relevance(tiny["cross-encoder"], query, doc) for doc in row_docs]
        np.testing.assert_allclose(first.output("SCORES")[row, : len(row_docs)], expected, atol=1e-5)
        assert list(first.output("ORDER")[row, : len(row_docs)]) == sorted(
            range(len(row_docs)), key=lambda i: -expected[i]
        )
    assert list(first.output("ORDER")[1, 2:]) == [-1, -1], "padding of the shorter row"
    assert bool(first.output("TRUNCATED")[0, 3]) and not bool(first.output("TRUNCATED")[0, 0])
    assert "DOCUMENTS" in refused.error().message()
    assert "64 tokens" in too_long.error().message()


# ------------------------------------------------------------------ question-answering


def best_spans(folder: Path, question: str, context: str, top_k: int = 1) -> list[tuple]:
    model = AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    return qa_spans(model, AutoTokenizer.from_pretrained(folder), question, context, 64, 16, top_k)


def test_question_answering_spans_and_offsets_across_windows(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "question-answering", tiny["qa"]))
    short = ("who visited paris", "alice visited paris with bob")
    long_context = "the movie was very good and " * 25 + "alice visited paris with bob"
    one = pb.InferenceRequest(QUESTION=texts(short[0], "who visited"), CONTEXT=texts(short[1], long_context),
                              TOP_K=np.array([[1], [3]], dtype=np.int32))  # fmt: skip
    empty = pb.InferenceRequest(QUESTION=texts("who"), CONTEXT=texts(""))
    missing = pb.InferenceRequest(QUESTION=texts("who"))
    first, refused, absent = answers(model, [one, empty, missing])
    for row, (question, context, k) in enumerate(((*short, 1), ("who visited", long_context, 3))):
        expected = best_spans(tiny["qa"], question, context, top_k=k)
        got = [(first.output("ANSWER")[row, i].decode(), float(first.output("SCORE")[row, i]),
                int(first.output("START")[row, i]), int(first.output("END")[row, i])) for i in range(k)]  # fmt: skip
        assert [(g[0], g[2], g[3]) for g in got] == [(e[0], e[2], e[3]) for e in expected]
        np.testing.assert_allclose([g[1] for g in got], [e[1] for e in expected], atol=1e-5)
        for text, _, start, end in got:
            assert context[start:end] == text
    assert "CONTEXT" in refused.error().message() and "CONTEXT" in absent.error().message()


# ------------------------------------------------------------------ fill-mask


def test_fill_mask_top_tokens_and_one_mask_per_text(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(_add(tmp_path, "fill-mask", tiny["masked-lm"]))
    tokenizer = AutoTokenizer.from_pretrained(tiny["masked-lm"])
    reference = AutoModelForMaskedLM.from_pretrained(tiny["masked-lm"]).eval()
    sentences = ["the cat [MASK] on the mat", "alice visited [MASK]"]
    good = pb.InferenceRequest(TEXT=texts(*sentences), TOP_K=np.array([[3], [5]], dtype=np.int32))
    none = pb.InferenceRequest(TEXT=texts("no mask here"))
    two = pb.InferenceRequest(TEXT=texts("[MASK] and [MASK]"))
    answered, no_mask, two_masks = answers(model, [good, none, two])
    for row, (sentence, k) in enumerate(zip(sentences, (3, 5))):
        encoded = tokenizer(sentence, return_tensors="pt")
        position = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0])
        with torch.inference_mode():
            probs = torch.softmax(reference(**encoded).logits[0, position], -1).numpy()
        best = np.argsort(-probs, kind="stable")[:k]
        assert [t.decode() for t in answered.output("TOKENS")[row, :k]] == [tokenizer.decode([i]).strip() for i in best]
        np.testing.assert_allclose(answered.output("SCORES")[row, :k], probs[best], atol=1e-5)
    assert "has 0 [MASK]" in no_mask.error().message() and "has 2 [MASK]" in two_masks.error().message()


def test_a_fill_mask_vocabulary_smaller_than_the_checks_top_k_is_added_and_checked(tmp_path: Path) -> None:
    """A BERT whose vocabulary (5 tokens) is smaller than the library check's candidates: the pipeline is asked for
    every token it has, the served answers are compared with them, and the model is added and served."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    from tritonhf.gallery.listing import parameters_of_folder

    folder = tmp_path / "five"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend = Tokenizer(models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = [("[CLS]", 2), ("[SEP]", 3)]
    backend.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=special)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        model_max_length=32)  # fmt: skip
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)  # fmt: skip
    BertForMaskedLM(config).eval().save_pretrained(folder)
    added = _add(tmp_path, "fill-mask", folder)
    check = parameters_of_folder(added)["tritonhf.reference_check"]
    assert check.startswith("served scores against the fill-mask pipeline"), check
    (answer,) = answers(instantiate(added), [pb.InferenceRequest(TEXT=texts("[MASK] word"))])
    assert not answer.has_error() and len([t for t in answer.output("TOKENS")[0] if t]) <= 5


def test_a_library_that_fails_on_the_checks_inputs_is_named_not_a_traceback(
    tmp_path: Path, tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library check cannot run (the pipeline raises inside itself): the model is added, its config names the
    library's failure, nothing was compared."""
    import transformers

    from tritonhf.gallery.listing import parameters_of_folder

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("selected index k out of range\nmore lines")

    monkeypatch.setattr(transformers, "pipeline", broken)
    added = _add(tmp_path, "fill-mask", tiny["masked-lm"])
    check = parameters_of_folder(added)["tritonhf.reference_check"]
    assert check == (
        "the model's own library failed on the check's inputs (RuntimeError: selected index k out of range), "
        "so nothing was compared"
    )


# ------------------------------------------------------------------ text2text-generation


@pytest.fixture
def seq2seq(tmp_path: Path, tiny: dict[str, Path]) -> Any:
    model = instantiate(_add(tmp_path, "summarization", tiny["seq2seq"]))
    model.finalize()  # no background thread: the tests run waves themselves
    return model


def generated(folder: Path, text: str, max_tokens: int, cut_to: int | None = None) -> str:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    out = model.generate(
        **tokenizer(text, return_tensors="pt", truncation=cut_to is not None, max_length=cut_to),
        max_new_tokens=max_tokens,
        do_sample=False,
        num_beams=1,
        forced_eos_token_id=None,
        no_repeat_ngram_size=0,
    )  # fmt: skip  (plain greedy decoding, what the template does)
    return tokenizer.decode(out[0], skip_special_tokens=True)


def _streamed(request: pb.InferenceRequest) -> str:
    assert request.sender.closed
    return "".join(r.output("text_output")[0, 0].decode() for r in request.sender.responses if not r.has_error())


def _gen(prompt: str, **options: Any) -> pb.InferenceRequest:
    dtypes = {"max_tokens": np.int32, "temperature": np.float32, "seed": np.int64, "truncate": np.bool_}
    inputs: dict[str, Any] = {"text_input": texts(prompt)}
    inputs.update({k: np.array([[v]], dtype=dtypes[k]) for k, v in options.items()})
    return pb.InferenceRequest(**inputs)


def test_text2text_a_wave_of_prompts_each_equal_generate(seq2seq: Any, tiny: dict[str, Path]) -> None:
    prompts = ["the movie was great", "alice visited paris with bob and carol", "i"]
    requests = [_gen(p, max_tokens=10) for p in prompts]
    seq2seq.execute(requests)
    seq2seq.run([seq2seq.waiting.popleft() for _ in range(len(seq2seq.waiting))])
    for request, prompt in zip(requests, prompts):
        assert _streamed(request) == generated(tiny["seq2seq"], prompt, 10)
        assert request.sender.responses[-1].output("finish_reason")[0, 0].decode() in ("stop", "length")
    bad = _gen("x", max_tokens=0)
    seq2seq.execute([bad])
    assert "max_tokens" in bad.sender.responses[0].error().message() and bad.sender.closed


def test_text2text_a_too_long_input_is_refused_unless_truncate(seq2seq: Any, tiny: dict[str, Path]) -> None:
    long = "the movie was great " * 200
    refused, cut = _gen(long, max_tokens=4), _gen(long, max_tokens=4, truncate=True)
    seq2seq.execute([refused, cut])
    message = refused.sender.responses[0].error().message()
    assert "context length" in message and str(seq2seq.max_input) in message and refused.sender.closed
    seq2seq.run([seq2seq.waiting.popleft() for _ in range(len(seq2seq.waiting))])
    tokenizer = AutoTokenizer.from_pretrained(tiny["seq2seq"])
    last = cut.sender.responses[-1]
    assert last.output("prompt_tokens")[0, 0] == seq2seq.max_input
    assert last.output("prompt_tokens_cut")[0, 0] == len(tokenizer(long)["input_ids"]) - seq2seq.max_input
    expected = generated(tiny["seq2seq"], long, 4, cut_to=seq2seq.max_input)
    assert _streamed(cut) == expected, "cut as transformers cuts: the input's start"


def test_text2text_cancelled_rows_leave_the_wave(seq2seq: Any, tiny: dict[str, Path]) -> None:
    gone, stays = _gen("the movie was great", max_tokens=30), _gen("alice visited", max_tokens=8)
    gone.cancelled = True
    seq2seq.execute([gone, stays])
    seq2seq.run([seq2seq.waiting.popleft() for _ in range(2)])
    assert gone.sender.closed and not gone.sender.responses
    assert _streamed(stays) == generated(tiny["seq2seq"], "alice visited", 8)
