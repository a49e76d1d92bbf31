"""``gallery add``'s last check: the model as it will be served against the model's own library.

Before the engine is chosen (the source weights are still there), the library answers sample inputs:
sentence-transformers' ``encode`` for a sentence-transformers folder (each of its prompts too), transformers'
``pipeline`` for text classification, zero-shot classification by entailment, token classification and fill-mask,
sentence-transformers' ``CrossEncoder`` for a one-output reranker, and transformers' ``generate`` for an image chat
(greedy, on images its processor must resize: ``image_chats``). Once the repository folder
is written, its template runs in this process (``inprocess``, on the engine chosen) on the same inputs, and the
two must agree: cosine >= ``COSINE`` at the same dimension, scores within ``SCORE_TOLERANCE``. A model that does
not is refused with both figures, never served different. The comparison is written into the config.

What has no library answer to compare with is said so in the summary (an embedding model without a
sentence-transformers folder: the template's default pooling; zero-shot by embeddings: tritonhf's own method).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf.errors import GalleryError
from tritonhf.gallery import inprocess, sentence, stub
from tritonhf.gallery.listing import parameters_of_folder
from tritonhf.runtime.common import (
    PARAM_DEFAULT_PROMPT,
    PARAM_ONNX_FILE,
    PARAM_ONNX_MODEL,
    PARAM_ONNX_OUTPUT,
    PARAM_PROMPTS,
    PARAM_ZERO_SHOT_METHOD,
)

COSINE = 0.9999
SCORE_TOLERANCE = 1e-4
PARAM_REFERENCE_CHECK = "tritonhf.reference_check"
TEXTS = (
    "This movie is absolutely wonderful",
    "short",
    "Alice met Bob in Paris to talk about the new office.",
    "The train from Berlin to Munich was delayed by an hour, and nobody told the passengers why.",
)
LABELS = ("sports", "politics", "technology")
FILL_TOP_K = 10  # the fill-mask pipeline's candidates the served ones must be among


TASKS = (
    "feature-extraction",
    "text-classification",
    "zero-shot-classification",
    "token-classification",
    "fill-mask",
    "text-ranking",
    "image-text-to-text",
)
# The library's answers, held by a function that asks the served model the same and compares: its summary, or a
# GalleryError naming both figures.
Expected = Callable[[Path], str]


def expected(task: str, folder: Path, params: Mapping[str, str]) -> Expected | str:
    """The library's answers for ``task`` (one of ``TASKS``) on ``folder`` (the source weights), or why there are
    none (a line). A library that fails on the check's inputs is named with its error: nothing is compared, the model
    is added, and its config says so (a refusal of the model is the served answers' to make, not the library's)."""
    try:
        return _expected(task, folder, params)
    except GalleryError:
        raise
    except Exception as exc:  # the library's own failure, of any kind: reported, never a traceback
        first = (str(exc).strip().splitlines() or [""])[0]
        failure = f"{type(exc).__name__}: {first}"
        return f"the model's own library failed on the check's inputs ({failure}), so nothing was compared"


def _expected(task: str, folder: Path, params: Mapping[str, str]) -> Expected | str:
    if task == "feature-extraction":
        if not sentence.is_sentence_transformers(folder):
            return "no sentence-transformers folder: mean pooling, normalised (the template's default)"
        if importlib.util.find_spec("sentence_transformers") is None:
            return "sentence-transformers is not installed, so its encode was not compared (pip install it)"
        return _embeddings(folder, params)
    if task == "text-classification":
        return _classification(folder)
    if task == "zero-shot-classification":
        if params.get(PARAM_ZERO_SHOT_METHOD) != "entailment":
            return "zero-shot by embedding similarity: tritonhf's method, with no library answer to compare"
        return _zero_shot(folder, params)
    if task == "token-classification":
        return _entities(folder)
    if task == "fill-mask":
        return _fill_mask(folder)
    if task == "text-ranking":
        return _rerank(folder)
    if task == "image-text-to-text":
        return _image_chat(folder, params)
    return "no library comparison for this task yet"


def check(found: Expected | str, model_dir: Path) -> str:
    """Run the repository folder's template here on the reference's inputs; the comparison's summary."""
    return found if isinstance(found, str) else found(model_dir)


