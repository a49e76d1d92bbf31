"""The batch-invariance harness: each input's answer must not depend on what it was batched with.

For a template, ``make_cases`` draws a seeded random mix of requests: one to several rows,
texts from one word to several times the model's limit, empty and odd texts, and per-row
options (every optional input, different per row). ``check`` sends them all at once from
many threads over one protocol (so Triton's dynamic batcher mixes them), then every row
again alone, and compares each row's answer with (a) its answer alone and (b) transformers
run in-process on that row only (``Oracle``). Tolerances are per task (``TOLERANCE``).

The harness talks to Triton with raw tritonclient requests, so per-row options that the
SDK never mixes (a different TOP_K on each row of one request) are sent too.
"""

from __future__ import annotations

import json
import queue
import random
import threading
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    pipeline,
)
from tritonclient.utils import InferenceServerException

from harness.tiny_models import WORDS
from tritonhf import Client

# Absolute tolerance per task: scores and vectors differ by float rounding between batch shapes.
TOLERANCE = {
    "text-classification": 1e-4,
    "feature-extraction": 1e-4,
    "zero-shot-classification": 1e-4,
    "ner": 1e-4,
    "text-ranking": 1e-4,
    "question-answering": 1e-4,
    "fill-mask": 1e-4,
    "image-classification": 1e-4,
    "zero-shot-image-classification": 1e-4,
    "automatic-speech-recognition": 0.0,  # texts exactly; the duration within a millisecond
}
TEXT_INPUT = {"text-ranking": "QUERY", "question-answering": "QUESTION"}  # else TEXT
ODD_TEXTS = ["", "   \t ", "😀🎬 wonderful 👍", "東京で映画を見た", "café naïve e\u0301", "مرحبا بالعالم", "a"]
LABEL_POOL = ["positive", "negative", "city", "food", "music", "sport", "the movie", "London"]
AGGREGATIONS = ["none", "simple", "first", "average", "max"]


FILES = ("IMAGE", "AUDIO")  # inputs that carry an encoded file (Row.text describes it)
SPEECH = "automatic-speech-recognition"
COMMON_AUDIO_OPTIONS = ["LANGUAGE", "TIMESTAMPS", "MAX_TOKENS"]
PROMPT_POOL = ["the meeting", "Dr. Okafor and Ms. Lindqvist", "ok so", "previously on the show"]


@dataclass
class Row:
    text: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Case:
    model: str
    task: str
    rows: list[Row]

    def describe(self) -> str:
        def options(row: Row) -> dict[str, Any]:
            return {name: value for name, value in row.options.items() if name not in FILES}  # bytes say nothing

        return f"{self.model}: " + " | ".join(f"{row.text[:40]!r} {options(row)}" for row in self.rows)


