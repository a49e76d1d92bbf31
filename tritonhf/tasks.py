"""The gallery's tasks and, per task, its tensor signature.

This is the single place that knows tensor names, datatypes and shapes: the gallery
builds ``config.pbtxt`` from it, ``gallery validate`` checks configs against it, and the
sdk reads it to encode requests and decode responses. Dims exclude the batch axis.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonhf.errors import UnknownTaskError
from tritonhf.runtime.common import (
    PARAM_BACKEND,
    PARAM_BACKEND_REASON,
    PARAM_BATCH_INVARIANT,
    PARAM_CALIBRATION,
    PARAM_DEVICE,
    PARAM_ENGINE,
    PARAM_GGUF_FILE,
    PARAM_MATRYOSHKA,
    PARAM_MAX_BATCH_TOKENS,
    PARAM_ONNX_FILE,
    PARAM_ONNX_INPUTS,
    PARAM_ONNX_MODEL,
    PARAM_ONNX_OUTPUT,
    PARAM_OPENVINO_MODEL,
    PARAM_PART_OF,
    PARAM_REASONING,
    PARAM_SOURCE,
    PARAM_TASK,
    PARAM_THREADS,
    PARAM_TRUST_REMOTE_CODE,
    PARAM_VERSION,
    PARAM_WEIGHTS,
    RUNTIME_DIR,
    VENDORED_WEIGHTS_DIR,
)
from tritonhf.runtime.images import DEFAULT_MAX_IMAGE_PIXELS, PARAM_MAX_IMAGE_PIXELS

# Every numeric option's range, stated once in the runtime (the templates check them too); the SDK and the gateway
# read them from here.
from tritonhf.runtime.ranges import (
    ANSWERS_MAX,
    AUDIO_RATE_MAX,
    AUDIO_RATE_MIN,
    AUDIO_TEMPERATURE_MAX,
    CANDIDATES_MAX,
    CHOICES_MAX,
    COMPLETION_LOGPROBS_MAX,
    INT32_MAX,
    LOGIT_BIAS_MAX,
    LOGIT_BIAS_TOKENS,
    MAX_TOKENS_MIN,
    MIN_P_MAX,
    PENALTY_MAX,
    REPETITION_PENALTY_MAX,
    REPETITION_PENALTY_MIN,
    ROLES,
    SEED_MAX,
    TEMPERATURE_MAX,
    TOP_K_MIN,
    TOP_LOGPROBS_MAX,
    TOP_P_MAX,
    TOP_P_MIN,
    seed_to_wire,
)
from tritonhf.runtime.tools import MAX_SCHEMA_BYTES, MAX_TOOLS, TOOL_NAME
from tritonhf.runtime.vision import (
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_IMAGES,
    PARAM_MAX_IMAGE_BYTES,
    PARAM_MAX_IMAGES,
)
from tritonhf.runtime.vision import (
    IMAGE_TASK as IMAGE_CHAT,
)

# TOP_K for "every label": the templates return as many as the model has (the SDK's classify without top_k, TEI's
# /predict and a model URL's text-classification ask for this).
ALL_LABELS = 10_000
# A native ONNX model's part: NAME__onnx beside NAME (gallery add --backend onnx); listings hide it.
ONNX_PART_SUFFIX = "__onnx"
ONNX_MODEL_FILE = "model.onnx"  # the file an ONNX export writes, and the one a native part's version folder holds

__all__ = [
    "ALIASES",
    "ALL_LABELS",
    "ANSWERS_MAX",
    "AUDIO_RATE_MAX",
    "AUDIO_RATE_MIN",
    "AUDIO_TEMPERATURE_MAX",
    "CANDIDATES_MAX",
    "CHOICES_MAX",
    "COMPLETION_LOGPROBS_MAX",
    "DEFAULT_MAX_IMAGES",
    "DEFAULT_MAX_IMAGE_BYTES",
    "DEFAULT_MAX_IMAGE_PIXELS",
    "IMAGE_CHAT",
    "INT32_MAX",
    "LOGIT_BIAS_MAX",
    "LOGIT_BIAS_TOKENS",
    "MAX_SCHEMA_BYTES",
    "MAX_TOKENS_MIN",
    "MAX_TOOLS",
    "MIN_P_MAX",
    "ONNX_MODEL_FILE",
    "ONNX_PART_SUFFIX",
    "PARAM_BACKEND",
    "PARAM_BACKEND_REASON",
    "PARAM_BATCH_INVARIANT",
    "PARAM_CALIBRATION",
    "PARAM_DEVICE",
    "PARAM_ENGINE",
    "PARAM_GGUF_FILE",
    "PARAM_MATRYOSHKA",
    "PARAM_MAX_BATCH_TOKENS",
    "PARAM_MAX_IMAGES",
    "PARAM_MAX_IMAGE_BYTES",
    "PARAM_MAX_IMAGE_PIXELS",
    "PARAM_ONNX_FILE",
    "PARAM_ONNX_INPUTS",
    "PARAM_ONNX_MODEL",
    "PARAM_ONNX_OUTPUT",
    "PARAM_OPENVINO_MODEL",
    "PARAM_PART_OF",
    "PARAM_REASONING",
    "PARAM_SOURCE",
    "PARAM_TASK",
    "PARAM_THREADS",
    "PARAM_TRUST_REMOTE_CODE",
    "PARAM_VERSION",
    "PARAM_WEIGHTS",
    "PENALTY_MAX",
    "REPETITION_PENALTY_MAX",
    "REPETITION_PENALTY_MIN",
    "ROLES",
    "RUNTIME_DIR",
    "SEED_MAX",
    "TASKS",
    "TEMPERATURE_MAX",
    "TOOL_NAME",
    "TOP_K_MIN",
    "TOP_LOGPROBS_MAX",
    "TOP_P_MAX",
    "TOP_P_MIN",
    "VENDORED_WEIGHTS_DIR",
    "Task",
    "TensorSpec",
    "get_task",
    "seed_to_wire",
    "wire_datatype",
]


def wire_datatype(data_type: str) -> str:
    """A ModelConfig datatype as the wire (KServe v2) names it: TYPE_STRING -> BYTES, TYPE_FP32 -> FP32."""
    short = data_type.removeprefix("TYPE_")
    return "BYTES" if short == "STRING" else short


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, Triton datatype and dims (without the batch axis)."""

    name: str
    data_type: str  # a ModelConfig DataType name: TYPE_STRING, TYPE_FP32 ...
    dims: tuple[int, ...] = (1,)
    optional: bool = False
    doc: str = ""
    # What fills a row shorter than its batch-mates (templates pad with it; the SDK, merging chunks of
    # different widths, too): empty strings and 0 unless a reader tells padding from data by the value.
    pad: int | None = None

    @property
    def wire_datatype(self) -> str:
        return wire_datatype(self.data_type)