def _embeddings(folder: Path, params: Mapping[str, str]) -> Expected:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    names = ["", *json.loads(params.get(PARAM_PROMPTS) or "{}")]
    default = params.get(PARAM_DEFAULT_PROMPT) or None  # the model's, or the one chosen at add
    # Each text alone: the answer a text has whatever it is batched with (the template's promise).
    wanted = {
        name: np.stack([model.encode([text], prompt_name=name or default)[0] for text in TEXTS]) for name in names
    }

    def compare(model_dir: Path) -> str:
        worst, dims = 1.0, set()
        with _served(model_dir) as served:
            for name, vectors in wanted.items():
                request = {"TEXT": stub.texts(*TEXTS)}
                if name:
                    request["PROMPT_NAME"] = stub.texts(*[name] * len(TEXTS))
                got = _answer(served, request).output("EMBEDDING")
                if got.shape != vectors.shape:
                    raise GalleryError(
                        f"the served vectors have {got.shape[-1]} dimensions; sentence-transformers' encode gives "
                        f"{vectors.shape[-1]}: not served."
                    )
                cosine = (got * vectors).sum(1) / np.maximum(
                    np.linalg.norm(got, axis=1) * np.linalg.norm(vectors, axis=1), 1e-12
                )
                scale = np.linalg.norm(got, axis=1) / np.maximum(np.linalg.norm(vectors, axis=1), 1e-12)
                worst = min(worst, float(cosine.min()), float(1 - np.abs(scale - 1).max()))
                dims.add(got.shape[-1])
        prompts = f", {len(wanted) - 1} prompt(s)" if len(wanted) > 1 else ""
        summary = (
            f"served vectors against sentence-transformers' encode on {len(TEXTS)} texts{prompts}: "
            f"cosine (and length ratio) >= {worst:.6f}, {dims.pop()} dimensions"
        )
        if worst < COSINE:
            raise GalleryError(f"{summary}, below {COSINE}: not served, since its vectors would not be the model's.")
        return summary

    return compare


def _classification(folder: Path) -> Expected:
    from transformers import pipeline

    classifier: Any = pipeline("text-classification", model=str(folder), top_k=None, device="cpu")
    wanted = [{item["label"]: float(item["score"]) for item in found} for found in classifier(list(TEXTS))]

    def compare(model_dir: Path) -> str:
        with _served(model_dir) as served:
            answer = _answer(served, {"TEXT": stub.texts(*TEXTS)})
        got = [
            {label.decode() if isinstance(label, bytes) else str(label): float(score) for label, score in zip(*row)}
            for row in zip(answer.output("LABELS"), answer.output("SCORES"))
        ]
        return _scores_agree("transformers' text-classification pipeline", wanted, got)

    return compare


def _zero_shot(folder: Path, params: Mapping[str, str]) -> Expected:
    from transformers import pipeline

    classify: Any = pipeline("zero-shot-classification", model=str(folder), device="cpu")
    template = params.get("hypothesis_template", "This example is {}.")
    wanted = {
        multi: [
            dict(zip(found["labels"], map(float, found["scores"])))
            for found in (
                classify(text, candidate_labels=list(LABELS), hypothesis_template=template, multi_label=multi)
                for text in TEXTS
            )
        ]
        for multi in (False, True)
    }

    def compare(model_dir: Path) -> str:
        summaries = []
        with _served(model_dir) as served:
            for multi, expected_scores in wanted.items():
                request = {
                    "TEXT": stub.texts(*TEXTS),
                    "CANDIDATE_LABELS": np.array([[label.encode() for label in LABELS]] * len(TEXTS), dtype=object),
                    "MULTI_LABEL": np.array([[multi]] * len(TEXTS)),
                }
                answer = _answer(served, request)
                got = [
                    {label.decode() if isinstance(label, bytes) else str(label): float(score)
                     for label, score in zip(*row) if label}
                    for row in zip(answer.output("LABELS"), answer.output("SCORES"))
                ]  # fmt: skip
                summaries.append(_scores_agree(f"the zero-shot pipeline (multi_label={multi})", expected_scores, got))
        return "; ".join(summaries)

    return compare