def random_text(rng: random.Random, limit_words: int) -> str:
    roll = rng.random()
    if roll < 0.12:
        return rng.choice(ODD_TEXTS)
    long = roll < 0.3  # longer than the model takes: one to four times its limit
    count = rng.randint(limit_words, 4 * limit_words) if long else rng.randint(1, max(2, limit_words // 3))
    words = [rng.choice(WORDS) for _ in range(count)]
    if rng.random() < 0.5:  # names where NER can find them, sometimes far beyond the limit
        words.insert(rng.randint(0, len(words)), rng.choice(["alice visited paris", "bob works at acme in london"]))
    return " ".join(words)


def make_cases(
    task: str, model: str, seed: int, count: int, limit_words: int, prompts: Sequence[str] = ()
) -> list[Case]:
    """``count`` requests for ``model``; each optional input is absent or given for every row of a request.
    ``prompts``: the model's prompt names, which feature-extraction rows then name now and then ("" for the
    model's default), each row its own."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        rows = [Row(random_text(rng, limit_words)) for _ in range(rng.choice([1, 1, 2, 3, 4]))]
        if task == "feature-extraction" and prompts and rng.random() < 0.6:
            for row in rows:
                row.options["PROMPT_NAME"] = rng.choice(["", *prompts])
        if task == "text-classification" and rng.random() < 0.6:
            for row in rows:
                row.options["TOP_K"] = rng.randint(1, 3)
        if task == "text-classification" and rng.random() < 0.35:  # pairs (NLI, cross-encoders) among singles
            for row in rows:
                row.options["TEXT_PAIR"] = random_text(rng, limit_words).strip() or "a second text"
        if task == "feature-extraction" and rng.random() < 0.6:
            for row in rows:
                row.options["NORMALIZE"] = rng.random() < 0.5
        if task == "feature-extraction" and rng.random() < 0.35:  # TEI's /embed_all: every token's vector
            for row in rows:
                row.options["ALL_TOKENS"] = rng.random() < 0.7
        if task == "zero-shot-classification" and rng.random() < 0.7:
            for row in rows:
                row.options["CANDIDATE_LABELS"] = rng.sample(LABEL_POOL, rng.randint(1, 4))
        if task == "ner" and rng.random() < 0.7:
            for row in rows:
                row.options["AGGREGATION"] = rng.choice(AGGREGATIONS)
        if task == "text-ranking":
            for row in rows:
                row.options["DOCUMENTS"] = [
                    random_text(rng, limit_words).strip() or "x" for _ in range(rng.randint(1, 5))
                ]
        if task == "question-answering":
            top_k = rng.random() < 0.5
            for row in rows:
                row.options["CONTEXT"] = random_text(rng, limit_words).strip() or "alice visited paris"
                if top_k:
                    row.options["TOP_K"] = rng.randint(1, 3)
        if task == "fill-mask":
            top_k = rng.random() < 0.5
            for row in rows:
                words = row.text.split() or ["the"]
                words.insert(rng.randint(0, len(words)), "[MASK]")
                row.text = " ".join(words)
                if top_k:
                    row.options["TOP_K"] = rng.randint(1, 6)
        if task not in ("ner", "question-answering") and rng.random() < 0.25:
            for row in rows:
                row.options["TRUNCATE"] = rng.random() < 0.7
        cases.append(Case(model, task, rows))
    return cases


def make_image_cases(model: str, seed: int, count: int, task: str = "image-classification") -> list[Case]:
    """``count`` image-classification requests of one to four images each: random sizes (1 to 300 pixels a
    side), formats (PNG, JPEG, WebP, GIF, BMP) and modes (RGB, RGBA, L, P); now and then a broken image
    (truncated, not an image, a decompression bomb), which must fail its own request only. ``Row.text``
    describes the image; its bytes are ``options["IMAGE"]``."""
    from harness.images import bomb_png, random_image

    rng = random.Random(seed)
    broken = [
        lambda: (random_image(rng)[0][:40], "truncated"),
        lambda: (b"not an image at all", "garbage"),
        lambda: (bomb_png(7000, 7000), "bomb 7000x7000"),
    ]
    cases = []
    for _ in range(count):
        rows = []
        for _ in range(rng.choice([1, 1, 2, 3, 4])):
            data, description = rng.choice(broken)() if rng.random() < 0.08 else random_image(rng)
            rows.append(Row(description, {"IMAGE": data}))
        if task == "image-classification" and rng.random() < 0.6:
            top_k = rng.randint(1, 6)
            for row in rows:
                row.options["TOP_K"] = top_k if rng.random() < 0.5 else rng.randint(1, 6)  # per row, sometimes
        if task == "zero-shot-image-classification" and rng.random() < 0.7:  # else the model's own labels
            for row in rows:
                row.options["CANDIDATE_LABELS"] = rng.sample(LABEL_POOL, rng.randint(1, 4))
        cases.append(Case(model, task, rows))
    return cases


def make_audio_cases(model: str, seed: int, count: int, long_files: int = 1, options: bool = True) -> list[Case]:
    """``count`` speech requests of one to three files each: random formats (WAV, FLAC, OGG Vorbis and Opus,
    MP3), rates (8-48 kHz), channels and lengths (0.3-6 s; ``long_files`` of them past the 30 s window); per
    row, sometimes a language (else detected), translate, timestamps, a prompt, a token limit, or seeded
    sampling; now and then a broken file (truncated, not audio, silent), which must fail its own request only.
    ``Row.text`` describes the file; its bytes are ``options["AUDIO"]``. ``options=False``: files only (a CTC
    model takes none of those options)."""
    from harness.audio import encode, random_audio, sound

    rng = random.Random(seed)
    broken = [
        lambda: (random_audio(rng)[0][:40], "truncated"),
        lambda: (b"not audio at all" * 4, "garbage"),
        lambda: (encode(np.zeros((rng.randint(100, 9000), 1), np.float32)), "silent"),
    ]
    long_at = set(rng.sample(range(count), min(long_files, count)))
    defaults: dict[str, Any] = {"LANGUAGE": "", "TASK": "transcribe", "TIMESTAMPS": False, "PROMPT": "",
                                "MAX_TOKENS": 64, "TEMPERATURE": 0.0, "SEED": 0}  # fmt: skip
    choices: dict[str, Any] = {
        "LANGUAGE": lambda: rng.choice(["en", "de", "fr", ""]),
        "TASK": lambda: rng.choice(["transcribe", "translate"]),
        "TIMESTAMPS": lambda: rng.random() < 0.5,
        "PROMPT": lambda: rng.choice(PROMPT_POOL),
        "MAX_TOKENS": lambda: rng.randint(1, 64),
        "TEMPERATURE": lambda: rng.choice([0.0, 0.7]),
        "SEED": lambda: rng.randint(0, 1000),
    }
    cases = []
    for index in range(count):
        rows = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            data, description = rng.choice(broken)() if rng.random() < 0.08 else random_audio(rng, longest=6.0)
            rows.append(Row(description, {"AUDIO": data}))
        if index in long_at:
            seconds = rng.uniform(32, 45)
            rows[0] = Row(f"FLAC 16000 Hz x1 {seconds:.1f} s", {"AUDIO": encode(sound(rng, seconds), 16000, "FLAC")})
        # Triton batches only requests that send the same inputs: most send the common set (values per row),
        # some none, a few another mix (translate, a prompt, seeded sampling), which run in smaller batches.
        draw = rng.random()
        names = COMMON_AUDIO_OPTIONS if draw < 0.6 else [] if draw < 0.8 else rng.sample(list(choices), 3)
        if not options:
            names = ["TIMESTAMPS"] if draw < 0.5 else []
        if "SEED" in names and "TEMPERATURE" not in names:
            names = [*names, "TEMPERATURE"]
        for name in names:
            for row in rows:
                row.options[name] = choices[name]() if rng.random() < 0.7 else defaults[name]
        cases.append(Case(model, SPEECH, rows))
    return cases


# ---------------------------------------------------------------------------- the wire


def tensors(case: Case) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    file_input = next((name for name in FILES if name in case.rows[0].options), None)
    if file_input is not None:
        arrays[file_input] = np.array([[row.options[file_input]] for row in case.rows], dtype=object)
    else:
        text_input = TEXT_INPUT.get(case.task, "TEXT")
        arrays[text_input] = np.array([[row.text.encode()] for row in case.rows], dtype=object)
    names = {name for row in case.rows for name in row.options} - set(FILES)
    for name in names:
        values = [row.options[name] for row in case.rows]
        if name in ("CANDIDATE_LABELS", "DOCUMENTS"):
            width = max(len(v) for v in values)
            arrays[name] = np.array([[x.encode() for x in v] + [b""] * (width - len(v)) for v in values], dtype=object)
        elif name in ("AGGREGATION", "CONTEXT", "TEXT_PAIR", "LANGUAGE", "TASK", "PROMPT", "PROMPT_NAME"):
            arrays[name] = np.array([[v.encode()] for v in values], dtype=object)
        elif name in ("TOP_K", "MAX_TOKENS"):
            arrays[name] = np.array([[v] for v in values], dtype=np.int32)
        elif name == "TEMPERATURE":
            arrays[name] = np.array([[v] for v in values], dtype=np.float32)
        elif name == "SEED":
            arrays[name] = np.array([[v] for v in values], dtype=np.int64)
        else:
            arrays[name] = np.array([[v] for v in values], dtype=np.bool_)
    return arrays


OUTPUTS = {
    "text-classification": ["LABELS", "SCORES", "TRUNCATED"],
    "feature-extraction": ["EMBEDDING", "TRUNCATED"],
    "zero-shot-classification": ["LABELS", "SCORES", "TRUNCATED"],
    "ner": ["ENTITIES"],
    "text-ranking": ["SCORES", "ORDER", "TRUNCATED"],
    "question-answering": ["ANSWER", "SCORE", "START", "END"],
    "fill-mask": ["TOKENS", "SCORES", "TRUNCATED"],
    "image-classification": ["LABELS", "SCORES"],
    "zero-shot-image-classification": ["LABELS", "SCORES", "EMBEDDING"],
    SPEECH: ["TEXT", "SPOKEN_LANGUAGE", "DURATION", "SEGMENTS"],
}


class Wire:
    """Raw tritonclient over one protocol; one HTTP client per thread (tritonclient.http is gevent-based).
    ``streamed``: a decoupled speech model (--stream), called over a gRPC stream of its own per request."""

    def __init__(self, url: str, streamed: bool = False) -> None:
        self.protocol, address = url.split("://", 1)
        self.address = address
        self.streamed = streamed
        self._local = threading.local()
        self._grpc = grpcclient.InferenceServerClient(address) if self.protocol == "grpc" else None

    def _client(self) -> Any:
        if self._grpc is not None:
            return self._grpc
        if getattr(self._local, "client", None) is None:
            self._local.client = httpclient.InferenceServerClient(self.address, network_timeout=300)
        return self._local.client

    def send(self, case: Case) -> list[dict[str, Any]] | str:
        """Each row's answer, or the request's error message."""
        module = grpcclient if self.protocol == "grpc" else httpclient
        inputs = []
        for name, array in tensors(case).items():
            tensor = module.InferInput(name, list(array.shape), "BYTES" if array.dtype == object else _dtype(array))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        names = [*OUTPUTS[case.task], *_token_outputs(case)]
        outputs = [module.InferRequestedOutput(name) for name in names]
        try:
            if self.streamed:
                result = self._stream(case, inputs)
            else:
                result = self._client().infer(case.model, inputs, outputs=outputs)
        except InferenceServerException as exc:
            return f"{exc.status()}: {exc.message()}"
        found = [
            decode_row(case.task, {name: result.as_numpy(name)[index] for name in OUTPUTS[case.task]})
            for index in range(len(case.rows))
        ]
        if names != OUTPUTS[case.task]:  # a row that asked: its own first TOKENS rows of the padded matrix
            counts, matrix = result.as_numpy("TOKENS").reshape(-1), result.as_numpy("TOKEN_EMBEDDINGS")
            for index, row in enumerate(case.rows):
                if row.options.get("ALL_TOKENS"):
                    found[index]["tokens"] = np.asarray(matrix[index][: int(counts[index])], dtype=np.float32)
        return found

    def _stream(self, case: Case, inputs: list[Any]) -> Any:
        """The last (whole) response of a streamed request, once its parts are checked to add up to it: each
        row's segments, part after part, are the whole answer's."""
        client = grpcclient.InferenceServerClient(self.address)
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer(case.model, inputs, enable_empty_final_response=True)
            parts, last = [], None
            while True:
                result, error = answers.get(timeout=300)
                if error is not None:
                    raise error
                response = result.get_response()
                names = {output.name for output in response.outputs}
                if "TEXT" in names:
                    last = result
                elif "TEXT_DELTA" in names:
                    parts.append([json.loads(value) for value in result.as_numpy("SEGMENTS").reshape(-1)])
                final = response.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    break
        finally:
            client.stop_stream()
            client.close()
        assert last is not None, f"a stream ended without its whole answer <- {case.describe()}"
        for row, whole in enumerate(last.as_numpy("SEGMENTS").reshape(-1)):
            sent = [segment for part in parts for segment in part[row]]
            assert sent == json.loads(whole), f"row {row}'s parts do not add up to its answer <- {case.describe()}"
        return last


def _token_outputs(case: Case) -> list[str]:
    """The outputs of TEI's /embed_all when a row of ``case`` asks for every token's vector (ALL_TOKENS)."""
    return ["TOKENS", "TOKEN_EMBEDDINGS"] if any(row.options.get("ALL_TOKENS") for row in case.rows) else []


def _dtype(array: np.ndarray) -> str:
    return {"int32": "INT32", "bool": "BOOL", "float32": "FP32", "int64": "INT64"}[str(array.dtype)]


def decode_row(task: str, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    if task == SPEECH:
        return {"text": outputs["TEXT"][0].decode(), "language": outputs["SPOKEN_LANGUAGE"][0].decode(),
                "duration": float(outputs["DURATION"][0]), "segments": json.loads(outputs["SEGMENTS"][0])}  # fmt: skip
    if task == "ner":
        return {"entities": json.loads(outputs["ENTITIES"][0])}
    if task == "text-ranking":
        count = int((outputs["ORDER"] >= 0).sum())
        return {
            "scores": [float(v) for v in outputs["SCORES"][:count]],
            "truncated": [bool(v) for v in outputs["TRUNCATED"][:count]],
        }
    if task == "question-answering":
        spans = [(a.decode(), float(s), int(b), int(e)) for a, s, b, e in
                 zip(outputs["ANSWER"], outputs["SCORE"], outputs["START"], outputs["END"]) if int(b) >= 0]  # fmt: skip
        return {"spans": spans}
    if task == "fill-mask":
        pairs = [(t.decode(), float(v)) for t, v in zip(outputs["TOKENS"], outputs["SCORES"]) if t]
        return {
            "labels": [p[0] for p in pairs],
            "scores": [p[1] for p in pairs],
            "truncated": bool(outputs["TRUNCATED"][0]),
        }
    truncated = bool(outputs["TRUNCATED"][0]) if "TRUNCATED" in outputs else False
    if task == "feature-extraction":
        return {"vector": np.asarray(outputs["EMBEDDING"], dtype=np.float32), "truncated": truncated}
    labels = [label.decode() for label in outputs["LABELS"]]
    pairs = [(label, float(score)) for label, score in zip(labels, outputs["SCORES"]) if label]
    found = {"labels": [p[0] for p in pairs], "scores": [p[1] for p in pairs], "truncated": truncated}
    if "EMBEDDING" in outputs:  # an image-text model: the image's vector too
        found["vector"] = np.asarray(outputs["EMBEDDING"], dtype=np.float32)
    return found


# ---------------------------------------------------------------------------- transformers, one row at a time


class Oracle:
    """What transformers answers for one row alone, as the template promises to."""

    def __init__(self, task: str, folder: Path, params: dict[str, str]) -> None:
        self.task, self.params = task, params
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.limit = min(self.tokenizer.model_max_length, 512)
        if task == "text-classification":
            self.model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
            config = self.model.config
            self.labels = [config.id2label[i] for i in range(config.num_labels)]
        elif task == "ner":
            model = AutoModelForTokenClassification.from_pretrained(folder).eval()
            self.pipe = pipeline("token-classification", model=model, tokenizer=self.tokenizer)
            self.stride = int(params.get("stride", max(1, self.limit // 4)))
        elif task == "text-ranking":
            self.model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        elif task == "question-answering":
            self.model = AutoModelForQuestionAnswering.from_pretrained(folder).eval()
            self.stride = int(params.get("stride", max(1, self.limit // 4)))
        elif task == "fill-mask":
            self.model = AutoModelForMaskedLM.from_pretrained(folder).eval()
        else:
            self.model = AutoModel.from_pretrained(folder).eval()
        self.label_vectors: dict[str, np.ndarray] = {}

    def _tokens(self, text: str, pair: str | None = None) -> tuple[dict[str, torch.Tensor], bool]:
        if pair:  # a pair's second text is cut, never its first (runtime.encode)
            full = len(self.tokenizer(text, pair)["input_ids"])
            encoded = self.tokenizer(text, pair, truncation="only_second", max_length=self.limit, return_tensors="pt")
            return encoded, full > self.limit
        full = len(self.tokenizer(text)["input_ids"])
        return self.tokenizer(text, truncation=True, max_length=self.limit, return_tensors="pt"), full > self.limit

    def _pooled(self, text: str) -> tuple[np.ndarray, bool]:
        encoded, truncated = self._tokens(text)
        with torch.inference_mode():
            hidden = self.model(**encoded).last_hidden_state[0]
        vector = hidden[0] if self.params.get("pooling") == "cls" else hidden.mean(0)
        return vector.numpy(), truncated

    def answer(self, row: Row) -> dict[str, Any] | str:
        """The row's answer, or "refused" when the template must refuse it (too long with TRUNCATE=false)."""
        if self.task == "ner":
            return {"entities": self._entities(row.text, row.options.get("AGGREGATION", "simple"))}
        if self.task in ("text-ranking", "question-answering"):
            if len(self.tokenizer(row.text)["input_ids"]) + 4 > self.limit:
                return "refused"  # the query or question alone leaves no room for the rest
            if self.task == "question-answering" and not (row.text.strip() and row.options["CONTEXT"].strip()):
                return "refused"
        if self.task == "text-ranking":
            return self._rerank(row)
        if self.task == "question-answering":
            spans = qa_spans(self.model, self.tokenizer, row.text, row.options["CONTEXT"], self.limit, self.stride,
                             row.options.get("TOP_K", 1))  # fmt: skip
            return {"spans": spans}
        pair = row.options.get("TEXT_PAIR") or None
        if pair and self.limit - len(self.tokenizer(row.text)["input_ids"]) - 2 < 2:
            return "refused"  # the first text leaves no room for its pair: nothing can be cut
        _, truncated = self._tokens(row.text, pair)
        if truncated and row.options.get("TRUNCATE") is False:
            return "refused"
        if self.task == "text-classification":
            encoded, _ = self._tokens(row.text, pair)
            with torch.inference_mode():
                probabilities = torch.softmax(self.model(**encoded).logits[0], -1).numpy()
            order = np.argsort(-probabilities, kind="stable")[: row.options.get("TOP_K", len(self.labels))]
            return {
                "labels": [self.labels[i] for i in order],
                "scores": probabilities[order].tolist(),
                "truncated": truncated,
            }
        if self.task == "fill-mask":
            encoded, _ = self._tokens(row.text)
            ids = encoded["input_ids"][0]
            if int((ids == self.tokenizer.mask_token_id).sum()) != 1:
                return "refused"  # the mask was cut off (or never there)
            position = int((ids == self.tokenizer.mask_token_id).nonzero()[0])
            with torch.inference_mode():
                probabilities = torch.softmax(self.model(**encoded).logits[0, position], -1).numpy()
            best = np.argsort(-probabilities, kind="stable")[: row.options.get("TOP_K", 5)]
            labels = [self.tokenizer.decode([int(i)]).strip() for i in best]
            return {"labels": labels, "scores": probabilities[best].tolist(), "truncated": truncated}
        vector, _ = self._pooled(row.text)
        if self.task == "feature-extraction":
            if row.options.get("NORMALIZE", self.params.get("normalize", "true") == "true"):
                vector = vector / max(np.linalg.norm(vector), 1e-12)
            found = {"vector": vector, "truncated": truncated}
            if row.options.get("ALL_TOKENS"):  # the last hidden state of each token, not normalised
                encoded, _ = self._tokens(row.text)
                with torch.inference_mode():
                    found["tokens"] = self.model(**encoded).last_hidden_state[0].numpy()
            return found
        labels = row.options.get("CANDIDATE_LABELS") or self.params["labels"].split(",")
        template = self.params.get("hypothesis_template", "This example is {}.")
        sentences = np.stack([self._label_vector(template.format(label)) for label in labels])
        logits = sentences @ (vector / max(np.linalg.norm(vector), 1e-12)) * float(self.params.get("scale", "20"))
        scores = np.exp(logits - logits.max())
        scores /= scores.sum()
        order = np.argsort(-scores, kind="stable")
        return {"labels": [labels[i] for i in order], "scores": scores[order].tolist(), "truncated": truncated}

    def _rerank(self, row: Row) -> dict[str, Any] | str:
        scores, cut = [], []
        for document in row.options["DOCUMENTS"]:
            full = len(self.tokenizer(row.text, document)["input_ids"])
            encoded = self.tokenizer(row.text, document, truncation="only_second", max_length=self.limit,
                                     return_tensors="pt")  # fmt: skip
            with torch.inference_mode():
                scores.append(float(torch.sigmoid(self.model(**encoded).logits[0, 0])))
            cut.append(full > self.limit)
        if any(cut) and row.options.get("TRUNCATE") is False:
            return "refused"
        return {"scores": scores, "truncated": cut}

    def _label_vector(self, sentence: str) -> np.ndarray:
        if sentence not in self.label_vectors:
            vector, _ = self._pooled(sentence)
            self.label_vectors[sentence] = vector / max(np.linalg.norm(vector), 1e-12)
        return self.label_vectors[sentence]

    def _entities(self, text: str, aggregation: str) -> list[dict[str, Any]]:
        """transformers' own pipeline over the whole text in windows (its stride mode), one text alone."""
        from transformers.pipelines.token_classification import AggregationStrategy

        params = {"return_overflowing_tokens": True, "padding": True, "stride": self.stride}
        windows = self.pipe.preprocess(text, tokenizer_params=params, is_split_into_words=False)
        outputs = [self.pipe.forward(inputs) for inputs in windows]
        found = self.pipe.postprocess(outputs, aggregation_strategy=AggregationStrategy(aggregation))
        return [
            {
                "entity_group": e.get("entity_group", e.get("entity")),
                "word": e["word"],
                "start": int(e["start"]),
                "end": int(e["end"]),
                "score": float(e["score"]),
            }
            for e in found
        ]


class SentenceOracle:
    """What sentence-transformers' ``encode`` answers for one feature-extraction row alone (its prompt, Dense
    layers, pooling), normalised when the row asks; a model without a Normalize module, so that both answers
    of NORMALIZE are the library's."""

    task = "feature-extraction"

    def __init__(self, folder: Path) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        assert not any(type(module).__name__ == "Normalize" for module in self.model), "NORMALIZE=false: pre-Normalize"
        self.tokenizer = self.model.tokenizer
        self.limit = self.model.max_seq_length

    def answer(self, row: Row) -> dict[str, Any] | str:
        name = row.options.get("PROMPT_NAME") or self.model.default_prompt_name
        prompt = self.model.prompts.get(name, "") if name else ""
        truncated = len(self.tokenizer(prompt + row.text)["input_ids"]) > self.limit
        if truncated and row.options.get("TRUNCATE") is False:
            return "refused"
        vector = self.model.encode([row.text], prompt_name=name or None)[0]
        if row.options.get("NORMALIZE", False):
            vector = vector / max(np.linalg.norm(vector), 1e-12)
        found: dict[str, Any] = {"vector": vector, "truncated": truncated}
        if row.options.get("ALL_TOKENS"):  # the transformer's last hidden state of the prompted text's tokens
            tokens = self.model.encode([row.text], prompt_name=name or None, output_value="token_embeddings")[0]
            found["tokens"] = np.asarray(tokens)
        return found


class ImageRowOracle:
    """transformers on one image alone (harness.images.ImageOracle, or ClipOracle for an image-text model with
    its default ``labels``); "refused" for an image the template must refuse (the runtime's own decoder decides
    what is unusable: damaged, unsupported, too many pixels)."""

    def __init__(self, folder: Path, labels: list[str] | None = None) -> None:
        from harness.images import ClipOracle, ImageOracle

        self.oracle = ImageOracle(folder) if labels is None else None
        self.clip = ClipOracle(folder) if labels is not None else None
        self.labels = labels or []

    def answer(self, row: Row) -> dict[str, Any] | str:
        from tritonhf.runtime.common import BadRequest
        from tritonhf.runtime.images import decode_image

        try:
            decode_image(row.options["IMAGE"])
        except BadRequest:
            return "refused"
        if self.clip is not None:
            return self.clip.ranked(row.options["IMAGE"], row.options.get("CANDIDATE_LABELS") or self.labels)
        assert self.oracle is not None
        return self.oracle.ranked(row.options["IMAGE"], row.options.get("TOP_K"))


class AudioRowOracle:
    """transformers on one file alone (harness.audio.AudioOracle, with the row's options); "refused" for a file
    the template must refuse (the runtime's own decoder decides: damaged, unsupported, silent, too long)."""

    def __init__(self, folder: Path, int8: bool = False, ctc: bool = False, own_sampling: bool = False) -> None:
        """``ctc``: a CTC model (wav2vec2), answered by transformers' own ASR pipeline (harness.audio.CtcOracle).
        ``own_sampling``: an engine with its own random generator (CTranslate2): a sampling row has no
        transformers answer (None), only its answer alone to equal."""
        self.own_sampling = own_sampling
        from harness.audio import AudioOracle, CtcOracle

        self.ctc = CtcOracle(folder) if ctc else None
        self.oracle = AudioOracle(folder, int8=int8) if not ctc else None
        self.rate = (self.ctc or self.oracle).rate

    def answer(self, row: Row) -> dict[str, Any] | str | None:
        from tritonhf.runtime.audio import decode_audio
        from tritonhf.runtime.common import BadRequest

        try:
            decode_audio(row.options["AUDIO"], self.rate)
        except BadRequest:
            return "refused"
        get = row.options.get
        if self.ctc is not None:
            found = self.ctc.transcribe(row.options["AUDIO"], timestamps=get("TIMESTAMPS", False))
            return {"text": found["text"], "language": "", "duration": found["duration"]}
        assert self.oracle is not None
        if self.own_sampling and get("TEMPERATURE", 0.0) > 0:
            return None
        return self.oracle.transcribe(
            row.options["AUDIO"], language=get("LANGUAGE") or None, task=get("TASK", "transcribe"),
            timestamps=get("TIMESTAMPS", False), prompt=get("PROMPT") or None, max_tokens=get("MAX_TOKENS"),
            temperature=get("TEMPERATURE", 0.0), seed=get("SEED", 0),
        )  # fmt: skip


# ---------------------------------------------------------------------------- comparing


def compare(
    task: str, got: dict[str, Any] | str, expected: dict[str, Any] | str, tolerance: float | None = None
) -> str | None:
    """None when ``got`` matches ``expected`` within ``tolerance`` (default: the task's), else what differs."""
    tolerance = TOLERANCE[task] if tolerance is None else tolerance
    if expected == "refused" or isinstance(got, str) or isinstance(expected, str):
        refused = isinstance(got, str) and ("400" in got or "INVALID_ARGUMENT" in got)
        return None if expected == "refused" and refused else f"got {got!r:.200}, expected {expected!r:.200}"
    if task == SPEECH:  # texts exactly (greedy, or sampling with the row's seed); segments where both have them
        keys = ["text", "language", "segments"] if "segments" in expected else ["text", "language"]
        differs = [key for key in keys if got[key] != expected[key]]
        if abs(got["duration"] - expected["duration"]) > 1e-3:
            differs.append("duration")
        return None if not differs else f"{differs}: {[got[k] for k in differs]} != {[expected[k] for k in differs]}"
    if task == "text-ranking":
        if got["truncated"] != expected["truncated"] or len(got["scores"]) != len(expected["scores"]):
            return f"{got} != {expected}"
        worst = float(np.abs(np.array(got["scores"]) - np.array(expected["scores"])).max())
        return None if worst <= tolerance else f"relevance differs by {worst:.2e}"
    if task == "question-answering":
        a, b = got["spans"], expected["spans"]
        if len(a) != len(b):
            return f"{len(a)} answers, expected {len(b)}"
        for x, y in zip(a, b):
            if abs(x[1] - y[1]) > tolerance or ((x[0], x[2], x[3]) != (y[0], y[2], y[3]) and not _tie(y[1], b)):
                return f"answers {a} != {b}"
        return None
    if task == "ner":
        a, b = got["entities"], expected["entities"]
        keys = [(e["entity_group"], e["start"], e["end"], e["word"]) for e in a]
        if keys != [(e["entity_group"], e["start"], e["end"], e["word"]) for e in b]:
            return f"entities {keys} != {[(e['entity_group'], e['start'], e['end'], e['word']) for e in b]}"
        worst = max((abs(x["score"] - y["score"]) for x, y in zip(a, b)), default=0.0)
        return None if worst <= tolerance else f"entity scores differ by {worst:.2e}"
    if got["truncated"] != expected["truncated"]:
        return f"truncated {got['truncated']} != {expected['truncated']}"
    if task == "zero-shot-image-classification":
        worst = float(np.abs(np.asarray(got["vector"]) - np.asarray(expected["vector"])).max())
        if worst > tolerance:
            return f"image vector differs by {worst:.2e}"
    if task == "feature-extraction":
        if ("tokens" in got) != ("tokens" in expected):
            return f"token vectors {'sent' if 'tokens' in got else 'missing'}, expected the other"
        if "tokens" in expected:
            if np.shape(got["tokens"]) != np.shape(expected["tokens"]):
                return f"token vectors of shape {np.shape(got['tokens'])}, expected {np.shape(expected['tokens'])}"
            worst = float(np.abs(got["tokens"] - expected["tokens"]).max(initial=0.0))
            if worst > tolerance:
                return f"token vectors differ by {worst:.2e}"
        worst = float(np.abs(np.asarray(got["vector"]) - np.asarray(expected["vector"])).max())
        return None if worst <= tolerance else f"vector differs by {worst:.2e}"
    if len(got["scores"]) != len(expected["scores"]):
        return f"{len(got['scores'])} labels, expected {len(expected['scores'])}"
    worst = float(np.abs(np.array(got["scores"]) - np.array(expected["scores"])).max())
    if worst > tolerance:
        return f"scores differ by {worst:.2e}: {got['scores']} vs {expected['scores']}"
    # Labels must agree wherever the scores are not a near-tie.
    for index, (label, other) in enumerate(zip(got["labels"], expected["labels"])):
        neighbours = expected["scores"][max(index - 1, 0) : index + 2]
        tie = len(neighbours) > 1 and min(abs(x - y) for x in neighbours for y in neighbours if x is not y) <= tolerance
        if label != other and not tie:
            return f"labels {got['labels']} != {expected['labels']}"
    return None


def _tie(score: float, spans: list[tuple[str, float, int, int]]) -> bool:
    """Another span scores the same (within rounding): their order is a coin toss."""
    return sum(abs(score - other[1]) <= 1e-6 for other in spans) > 1


def qa_spans(
    model: Any, tokenizer: Any, question: str, context: str, limit: int, stride: int, top_k: int
) -> list[tuple]:
    """The best spans of ``context``, every window through the model alone (what the QA template promises)."""
    room = limit - len(tokenizer(question)["input_ids"]) - 2
    encoded = tokenizer(question, context, truncation="only_second", max_length=limit, stride=min(stride, room // 2),
                        return_overflowing_tokens=True, return_offsets_mapping=True)  # fmt: skip
    found: dict[tuple[int, int], float] = {}
    for index in range(len(encoded["input_ids"])):
        ids = encoded["input_ids"][index]
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        context_mask = np.array([s == 1 for s in encoded.sequence_ids(index)])
        probabilities = []
        for logits in (out.start_logits[0].numpy(), out.end_logits[0].numpy()):
            masked = np.where(context_mask, logits, -np.inf)
            exp = np.exp(masked - masked.max())
            probabilities.append(exp / exp.sum())
        offsets = encoded["offset_mapping"][index]
        for s in np.argsort(-probabilities[0])[:20]:
            for e in np.argsort(-probabilities[1])[:20]:
                if context_mask[s] and context_mask[e] and s <= e < s + 30:
                    key = (int(offsets[s][0]), int(offsets[e][1]))
                    found[key] = max(found.get(key, 0.0), float(probabilities[0][s] * probabilities[1][e]))
    ranked = sorted(found.items(), key=lambda item: (-item[1], item[0]))[:top_k]
    return [(context[s:e], score, s, e) for (s, e), score in ranked]


@dataclass
class Report:
    requests: int = 0
    rows: int = 0
    refused: int = 0
    mismatches: list[str] = field(default_factory=list)


def check(
    url: str,
    cases: Sequence[Case],
    oracle: Oracle | SentenceOracle | ImageRowOracle | AudioRowOracle,
    threads: int = 16,
    alone_tolerance: float | None = None,
    versus_transformers: bool = True,
    transformers_tolerance: float | None = None,
    streamed: bool = False,
) -> Report:
    """Send ``cases`` concurrently, then each row alone; compare both with the oracle.

    ``alone_tolerance`` tightens the batched-vs-alone comparison; ``versus_transformers=False``
    compares with transformers only for refusals (a quantized model is not fp32 transformers);
    ``transformers_tolerance`` is another engine's agreement with PyTorch (the gate it passed)."""
    wire = Wire(url, streamed)
    with ThreadPoolExecutor(threads) as pool:
        together = list(pool.map(wire.send, cases))
    report = Report(requests=len(cases))
    for case, answers in zip(cases, together):
        expected = [oracle.answer(row) for row in case.rows]
        report.rows += len(case.rows)
        singles = [wire.send(Case(case.model, case.task, [row])) for row in case.rows]
        if isinstance(answers, str):  # the whole request was refused: it must be for one of its rows
            report.refused += 1
            if not any(e == "refused" for e in expected):
                report.mismatches.append(f"refused but every row is fine: {answers[:200]} <- {case.describe()}")
            continue
        for index in range(len(case.rows)):
            single = singles[index] if isinstance(singles[index], str) else singles[index][0]
            references = [("alone", single, alone_tolerance)]
            wanted = expected[index]
            if versus_transformers and wanted is not None:  # None: no transformers answer to compare with
                references.append(("transformers", wanted, transformers_tolerance))
            for what, reference, tolerance in references:
                problem = compare(case.task, answers[index], reference, tolerance)
                if problem:
                    report.mismatches.append(f"row {index} vs {what}: {problem} <- {case.describe()}")
    return report


# ---------------------------------------------------------------------------- generation


@dataclass
class Prompt:
    text: str
    options: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0  # when it starts, after the first one (staggered arrivals)


def make_prompts(
    seed: int, count: int, context_words: int, penalties: bool = False, defaults: bool = False
) -> list[Prompt]:
    """Prompts from one word to beyond the context; greedy or seeded sampling; some stop strings;
    about half ask to truncate (a too-long one is cut), the others are refused when too long. ``penalties``
    (text-generation): some greedy ones penalised (presence, frequency, repetition), some sampled with top_k and
    min_p, among the plain ones. ``defaults``: a quarter send no max_tokens (the template's default answers)."""
    rng = random.Random(seed)
    prompts = []
    for index in range(count):
        roll = rng.random()
        words = rng.randint(context_words, 2 * context_words) if roll < 0.15 else rng.randint(1, context_words // 4)
        text = "" if roll > 0.95 else " ".join(rng.choice(WORDS) for _ in range(words))
        options: dict[str, Any] = {"max_tokens": rng.randint(1, 24)}
        if rng.random() < 0.3:
            options.update(temperature=0.8, top_p=0.9, seed=rng.randint(0, 1000))
        if rng.random() < 0.2:
            options["stop"] = [rng.choice(["e", "th", " a"])]
        if penalties and index % 4 == 1:  # penalised greedy (or penalised sampling) among the plain ones
            options.update(presence_penalty=rng.uniform(-2, 2), frequency_penalty=rng.uniform(0, 2),
                           repetition_penalty=rng.uniform(0.8, 1.6))  # fmt: skip
        if penalties and index % 4 == 3:
            options.update(temperature=0.9, top_k=rng.randint(1, 20), min_p=0.05, seed=rng.randint(0, 1000))
        delay = rng.uniform(0, 0.3)
        if rng.random() < 0.5:  # the rest are refused when too long
            options["truncate"] = True
        if defaults and index % 4 == 2:
            del options["max_tokens"]
        prompts.append(Prompt(text, options, delay=delay))
    return prompts


PENALTIES = ("presence_penalty", "frequency_penalty", "repetition_penalty")


class GenerationOracle:
    """Greedy generation with transformers, one prompt alone; the template's context rules applied."""

    def __init__(self, folder: Path, versus_transformers: bool = True) -> None:
        """``versus_transformers`` False: a quantized engine, whose rows are compared with themselves alone."""
        from transformers import AutoModelForCausalLM

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder).eval()
        self.context = min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)
        self.versus_transformers = versus_transformers

    def answer(self, prompt: Prompt) -> str | None:
        """The text, "refused" for a request that must be refused, None when sampling (no oracle)."""
        ids = self.tokenizer(prompt.text)["input_ids"] or [self.tokenizer.bos_token_id]
        limit = prompt.options["max_tokens"]
        over = len(ids) + limit - self.context
        if over > 0 and not prompt.options.get("truncate"):
            return "refused"
        if not self.versus_transformers or {"seed", *PENALTIES} & set(prompt.options):
            return None  # sampled or penalised: compared with itself alone
        ids = ids[max(0, over) :]
        with torch.inference_mode():
            out = self.model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                max_new_tokens=limit,
                do_sample=False,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        text = self.tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
        for stop in prompt.options.get("stop", []):
            if stop in text:
                text = text[: text.index(stop)]
        return text


def check_generation(url: str, model: str, prompts: Sequence[Prompt], oracle: Any) -> Report:
    """All prompts as concurrent streams with staggered starts, then each alone; compare."""
    import time as clock

    from tritonhf import Client, InvalidInputError

    def stream(client: Client, prompt: Prompt, wait: float) -> str:
        clock.sleep(wait)
        try:
            return "".join(client.generate(prompt.text, model=model, stream=True, **prompt.options))
        except InvalidInputError as exc:
            return f"refused: {exc}"

    with Client(url, timeout=120) as client:
        with ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(lambda p: stream(client, p, p.delay), prompts))
        alone = [stream(client, prompt, 0.0) for prompt in prompts]
    report = Report(requests=len(prompts), rows=len(prompts))
    for prompt, got, single in zip(prompts, together, alone):
        expected = oracle.answer(prompt)
        where = f"{prompt.text[:40]!r} {prompt.options}"
        if expected == "refused":
            report.refused += 1
            if not (got.startswith("refused") and single.startswith("refused") and "context length" in got):
                report.mismatches.append(f"must be refused (context): {got[:120]!r} <- {where}")
            continue
        if got != single:
            report.mismatches.append(f"batched {got!r} != alone {single!r} <- {where}")
        if expected is not None and got != expected:
            report.mismatches.append(f"served {got!r} != transformers {expected!r} <- {where}")
    return report


class Seq2SeqOracle:
    """Plain greedy decoding with transformers, one text alone (a too-long input is refused, or cut to the
    encoder's limit when the prompt asks to truncate); without max_tokens, the template's default: 128 tokens, at
    most the decoder's learned positions less one."""

    def __init__(self, folder: Path) -> None:
        from transformers import AutoModelForSeq2SeqLM

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        self.context = self.tokenizer.model_max_length
        positions = getattr(self.model.config, "max_position_embeddings", None)
        self.default_tokens = min(128, positions - 1) if positions else 128

    def answer(self, prompt: Prompt) -> str | None:
        if len(self.tokenizer(prompt.text)["input_ids"]) > self.context and not prompt.options.get("truncate"):
            return "refused"
        if "seed" in prompt.options:
            return None
        encoded = self.tokenizer(prompt.text, truncation=True, max_length=self.context, return_tensors="pt")
        greedy = {"do_sample": False, "num_beams": 1, "forced_eos_token_id": None, "no_repeat_ngram_size": 0}
        with torch.inference_mode():
            tokens = prompt.options.get("max_tokens", self.default_tokens)
            out = self.model.generate(**encoded, max_new_tokens=tokens, **greedy)
        text = self.tokenizer.decode(out[0], skip_special_tokens=True)
        for stop in prompt.options.get("stop", []):
            if stop in text:
                text = text[: text.index(stop)]
        return text


def _counts(client: Client, model: str) -> tuple[int, int]:
    stats = client.statistics(model)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"]), int(stats["execution_count"])


def check_batched(
    http_url: str,
    url: str,
    model: str,
    cases: list[Case],
    oracle: Oracle | SentenceOracle | ImageRowOracle | AudioRowOracle,
    **options: Any,
) -> None:
    """``check`` the cases, and that Triton really batched them (else the test proved nothing). On a machine
    busy enough that the concurrent requests reached Triton one at a time, the round is checked and then run
    again, at most three rounds; every round's answers are checked."""
    rounds = 3
    for _ in range(rounds):
        with Client(http_url) as client:
            requests_before, executions_before = _counts(client, model)
            report = check(url, cases, oracle, **options)
            requests_after, executions_after = _counts(client, model)
        assert not report.mismatches, f"{len(report.mismatches)} mismatches:\n" + "\n".join(report.mismatches[:8])
        assert report.rows > report.requests > 0
        concurrent_requests = report.requests - report.refused
        sent = requests_after - requests_before
        assert sent >= concurrent_requests
        if executions_after - executions_before < sent:
            return
    raise AssertionError(f"Triton batched nothing in {rounds} rounds: the test proved nothing")


# ---------------------------------------------------------------------------- generation on a real model

# Chat questions for a real instruction model (SmolLM2-135M-Instruct in the tests): a tiny random model rarely meets
# a near-tie between two tokens, a real one does within a few dozen tokens, so only a real one shows an engine whose
# answers move with their batch-mates (0/8 equal to solo on one CPU once, with the seeds on tiny models green).
QUESTIONS = (
    "Tell me about the sea in three sentences.",
    "What is the capital of France and why is it famous?",
    "Write a haiku about autumn leaves.",
    "Explain photosynthesis to a child.",
    "List three uses of copper.",
    "Why is the sky blue?",
    "Give me a recipe for pancakes.",
    "What does a compiler do?",
)
REAL_TOKENS = 96


@dataclass
class Stream:
    """One chat stream: its messages and options, when it starts, and whether its client leaves early."""

    question: str
    options: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0
    cancel_after: int | None = None  # the client closes the stream after this many chunks
    images: tuple[bytes, ...] = ()  # an image chat's, before the question in its message

    def describe(self) -> str:
        pictures = f" +{len(self.images)} image(s)" if self.images else ""
        return f"{self.question[:40]!r}{pictures} {self.options}" + (" (cancelled)" if self.cancel_after else "")

    def messages(self) -> list[dict[str, Any]]:
        if not self.images:
            return [{"role": "user", "content": self.question}]
        parts = [{"type": "image", "image": image} for image in self.images]
        return [{"role": "user", "content": [*parts, {"type": "text", "text": self.question}]}]


def at_once(questions: Sequence[str] = QUESTIONS) -> list[Stream]:
    """Every question greedy, sent at the same moment."""
    return [Stream(q, {"max_tokens": REAL_TOKENS, "temperature": 0}) for q in questions]


def staggered_mix(
    seed: int, solo: Mapping[str, str], context_words: int, least_temperature: bool = True
) -> list[Stream]:
    """8 streams arriving 0.25 s apart, in a seeded order: greedy ones, a seeded sample, one with a stop string
    taken from its own greedy answer (``solo``), a prompt past the context with ``truncate``, a stream its client
    cancels after a few chunks, and (``least_temperature``: where the engine answers it) a seeded sample at FP32's
    least normal temperature, whose logits divided by it overflow FP32."""
    rng = random.Random(seed)
    questions = rng.sample(list(QUESTIONS), len(QUESTIONS))
    streams = at_once(questions)
    special = rng.sample(range(len(streams)), 5)
    sampled, stopped, long, cancelled, coldest = (streams[index] for index in special)
    # a seed from the upper half of the 64-bit range, as getrandbits(64) draws half the time: it travels as a negative
    # int64 and must come back as the same seed, here among batch-mates
    sampled.options.update(temperature=0.8, top_p=0.9, seed=2**63 + rng.getrandbits(63))
    stopped.options["stop"] = [stop_word(solo[stopped.question], rng)]
    long.question = " ".join(rng.choice(WORDS) for _ in range(context_words + 500)) + " " + long.question
    long.options.update(truncate=True, max_tokens=32)
    cancelled.cancel_after = rng.randint(2, 6)
    if least_temperature:
        coldest.options.update(temperature=FP32_LEAST_NORMAL, seed=rng.getrandbits(63))
    for index, stream in enumerate(streams):
        stream.delay = 0.25 * index
    return streams


def stop_word(answer: str, rng: random.Random) -> str:
    """A word of ``answer`` (its fourth to thirteenth) at its first occurrence in the text: the stream then stops
    after at least three words. A word that the text before it already holds would stop the stream there instead
    (``In`` that also opens the answer stopped it before its first word)."""
    words = answer.split()
    fresh = [i for i in range(3, min(len(words), 13)) if words[i] not in " ".join(words[:i])]
    return words[rng.choice(fresh)] if fresh else "."


# Bounded schemas for a 135M model: left free, it repeats digits until max_tokens.
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"topic": {"type": "string", "maxLength": 24}, "serious": {"type": "boolean"},
                   "mood": {"enum": ["happy", "sad", "calm"]}},
    "required": ["topic", "serious", "mood"],
    "additionalProperties": False,
}  # fmt: skip
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time now.",
                                              "parameters": {"type": "object", "properties": {}}}}  # fmt: skip