@dataclass(frozen=True)
class Task:
    """A gallery task: its template, tensors, and how it is served."""

    name: str
    summary: str
    template: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    decoupled: bool = False
    default_max_batch_size: int = 32

    @property
    def takes_images(self) -> bool:
        """Requests carry encoded images (IMAGE): the server decodes them with Pillow."""
        return any(spec.name == "IMAGE" for spec in self.inputs)

    @property
    def takes_audio(self) -> bool:
        """Requests carry encoded audio files (AUDIO): the server decodes them with libsndfile."""
        return any(spec.name == "AUDIO" for spec in self.inputs)

    def input(self, name: str) -> TensorSpec:
        return next(spec for spec in self.inputs if spec.name == name)

    def output(self, name: str) -> TensorSpec:
        return next(spec for spec in self.outputs if spec.name == name)


_TEXT = TensorSpec("TEXT", "TYPE_STRING", (1,), doc="one UTF-8 text per batch row")
_LABEL = TensorSpec("LABEL", "TYPE_STRING", (1,), doc="the best label")
_SCORE = TensorSpec("SCORE", "TYPE_FP32", (1,), doc="its score")
_LABELS = TensorSpec("LABELS", "TYPE_STRING", (-1,), doc="labels, best first")
_SCORES = TensorSpec("SCORES", "TYPE_FP32", (-1,), doc="their scores")
# The long-input policy (docs/guide.md, "Long inputs"): cut to the model's limit by default and say so;
# TRUNCATE=false makes a too-long text a 400 naming the limit instead.
_TRUNCATE = TensorSpec("TRUNCATE", "TYPE_BOOL", (1,), optional=True, doc="cut a too-long text (default true)")
# Outputs marked optional may be missing from models added by older versions; clients check the config.
_TRUNCATED = TensorSpec("TRUNCATED", "TYPE_BOOL", (1,), optional=True, doc="the text was cut to the model's limit")
_TOKENS = TensorSpec("TOKENS", "TYPE_INT32", (1,), optional=True, doc="tokens the text took (after any cut)")
_IMAGE = TensorSpec("IMAGE", "TYPE_STRING", (1,), doc="one encoded image per row: JPEG, PNG, WebP, GIF or BMP bytes")
# Generation tasks (Triton's generate extension names): sampling options in, streamed chunks out.
_SAMPLING = (
    TensorSpec("max_tokens", "TYPE_INT32", (1,), optional=True),
    TensorSpec("temperature", "TYPE_FP32", (1,), optional=True, doc="0 means greedy"),
    TensorSpec("top_p", "TYPE_FP32", (1,), optional=True),
    TensorSpec("seed", "TYPE_INT64", (1,), optional=True),
    TensorSpec("stop", "TYPE_STRING", (-1,), optional=True, doc="stop strings"),
    TensorSpec("truncate", "TYPE_BOOL", (1,), optional=True, doc="cut a prompt past the context (default: refuse)"),
)
_GENERATED = (
    TensorSpec("text_output", "TYPE_STRING", (1,), doc="one chunk of text per response"),
    TensorSpec("finish_reason", "TYPE_STRING", (1,), optional=True, doc="last response: stop|length"),
    TensorSpec("prompt_tokens", "TYPE_INT32", (1,), optional=True, doc="in the last response"),
    TensorSpec("completion_tokens", "TYPE_INT32", (1,), optional=True, doc="in the last response"),
    TensorSpec("prompt_tokens_cut", "TYPE_INT32", (1,), optional=True, doc="last response: tokens cut (truncate)"),
)