def _entities(folder: Path) -> Expected:
    from transformers import pipeline

    tag: Any = pipeline("token-classification", model=str(folder), aggregation_strategy="simple", device="cpu")
    wanted = [[(e["entity_group"], int(e["start"]), int(e["end"]), float(e["score"])) for e in tag(t)] for t in TEXTS]

    def compare(model_dir: Path) -> str:
        with _served(model_dir) as served:
            answer = _answer(served, {"TEXT": stub.texts(*TEXTS), "AGGREGATION": stub.texts(*["simple"] * len(TEXTS))})
        got = [
            [(e["entity_group"], e["start"], e["end"], e["score"]) for e in json.loads(_text(row[0]))]
            for row in answer.output("ENTITIES")
        ]
        difference = 0.0
        for expected_row, got_row in zip(wanted, got):
            if [e[:3] for e in expected_row] != [e[:3] for e in got_row]:
                raise GalleryError(f"the served entities {got_row} are not the pipeline's {expected_row}.")
            difference = max([difference, *(abs(a[3] - b[3]) for a, b in zip(expected_row, got_row))])
        return _within(f"the token-classification pipeline (simple aggregation) on {len(TEXTS)} texts", difference)

    return compare


def _fill_mask(folder: Path) -> Expected:
    from transformers import AutoConfig, AutoTokenizer, pipeline

    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = [f"{tokenizer.mask_token} {text}" for text in TEXTS]
    vocabulary = int(getattr(AutoConfig.from_pretrained(folder), "vocab_size", 0) or len(tokenizer))
    # the best ten, or every token of a smaller vocabulary: what the model can answer
    fill: Any = pipeline("fill-mask", model=str(folder), top_k=min(FILL_TOP_K, vocabulary), device="cpu")
    wanted = [{item["token_str"].strip(): float(item["score"]) for item in fill(text)} for text in texts]

    def compare(model_dir: Path) -> str:
        with _served(model_dir) as served:
            answer = _answer(served, {"TEXT": stub.texts(*texts)})
        difference = 0.0
        for expected_row, tokens, scores in zip(wanted, answer.output("TOKENS"), answer.output("SCORES")):
            for token, score in zip(tokens, scores):  # the served best five among the pipeline's best
                name = _text(token).strip()
                if name and name not in expected_row:
                    raise GalleryError(f"the served candidate {name!r} is not among the fill-mask pipeline's.")
                if name:
                    difference = max(difference, abs(expected_row[name] - float(score)))
        return _within(f"the fill-mask pipeline on {len(texts)} texts", difference)

    return compare


def _rerank(folder: Path) -> Expected | str:
    from transformers import AutoConfig

    if AutoConfig.from_pretrained(folder).num_labels != 1:
        return "a reranker with several labels: its score is the probability of the second (no library score)"
    if importlib.util.find_spec("sentence_transformers") is None:
        return "sentence-transformers is not installed, so its CrossEncoder was not compared (pip install it)"
    from sentence_transformers import CrossEncoder

    query, documents = TEXTS[0], list(TEXTS[1:])
    wanted = [
        float(score) for score in CrossEncoder(str(folder), device="cpu").predict([(query, d) for d in documents])
    ]

    def compare(model_dir: Path) -> str:
        with _served(model_dir) as served:
            matrix = np.array([[document.encode() for document in documents]], dtype=object)
            answer = _answer(served, {"QUERY": stub.texts(query), "DOCUMENTS": matrix})
        got = [float(score) for score in answer.output("SCORES")[0][: len(documents)]]
        difference = max(abs(a - b) for a, b in zip(wanted, got))
        return _within(f"sentence-transformers' CrossEncoder on {len(documents)} pairs", difference)

    return compare


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _within(library: str, difference: float) -> str:
    summary = f"served scores against {library}: largest difference {difference:.1e}"
    if difference > SCORE_TOLERANCE:
        raise GalleryError(
            f"{summary}, above {SCORE_TOLERANCE}: not served, since its scores would not be the model's."
        )
    return summary