def constrained_mix(seed: int, solo: Mapping[str, str]) -> list[Stream]:
    """8 streams arriving 0.25 s apart, in a seeded order: answers held to a JSON Schema (greedy, and a seeded sample
    its client cancels), tool calls (a named function, "required", and "auto"), one asking for log-probabilities,
    beside free greedy, seeded and stop-string streams (a grammar in one row changes nothing in the
    others, and a cancelled constrained stream frees its slot as any other does)."""
    rng = random.Random(seed)
    questions = rng.sample(list(QUESTIONS), len(QUESTIONS))
    streams = at_once(questions)
    schema = {"response_format": ANSWER_SCHEMA, "max_tokens": 64}
    tools = {"tools": [WEATHER_TOOL, TIME_TOOL], "max_tokens": 64}
    kinds = [
        schema,
        {**schema, "temperature": 0.7, "seed": rng.getrandbits(64)},
        {**tools, "tool_choice": "get_weather"},
        {**tools, "tool_choice": "required"},
        {**tools, "tool_choice": "auto", "logprobs": 0},
        {"temperature": 0.9, "top_p": 0.95, "seed": 2**63 + rng.getrandbits(63)},
    ]
    for stream, extra in zip(streams, kinds):
        stream.options.update(extra)
    streams[1].cancel_after = rng.randint(2, 5)  # the seeded schema stream's client leaves
    stopped = streams[len(kinds)]
    words = solo[stopped.question].split()
    stopped.options["stop"] = [words[min(len(words) - 1, rng.randint(3, 12))]] if words else ["."]
    rng.shuffle(streams)
    for index, stream in enumerate(streams):
        stream.delay = 0.25 * index
    return streams