_CHAT_INPUTS = (
    TensorSpec("text_input", "TYPE_STRING", (1,), doc="the prompt, or JSON chat messages with chat=true"),
    *_SAMPLING,
    TensorSpec("chat", "TYPE_BOOL", (1,), optional=True, doc="apply the chat template"),
    TensorSpec("json_schema", "TYPE_STRING", (1,), optional=True, doc="the answer's JSON Schema"),
    TensorSpec("tools", "TYPE_STRING", (1,), optional=True, doc="JSON list of OpenAI function tools"),
    TensorSpec("tool_choice", "TYPE_STRING", (1,), optional=True, doc="auto|none|required|a tool's name"),
    TensorSpec("logprobs", "TYPE_INT32", (1,), optional=True, doc="token log-probs, N alternatives"),
    TensorSpec("presence_penalty", "TYPE_FP32", (1,), optional=True, doc="OpenAI's, -2 to 2"),
    TensorSpec("frequency_penalty", "TYPE_FP32", (1,), optional=True, doc="OpenAI's, -2 to 2"),
    TensorSpec("repetition_penalty", "TYPE_FP32", (1,), optional=True, doc="0.01 to 10; 1 is none"),
    TensorSpec("top_k", "TYPE_INT32", (1,), optional=True, doc="the k likeliest tokens; 0 or -1: all"),
    TensorSpec("min_p", "TYPE_FP32", (1,), optional=True, doc="0 to 1, relative to the likeliest"),
    TensorSpec("logit_bias", "TYPE_STRING", (1,), optional=True, doc='JSON {"token id": -100 to 100}'),
    TensorSpec("chat_template_kwargs", "TYPE_STRING", (1,), optional=True, doc="JSON, the chat template's"),
)
_CHAT_OUTPUTS = (
    *_GENERATED,
    TensorSpec("reasoning_output", "TYPE_STRING", (1,), optional=True, doc="a reasoning model's thinking"),
    TensorSpec("reasoning_tokens", "TYPE_INT32", (1,), optional=True, doc="last response: of the thinking"),
    TensorSpec("tool_calls", "TYPE_STRING", (1,), optional=True, doc="last response: JSON list of calls"),
    TensorSpec("content", "TYPE_STRING", (1,), optional=True, doc="with tool_calls: the text outside them"),
    TensorSpec("logprobs", "TYPE_STRING", (1,), optional=True, doc="JSON [token, logprob, alternatives]"),
)

TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            name="text-classification",
            summary="Label each text (sentiment, topic ...) with the model's own labels.",
            template="text_classification",
            inputs=(
                _TEXT,
                TensorSpec("TOP_K", "TYPE_INT32", (1,), optional=True, doc="how many labels to return"),
                _TRUNCATE,
                TensorSpec("TEXT_PAIR", "TYPE_STRING", (1,), optional=True, doc="a second text per row (NLI)"),
            ),
            outputs=(_LABEL, _SCORE, _LABELS, _SCORES, _TRUNCATED),
        ),
        Task(
            name="token-classification",
            summary="Named entities with character offsets into the whole text (NER; long texts in windows).",
            template="token_classification",
            inputs=(
                _TEXT,
                TensorSpec("AGGREGATION", "TYPE_STRING", (1,), optional=True, doc="none|simple|first|average|max"),
            ),
            outputs=(TensorSpec("ENTITIES", "TYPE_STRING", (1,), doc="JSON list of entities per text"),),
        ),
        Task(
            name="feature-extraction",
            summary="One vector per text, as sentence-transformers' encode gives it (pooling, Dense, prompts).",
            template="feature_extraction",
            inputs=(
                _TEXT,
                TensorSpec("NORMALIZE", "TYPE_BOOL", (1,), optional=True, doc="L2-normalise"),
                TensorSpec("PROMPT_NAME", "TYPE_STRING", (1,), optional=True, doc="the model's prompt to put first"),
                _TRUNCATE,
                TensorSpec("ALL_TOKENS", "TYPE_BOOL", (1,), optional=True, doc="also every token's vector"),
            ),
            outputs=(
                TensorSpec("EMBEDDING", "TYPE_FP32", (-1,), doc="the vector"),
                _TRUNCATED,
                _TOKENS,
                TensorSpec(
                    "TOKEN_EMBEDDINGS",
                    "TYPE_FP32",
                    (-1, -1),
                    optional=True,
                    doc="with ALL_TOKENS: each token's vector, zero-padded to the request's longest row",
                ),
            ),
        ),
        Task(
            name="zero-shot-classification",
            summary="Score texts against candidate labels: by entailment (an NLI model) or embedding similarity.",
            template="zero_shot_classification",
            inputs=(
                _TEXT,
                TensorSpec(
                    "CANDIDATE_LABELS", "TYPE_STRING", (-1,), optional=True, doc="labels per row (pad with empty)"
                ),
                TensorSpec("MULTI_LABEL", "TYPE_BOOL", (1,), optional=True, doc="score each label on its own"),
                _TRUNCATE,
            ),
            outputs=(_LABEL, _SCORE, _LABELS, _SCORES, _TRUNCATED),
        ),
        Task(
            name="text-ranking",
            summary="Score documents against a query with a cross-encoder (rerank); best first in ORDER.",
            template="text_ranking",
            inputs=(
                TensorSpec("QUERY", "TYPE_STRING", (1,), doc="the query, one per row"),
                TensorSpec("DOCUMENTS", "TYPE_STRING", (-1,), doc="that row's documents (pad with empty strings)"),
                _TRUNCATE,
            ),
            outputs=(
                TensorSpec("SCORES", "TYPE_FP32", (-1,), doc="relevance per document, in the documents' order"),
                TensorSpec(
                    "ORDER", "TYPE_INT32", (-1,), doc="document indices, most relevant first (-1: padding)", pad=-1
                ),
                TensorSpec("TRUNCATED", "TYPE_BOOL", (-1,), optional=True, doc="the pair was cut to the limit"),
            ),
        ),
        Task(
            name="question-answering",
            summary="Extractive answers: spans of the context, read in overlapping windows, with offsets.",
            template="question_answering",
            inputs=(
                TensorSpec("QUESTION", "TYPE_STRING", (1,), doc="the question, one per row"),
                TensorSpec("CONTEXT", "TYPE_STRING", (1,), doc="the text to find the answer in"),
                TensorSpec("TOP_K", "TYPE_INT32", (1,), optional=True, doc="answers to return (default 1)"),
            ),
            outputs=(
                TensorSpec("ANSWER", "TYPE_STRING", (-1,), doc="answers, best first"),
                TensorSpec("SCORE", "TYPE_FP32", (-1,), doc="their scores"),
                TensorSpec("START", "TYPE_INT32", (-1,), doc="character offsets into the context"),
                TensorSpec("END", "TYPE_INT32", (-1,)),
            ),
        ),
        Task(
            name="fill-mask",
            summary="Candidates for the one mask token of each text, best first.",
            template="fill_mask",
            inputs=(
                _TEXT,
                TensorSpec("TOP_K", "TYPE_INT32", (1,), optional=True, doc="candidates to return (default 5)"),
                _TRUNCATE,
            ),
            outputs=(
                TensorSpec("TOKENS", "TYPE_STRING", (-1,), doc="the candidate tokens, best first"),
                TensorSpec("SCORES", "TYPE_FP32", (-1,), doc="their probabilities"),
                _TRUNCATED,
            ),
        ),
        Task(
            name="image-classification",
            summary="Label each image (JPEG, PNG, WebP, GIF, BMP bytes) with the model's own labels: ViT, ConvNeXt.",
            template="image_classification",
            inputs=(_IMAGE, TensorSpec("TOP_K", "TYPE_INT32", (1,), optional=True, doc="how many labels to return")),
            outputs=(_LABEL, _SCORE, _LABELS, _SCORES),
        ),
        Task(
            name="zero-shot-image-classification",
            summary="CLIP, SigLIP: image and text vectors in one space; images ranked against candidate labels.",
            template="zero_shot_image_classification",
            inputs=(
                TensorSpec("IMAGE", "TYPE_STRING", (1,), optional=True, doc="an encoded image per row (or TEXT)"),
                TensorSpec("TEXT", "TYPE_STRING", (1,), optional=True, doc="a text per row, embedded (or IMAGE)"),
                TensorSpec("CANDIDATE_LABELS", "TYPE_STRING", (-1,), optional=True, doc="labels per image row"),
                TensorSpec("NORMALIZE", "TYPE_BOOL", (1,), optional=True, doc="L2-normalise (default true)"),
                _TRUNCATE,
            ),
            outputs=(
                TensorSpec("EMBEDDING", "TYPE_FP32", (-1,), doc="the image's or text's vector, one space"),
                _LABEL,
                _SCORE,
                _LABELS,
                _SCORES,
                _TRUNCATED,
                _TOKENS,
            ),
        ),
        Task(
            name="automatic-speech-recognition",
            summary="Transcribe or translate speech (WAV, FLAC, OGG, MP3 bytes) with Whisper; timestamped segments.",
            template="automatic_speech_recognition",
            inputs=(
                TensorSpec("AUDIO", "TYPE_STRING", (1,), doc="one encoded file per row: WAV, FLAC, OGG or MP3 bytes"),
                TensorSpec(
                    "LANGUAGE", "TYPE_STRING", (1,), optional=True, doc="spoken language code (default: detect)"
                ),
                TensorSpec("TASK", "TYPE_STRING", (1,), optional=True, doc="transcribe (default) or translate"),
                TensorSpec("TIMESTAMPS", "TYPE_BOOL", (1,), optional=True, doc="segments with their times"),
                TensorSpec("PROMPT", "TYPE_STRING", (1,), optional=True, doc="text that came before (style, names)"),
                TensorSpec("TEMPERATURE", "TYPE_FP32", (1,), optional=True, doc="0 (default) means greedy"),
                TensorSpec("SEED", "TYPE_INT64", (1,), optional=True, doc="sampling seed when TEMPERATURE > 0"),
                TensorSpec("MAX_TOKENS", "TYPE_INT32", (1,), optional=True, doc="tokens per 30 s window at most"),
            ),
            outputs=(
                TensorSpec("TEXT", "TYPE_STRING", (1,), doc="the transcription (or English translation)"),
                TensorSpec("SPOKEN_LANGUAGE", "TYPE_STRING", (1,), doc="the language code given or detected"),
                TensorSpec("DURATION", "TYPE_FP32", (1,), doc="seconds of audio"),
                TensorSpec("SEGMENTS", "TYPE_STRING", (1,), doc="JSON list of {start, end, text} in seconds"),
                # A streamed (--stream, decoupled) model's partial answers carry TEXT_DELTA and SEGMENTS (the new ones)
                # instead of TEXT; its last answer is the whole one, as a model added without --stream sends.
                TensorSpec("TEXT_DELTA", "TYPE_STRING", (1,), optional=True, doc="streamed: the text since the last"),
            ),
            default_max_batch_size=8,
        ),
        Task(
            name="text2text-generation",
            summary="Stream text from an encoder-decoder model (T5, BART, Marian): summaries, translations.",
            template="text2text_generation",
            inputs=(
                TensorSpec("text_input", "TYPE_STRING", (1,), doc="the text to transform"),
                *_SAMPLING,
            ),
            outputs=_GENERATED,
            decoupled=True,
            default_max_batch_size=8,
        ),
        Task(
            name="text-generation",
            summary="Stream generated text with continuous batching (decoupled; Triton's generate extension names).",
            template="text_generation",
            inputs=_CHAT_INPUTS,
            outputs=_CHAT_OUTPUTS,
            decoupled=True,
            default_max_batch_size=8,
        ),
        Task(
            name="image-text-to-text",
            summary="Chat about images: text-generation's contract, with the messages' images (decoupled).",
            template="text_generation",
            inputs=(
                *_CHAT_INPUTS,
                TensorSpec(
                    "images", "TYPE_STRING", (-1,), optional=True, doc="the messages' images, encoded, in order"
                ),
            ),
            outputs=_CHAT_OUTPUTS,
            decoupled=True,
            default_max_batch_size=8,
        ),
    )
}

ALIASES = {
    "ner": "token-classification",
    "embeddings": "feature-extraction",
    "zero-shot": "zero-shot-classification",
    "rerank": "text-ranking",
    "qa": "question-answering",
    "summarization": "text2text-generation",
    "translation": "text2text-generation",
    "clip": "zero-shot-image-classification",
    "asr": "automatic-speech-recognition",
    "image-chat": "image-text-to-text",
    "vlm": "image-text-to-text",
    "whisper": "automatic-speech-recognition",
}


def get_task(name: str) -> Task:
    """The task called ``name`` (or one of its aliases); a clear error listing the tasks otherwise."""
    canonical = ALIASES.get(name, name)
    if canonical not in TASKS:
        raise UnknownTaskError(
            f"Unknown task {name!r}. The gallery has: {', '.join(TASKS)} (aliases: {', '.join(ALIASES)}). "
            "See `tritonhf gallery list`."
        )
    return TASKS[canonical]