def _scores_agree(library: str, wanted: list[dict[str, float]], got: list[dict[str, float]]) -> str:
    difference = 0.0
    for expected_row, got_row in zip(wanted, got):
        if set(expected_row) != set(got_row):
            raise GalleryError(f"the served labels {sorted(got_row)} are not {library}'s {sorted(expected_row)}.")
        difference = max(difference, *(abs(expected_row[k] - got_row[k]) for k in expected_row))
    summary = f"served scores against {library} on {len(wanted)} texts: largest difference {difference:.1e}"
    if difference > SCORE_TOLERANCE:
        raise GalleryError(
            f"{summary}, above {SCORE_TOLERANCE}: not served, since its scores would not be the model's."
        )
    return summary


@contextlib.contextmanager
def _served(model_dir: Path) -> Iterator[Any]:
    """The repository folder's template, initialised here as Triton would; an ONNX part (a second model the
    template calls) is answered by ONNX Runtime on its model.onnx. Finalised afterwards."""
    params = parameters_of_folder(model_dir)
    part = params.get(PARAM_ONNX_MODEL)
    if part:
        stub.bls_models[part] = _onnx_part(model_dir.parent / part / "1" / params.get(PARAM_ONNX_FILE, "model.onnx"),
                                           params.get(PARAM_ONNX_OUTPUT, "logits"))  # fmt: skip
    model = inprocess.instantiate(model_dir)
    try:
        yield model
    finally:
        if hasattr(model, "finalize"):
            model.finalize()
        if part:
            stub.bls_models.pop(part, None)