FP32_LEAST_NORMAL = 1.1754943508222875e-38  # the least positive normal FP32: a temperature as near 0 as it travels


def reasoning_mix(seed: int) -> list[Stream]:
    """13 chat streams to a reasoning model, arriving in a seeded order: its thinking streamed apart, turned off
    (``enable_thinking``), a JSON Schema and a required tool call that wait for the thinking to end, seeded samples
    with top_k, min_p and penalties, one at FP32's least normal temperature (its logits divided by it overflow FP32;
    the others must not feel it), and one its client cancels (each row's phase and grammar are its own)."""
    rng = random.Random(seed)
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    kinds: list[dict[str, Any]] = [
        {}, {}, off, off,
        {"response_format": ANSWER_SCHEMA}, {"response_format": ANSWER_SCHEMA, **off},
        {"tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": "required"},
        {"tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": "auto"},
        {"temperature": 0.9, "top_k": rng.randint(1, 20), "min_p": 0.05, "seed": rng.getrandbits(64)},
        {"temperature": 0.7, "seed": rng.getrandbits(64), "presence_penalty": 1.0, "repetition_penalty": 1.3},
        {"temperature": FP32_LEAST_NORMAL, "seed": rng.getrandbits(64)},
        {"frequency_penalty": 2.0, **off},
        off,
    ]  # fmt: skip
    streams = [Stream(rng.choice(QUESTIONS), {"max_tokens": 200, **kind}) for kind in kinds]
    streams[-1].cancel_after = 2  # its text so far must be the start of its text alone: one without thinking
    rng.shuffle(streams)
    for index, stream in enumerate(streams):
        stream.delay = 0.05 * index
    return streams


IMAGE_QUESTIONS = ("describe the picture", "what colour is it", "tell me a story about this", "hello world")


def image_chat_mix(seed: int, tokens: int = 24) -> list[Stream]:
    """8 chat streams to an image chat model, arriving 0.2 s apart in a seeded order: 0 to 3 images each (PNG, JPEG,
    RGBA, sizes its processor resizes differently), greedy, with a seeded sample and a stop string among them (a row's
    images, prompt length and options change nothing in the others)."""
    from harness.images import encode, picture

    rng = random.Random(seed)
    streams = []
    for index, count in enumerate([0, 1, 1, 2, 3, 0, 1, 2]):
        images = tuple(
            encode(picture(rng, rng.randint(40, 260), rng.randint(40, 260)), *rng.choice([("PNG", "RGB"),
                   ("PNG", "RGBA"), ("JPEG", "RGB")]))
            for _ in range(count)
        )  # fmt: skip
        options: dict[str, Any] = {"max_tokens": tokens, "temperature": 0}
        if index == 6:
            options.update(temperature=0.8, seed=rng.getrandbits(63))
        streams.append(Stream(rng.choice(IMAGE_QUESTIONS), options, images=images))
    streams[7].options["stop"] = ["the"]
    rng.shuffle(streams)
    for index, stream in enumerate(streams):
        stream.delay = 0.2 * index
    return streams