def _onnx_part(path: Path, output: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(feeds: dict[str, Any]) -> dict[str, Any]:
        (result,) = session.run([output], {name: np.asarray(value) for name, value in feeds.items()})
        return {output: result}

    return run


def _answer(model: Any, inputs: dict[str, Any]) -> Any:
    (response,) = inprocess.answers(model, [stub.InferenceRequest(**inputs)])
    if response.has_error():
        raise GalleryError(f"the served model refused the reference check's request: {response.error().message()}")
    return response


CHAT_TOKENS = 16  # greedy tokens per image chat compared


def check_images() -> list[bytes]:
    """Images the image chat check sends: a 200x150 PNG with an alpha channel and a 90x300 JPEG, sizes a Qwen-VL
    processor resizes (neither side is a multiple of its patches), made here from a fixed seed."""
    import io

    from PIL import Image

    rng = np.random.default_rng(7)
    shown = []
    for size, mode, kind in (((200, 150), "RGBA", "PNG"), ((90, 300), "RGB", "JPEG")):
        pixels = rng.integers(0, 256, (size[1], size[0], len(mode)), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels, mode).save(buffer, kind)
        shown.append(buffer.getvalue())
    return shown


def image_chats() -> list[tuple[list[dict[str, Any]], list[bytes]]]:
    """(messages, their images in order) of the image chat check: text only, one image, two in one message, and an
    image in an earlier turn."""
    png, jpeg = check_images()
    image = {"type": "image"}

    def ask(text: str, images: int = 0) -> dict[str, Any]:
        return {"role": "user", "content": [*[image] * images, {"type": "text", "text": text}]}

    return [
        ([{"role": "user", "content": "hello world"}], []),
        ([ask("describe the picture", 1)], [png]),
        ([ask("what colour is it", 2)], [png, jpeg]),
        ([ask("describe the picture", 1), {"role": "assistant", "content": "a cat"}, ask("and the dog")], [jpeg]),
    ]


def library_image_chat(model: Any, tokenizer: Any, vision: Any, messages: list[Any], images: list[bytes],
                       tokens: int) -> tuple[int, str]:  # fmt: skip
    """transformers' answer to one image chat: (prompt tokens, greedy text). The images are read as transformers'
    ``load_image`` reads a file and given to the image processor as they are (it resizes them); the prompt is the
    chat template's, each placeholder widened to its image's tokens by the processor's grid."""
    import torch

    from tritonhf.runtime.images import decode_image

    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    pictures = [decode_image(data) for data in images]
    extra: dict[str, Any] = {}
    counts: list[int] = []
    if pictures:
        processed = vision.processor(images=pictures, return_tensors="pt")
        extra = {"pixel_values": processed["pixel_values"], "image_grid_thw": processed["image_grid_thw"]}
        counts = [vision.family.tokens(grid) for grid in processed["image_grid_thw"]]
    encoded = tokenizer(vision.widen(prompt, counts), return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**encoded, **extra, max_new_tokens=tokens, do_sample=False)
    new = out[0, encoded["input_ids"].shape[1] :].tolist()
    return encoded["input_ids"].shape[1], tokenizer.decode(new, skip_special_tokens=True)


def _image_chat(folder: Path, params: Mapping[str, str]) -> Expected:
    import transformers

    from tritonhf.runtime.vision import Vision

    config = json.loads((folder / "config.json").read_text())
    vision = Vision(str(folder), config.get("model_type", ""), dict(params))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    auto: Any = transformers.AutoModelForImageTextToText  # untyped in transformers
    model = auto.from_pretrained(folder, dtype="float32").eval()
    chats = image_chats()
    wanted = [library_image_chat(model, tokenizer, vision, messages, images, CHAT_TOKENS) for messages, images in chats]

    def compare(model_dir: Path) -> str:
        with _served(model_dir) as served:
            got = [_streamed(served, _chat_inputs(messages, images)) for messages, images in chats]
        same = sum(pair == (prompt, text) for pair, (prompt, text) in zip(wanted, got))
        summary = (
            f"greedy answers against transformers' generate on {len(chats)} chats (text only, one image, two, one in "
            f"an earlier turn; images the processor resizes), {CHAT_TOKENS} tokens: {same}/{len(chats)} equal, "
            "prompt tokens counted alike"
        )
        if same < len(chats):
            differ = next(i for i, pair in enumerate(got) if pair != wanted[i])
            raise GalleryError(
                f"{summary}; chat {differ}: served {got[differ]!r}, transformers {wanted[differ]!r}: not served, "
                "since its answers would not be the model's."
            )
        return summary

    return compare


def _chat_inputs(messages: list[Any], images: list[bytes]) -> dict[str, Any]:
    """The template's inputs for one greedy image chat of ``CHAT_TOKENS`` tokens."""
    inputs = {
        "text_input": stub.texts(json.dumps(messages)),
        "chat": np.array([[True]]),
        "max_tokens": np.array([[CHAT_TOKENS]], dtype=np.int32),
        "temperature": np.array([[0.0]], dtype=np.float32),
    }
    if images:
        inputs["images"] = np.array([images], dtype=object)
    return inputs


def _streamed(model: Any, inputs: dict[str, Any]) -> tuple[int, str]:
    """A decoupled generation request's (prompt tokens, text), its streamed responses joined."""
    (request,) = [stub.InferenceRequest(**inputs)]
    inprocess.streamed(model, request)
    text, prompt = [], 0
    for response in request.sender.responses:
        error = response.error()
        if error is not None:
            raise GalleryError(f"the served model refused the reference check's chat: {error.message()}")
        names = {tensor.name() for tensor in response.output_tensors}
        if "text_output" in names:
            text.append(_text(response.output("text_output").reshape(-1)[0]))
        if "prompt_tokens" in names:
            prompt = int(response.output("prompt_tokens").reshape(-1)[0])
    return prompt, "".join(text)