def check_image_chats(url: str, model: str, streams: Sequence[Stream]) -> None:
    """Each stream all at once, then staggered by its delay, equals itself alone (an AssertionError listing those that
    differ)."""
    alone = run_streams(url, model, streams, together=False)
    together = [replace(stream, delay=0.0) for stream in streams]
    mismatches = stream_mismatches(together, run_streams(url, model, together, together=True), alone)
    mismatches += stream_mismatches(streams, run_streams(url, model, streams, together=True), alone)
    assert not mismatches, f"{len(mismatches)} of {2 * len(streams)} differ:\n" + "\n".join(mismatches)


def run_streams(url: str, model: str, streams: Sequence[Stream], together: bool) -> list[str]:
    """Each stream's text, all at once (each after its delay) or one after another; a cancelled stream's text
    is what it read before its client closed it; a reasoning model's thinking first, in its markers."""
    import time as clock

    def one(client: Client, stream: Stream, wait: float) -> str:
        clock.sleep(wait)
        reply = client.chat(stream.messages(), model=model, stream=True, **stream.options)
        parts: list[str] = []
        try:
            for part in reply:
                parts.append(part)
                if stream.cancel_after is not None and len(parts) >= stream.cancel_after:
                    break
        finally:
            reply.close()
        thinking = f"<think>{reply.reasoning}</think>" if reply.reasoning else ""  # a reasoning model's, apart
        return thinking + "".join(parts)

    with Client(url, timeout=600) as client:
        if not together:
            return [one(client, stream, 0.0) for stream in streams]
        with ThreadPoolExecutor(len(streams)) as pool:
            return list(pool.map(lambda s: one(client, s, s.delay), streams))


def alone_texts(url: str, model: str, streams: Sequence[Stream], known: Mapping[str, str]) -> list[str]:
    """Each stream's text alone: ``known`` greedy answers (question -> text, from ``at_once``) where a stream is
    one of those (a cancelled one included: its text must be a prefix), the others run one after another."""
    plain = at_once()[0].options
    fresh = [s for s in streams if s.options != plain or s.question not in known]
    whole = [replace(s, cancel_after=None) for s in fresh]  # alone, a cancelled stream runs to its end
    ran = dict(zip(map(id, fresh), run_streams(url, model, whole, together=False)))
    return [ran[id(s)] if id(s) in ran else known[s.question] for s in streams]


def stream_mismatches(streams: Sequence[Stream], batched: Sequence[str], alone: Sequence[str]) -> list[str]:
    """Where a stream's batched text differs from its text alone (a cancelled one: is not a prefix of it)."""
    found = []
    for stream, got, single in zip(streams, batched, alone):
        equal = single.startswith(got) if stream.cancel_after else got == single
        if not equal or (not got and not stream.cancel_after):
            found.append(f"batched {got[-80:]!r} != alone {single[-80:]!r} <- {stream.describe()}")
    return found


def at_once_and_staggered(
    url: str, model: str, protocol: str, context_words: int = 8192, least_temperature: bool = True
) -> dict[str, str]:
    """The real-model guard: 8 greedy chat streams of 96 tokens at once, then the staggered mix (a seeded sample, a
    stop string, a prompt past the context with truncate, a cancelled stream, a sample at FP32's least normal
    temperature where the engine answers it); each must equal its answer alone (an AssertionError listing those that
    differ). The answers alone, by question."""
    streams = at_once()
    alone = run_streams(url, model, streams, together=False)
    mismatches = stream_mismatches(streams, run_streams(url, model, streams, together=True), alone)
    solo = dict(zip(QUESTIONS, alone))
    mixed = staggered_mix(zlib.crc32(f"{model}/{protocol}".encode()), solo, context_words, least_temperature)
    batched = run_streams(url, model, mixed, together=True)
    mismatches += stream_mismatches(mixed, batched, alone_texts(url, model, mixed, solo))
    assert not mismatches, f"{len(mismatches)} of {len(streams) + len(mixed)} differ:\n" + "\n".join(mismatches)
    return solo
