"""What the gallery's model.py templates share inside the Triton stub: one plain module.

`tritonhf gallery add` copies this file next to each model.py as ``tritonhf_runtime.py``
(the stub puts a model's version folder on ``sys.path``), so a model repository runs on
any Triton whose Python has the serving requirements, without tritonhf installed. It is a
leaf: it imports only the standard library and numpy at module level; torch, transformers,
onnxruntime and Triton's ``triton_python_backend_utils`` are imported where used.

What a template finds here:

* loading: ``parameters``, ``load_tokenizer``, ``load_model`` (PyTorch, or ONNX Runtime in
  this process, or Triton's onnxruntime backend through BLS), ``device``, ``max_length``;
* a batch of requests: ``Batch`` gathers the texts of every request of one ``execute``
  into one list of rows, reads per-row options (one value per row, never row 0's value for
  all), and fails a request alone when its input is unusable;
* the long-input policy: ``encode`` tokenizes each row once, with windows when asked, and
  either truncates (recording that it did) or refuses a row that is too long;
* token-budget batching: ``budget_groups`` sorts rows by length and splits them where
  padding would cost more than another forward pass, so one long text does not pad many
  short ones;
* answers: tensors, ranked labels, and ``Batch.respond``.

The parameter names below are the single place that knows them: ``tritonhf.tasks``
imports them from here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

# Config parameters the gallery writes into every model, so that clients and
# `gallery validate` can tell what a model is without guessing from its name.
PARAM_TASK = "tritonhf.task"
PARAM_SOURCE = "tritonhf.source"
PARAM_VERSION = "tritonhf.version"
PARAM_WEIGHTS = "tritonhf.weights"
PARAM_DEVICE = "tritonhf.device"
PARAM_TRUST_REMOTE_CODE = "tritonhf.trust_remote_code"
PARAM_BACKEND = "tritonhf.backend"  # pytorch | onnx
# text-generation: which engine computes the tokens (transformers | openvino), and the GGUF file
# the openvino engine loads from the weights folder.
PARAM_ENGINE = "tritonhf.engine"
PARAM_GGUF_FILE = "tritonhf.gguf_file"
# With --backend onnx on a server that has Triton's onnxruntime backend, the forward pass is
# a second model (the "ONNX part"): the template calls it by name (BLS) with these tensors.
PARAM_ONNX_MODEL = "tritonhf.onnx_model"  # the part's model name
PARAM_ONNX_INPUTS = "tritonhf.onnx_inputs"  # comma-separated: input_ids,attention_mask[,token_type_ids]
PARAM_ONNX_OUTPUT = "tritonhf.onnx_output"  # logits | last_hidden_state
PARAM_ONNX_FILE = "tritonhf.onnx_file"  # model.onnx, or model.int8.onnx with --quantize int8
PARAM_PART_OF = "tritonhf.part_of"  # written into the part: the model it belongs to
K = TypeVar("K", bound=Hashable)  # a row's key: its index, or (row, document) for pairs

# Token-budget batching: at most this many padded tokens per forward pass (rows sorted by length).
PARAM_MAX_BATCH_TOKENS = "max_batch_tokens"
DEFAULT_MAX_BATCH_TOKENS = 8192
# What one more forward pass costs, in padded tokens: MiniLM on ONNX Runtime, 2 cores, takes
# 3.4 ms for one 14-token text and 1.7 ms per text in a batch of 32, i.e. a pass costs about
# as much as 13-16 tokens of padding. Mixed lengths are split where padding costs more.
PASS_COST_TOKENS = 16
# Intra-op threads per instance (PyTorch or ONNX Runtime); default: the cores shared between instances.
PARAM_THREADS = "threads"
VENDORED_WEIGHTS_DIR = "weights"
RUNTIME_FILE = "tritonhf_runtime.py"  # this module's name beside model.py


class BadRequest(ValueError):
    """A request's input is unusable; answered as an error for that request alone."""


def pb_utils() -> Any:
    import triton_python_backend_utils  # type: ignore[import-not-found]  # provided by the stub

    return triton_python_backend_utils


# ---------------------------------------------------------------------------- loading


def model_config(args: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(args["model_config"]))


def parameters(args: dict[str, str]) -> dict[str, str]:
    """The config's ``parameters`` as a plain dict of strings."""
    return {key: value.get("string_value", "") for key, value in model_config(args).get("parameters", {}).items()}


def int_parameter(params: dict[str, str], name: str, default: int, minimum: int = 1) -> int:
    """An integer config parameter; a clear error at load time when it is not one."""
    raw = params.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"config parameter {name!r} is {raw!r}; it must be an integer >= {minimum}.")
    return value


class OnnxModel:
    """An exported ONNX file run by onnxruntime behind the PyTorch model's call.

    ``model(**batch).logits`` (or ``.last_hidden_state``) works the same, so a template
    does not change with the backend.
    """

    def __init__(self, folder: str, threads: int, file_name: str = "model.onnx") -> None:
        import onnxruntime
        from transformers import AutoConfig

        options = onnxruntime.SessionOptions()
        # One intra-op pool sized to this instance's share of the cores; inter-op parallelism
        # does not help these sequential graphs (measured in `make bench`).
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = onnxruntime.InferenceSession(
            str(Path(folder) / file_name), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = [tensor.name for tensor in self.session.get_inputs()]
        self.output = self.session.get_outputs()[0].name  # logits or last_hidden_state, named at export
        self.config = AutoConfig.from_pretrained(folder)
        self.device = _cpu()  # transformers' pipelines (used only to post-process) ask for it

    def __call__(self, **batch: Any) -> Any:
        import types

        import torch

        feeds = {name: batch[name].cpu().numpy().astype(np.int64) for name in self.inputs}
        (result,) = self.session.run([self.output], feeds)
        return types.SimpleNamespace(**{self.output: torch.from_numpy(result)})

    def to(self, device: str) -> OnnxModel:
        return self

    def eval(self) -> OnnxModel:
        return self


class TritonOnnxModel:
    """``model.onnx`` served by Triton's native onnxruntime backend as another model (the "part"),
    called with the whole gathered batch through BLS, behind the PyTorch model's call.

    The template tokenizes as always; the token tensors go to the part in one request and its
    answer comes back as ``.logits`` (or ``.last_hidden_state``), so the template does not change.
    """

    runs_in_this_process = False  # the part may still be loading while this model initialises

    def __init__(self, part: str, inputs: Sequence[str], output: str, folder: str) -> None:
        from transformers import AutoConfig

        self.part, self.inputs, self.output = part, list(inputs), output
        self.config = AutoConfig.from_pretrained(folder)
        self.device = _cpu()

    def __call__(self, **batch: Any) -> Any:
        import types

        import torch

        pb = pb_utils()
        tensors = [pb.Tensor(name, batch[name].cpu().numpy().astype(np.int64)) for name in self.inputs]
        request = pb.InferenceRequest(model_name=self.part, inputs=tensors, requested_output_names=[self.output])
        response = request.exec()
        if response.has_error():
            raise RuntimeError(f"the ONNX part {self.part!r} failed: {response.error().message()}")
        result = pb.get_output_tensor_by_name(response, self.output).as_numpy()
        return types.SimpleNamespace(**{self.output: torch.from_numpy(np.array(result))})

    def to(self, device: str) -> TritonOnnxModel:
        return self

    def eval(self) -> TritonOnnxModel:
        return self


def _cpu() -> Any:
    import torch

    return torch.device("cpu")


def forward_is_local(model: Any) -> bool:
    """False when the forward pass is another Triton model: no warm-up call during initialize."""
    return bool(getattr(model, "runs_in_this_process", True))


def load_tokenizer(args: dict[str, str], params: dict[str, str], padding_side: str | None = "right") -> Any:
    """The tokenizer saved beside the weights (or of the hub id, with --no-vendor).

    Encoder templates pool the first token or slice rows by length, so they pad on the right,
    whatever the tokenizer was saved with; generation pads on the left.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        weights_location(args, params), trust_remote_code=trust_remote_code(params)
    )
    if padding_side is not None:
        tokenizer.padding_side = padding_side
    return tokenizer


def load_model(auto_class: Any, args: dict[str, str], params: dict[str, str], device_name: str) -> Any:
    """The model as PyTorch (the default) or, when added with --backend onnx, as an OnnxModel
    (onnxruntime in this process) or a TritonOnnxModel (Triton's onnxruntime backend)."""
    source = weights_location(args, params)
    if params.get(PARAM_BACKEND) == "onnx" and params.get(PARAM_ONNX_MODEL):
        inputs = params.get(PARAM_ONNX_INPUTS, "input_ids,attention_mask").split(",")
        return TritonOnnxModel(params[PARAM_ONNX_MODEL], inputs, params.get(PARAM_ONNX_OUTPUT, "logits"), source)
    if params.get(PARAM_BACKEND) == "onnx":
        return OnnxModel(source, threads=instance_threads(args), file_name=params.get(PARAM_ONNX_FILE, "model.onnx"))
    model = auto_class.from_pretrained(
        source, dtype=torch_dtype(device_name), trust_remote_code=trust_remote_code(params)
    )
    return model.to(device_name).eval()


def trust_remote_code(params: dict[str, str]) -> bool:
    """Run code shipped with the model? Only when added with --trust-remote-code."""
    return params.get(PARAM_TRUST_REMOTE_CODE) == "true"


def weights_location(args: dict[str, str], params: dict[str, str]) -> str:
    """Where to load weights from: the vendored folder, a local path, or a hub id (--no-vendor)."""
    location = params.get(PARAM_WEIGHTS, VENDORED_WEIGHTS_DIR)
    version_dir = Path(args["model_repository"]) / args["model_version"]
    if (version_dir / location).exists():
        return str(version_dir / location)
    return location


def device(args: dict[str, str], params: dict[str, str]) -> str:
    """``cuda:N`` when the instance is a GPU one (or "auto" finds a GPU), else ``cpu``."""
    import torch

    wanted = params.get(PARAM_DEVICE, "auto")
    if params.get(PARAM_BACKEND) == "onnx":
        return "cpu"  # the onnxruntime path runs on the CPU execution provider
    gpu_wanted = args.get("model_instance_kind") == "GPU" or wanted in ("gpu", "auto")
    if gpu_wanted and torch.cuda.is_available():
        return f"cuda:{args.get('model_instance_device_id', '0')}"
    return "cpu"


def torch_dtype(device_name: str) -> Any:
    """fp16 on a GPU (half the memory, tensor cores), fp32 on the CPU (fast kernels there)."""
    import torch

    return torch.float16 if device_name.startswith("cuda") else torch.float32


def instance_threads(args: dict[str, str]) -> int:
    """Intra-op threads per instance: the ``threads`` parameter, else cores/N for N instances."""
    groups = model_config(args).get("instance_group", [{}])
    instances = max(1, sum(int(group.get("count", 1)) for group in groups))
    return int_parameter(parameters(args), PARAM_THREADS, max(1, (os.cpu_count() or 1) // instances))


def limit_threads(args: dict[str, str]) -> None:
    """Share the cores between instances (torch's intra-op thread pool)."""
    import torch

    torch.set_num_threads(instance_threads(args))


def max_length(tokenizer: Any, config: Any, default: int = 512) -> int:
    """The longest input the model takes, in tokens (special tokens included)."""
    limits = [
        value
        for value in (getattr(tokenizer, "model_max_length", None), getattr(config, "max_position_embeddings", None))
        if isinstance(value, int) and 0 < value < 1_000_000
    ]
    return min(limits) if limits else default


# ---------------------------------------------------------------------------- one batch of requests


def decode_texts(array: np.ndarray[Any, Any], name: str) -> list[str]:
    """A BYTES tensor (object array of bytes) as a list of str, one per item."""
    texts = []
    for index, item in enumerate(array.reshape(-1)):
        if isinstance(item, bytes):
            try:
                texts.append(item.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise BadRequest(f"input '{name}' item {index} is not valid UTF-8 ({exc.reason}).") from exc
        else:
            texts.append(str(item))
    return texts


def optional_array(request: Any, name: str) -> np.ndarray[Any, Any] | None:
    tensor = pb_utils().get_input_tensor_by_name(request, name)
    return None if tensor is None else np.asarray(tensor.as_numpy())


def input_array(request: Any, name: str) -> np.ndarray[Any, Any]:
    array = optional_array(request, name)
    if array is None:
        # Triton lets a request through without a required input when the model has optional ones.
        raise BadRequest(f"missing required input '{name}'.")
    return array


def _plain(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()


def optional_scalar(request: Any, name: str, default: Any, check: Callable[[Any], bool], rule: str) -> Any:
    """The single value of an optional input of a one-row request (generation), or ``default``."""
    array = optional_array(request, name)
    if array is None or array.size == 0:
        return default
    if array.size != 1:
        raise BadRequest(f"input '{name}' has {array.size} values; send one.")
    value = _plain(array.reshape(-1)[0])
    if not check(value):
        raise BadRequest(f"input '{name}' is {value!r}; it must be {rule}.")
    return value


def optional_strings(request: Any, name: str) -> list[str] | None:
    """The non-empty strings of an optional BYTES input of a one-row request, or None."""
    array = optional_array(request, name)
    if array is None:
        return None
    return [text for text in decode_texts(array, name) if text]


class Batch:
    """The rows of every request that one ``execute`` received, in one flat list.

    Triton's dynamic batcher hands ``execute`` several requests, each with one or more rows
    (its batch axis). ``texts[i]`` is row i; ``spans[r]`` is the range of rows of request r.
    Options are read per row (``option``): a request's row j gets *its* value, never the
    first row's or another request's. A request whose input is unusable is failed alone
    (``fail``): its rows are skipped by ``live_rows`` and it is answered with the error.
    """

    def __init__(self, requests: Sequence[Any], text_input: str = "TEXT") -> None:
        self.requests = list(requests)
        self.texts: list[str] = []
        self.spans: list[range] = []
        self.errors: dict[int, str] = {}
        for index, request in enumerate(self.requests):
            start = len(self.texts)
            try:
                self.texts.extend(decode_texts(input_array(request, text_input), text_input))
            except BadRequest as exc:
                self.errors[index] = str(exc)
            self.spans.append(range(start, len(self.texts)))
        self.owner = [index for index, span in enumerate(self.spans) for _ in span]

    def fail(self, request_index: int, message: str) -> None:
        """Answer request ``request_index`` with this error (the first error of a request wins)."""
        self.errors.setdefault(request_index, message)

    def fail_row(self, row: int, message: str) -> None:
        request_index = self.owner[row]
        position = row - self.spans[request_index].start
        prefix = f"row {position}: " if len(self.spans[request_index]) > 1 else ""
        self.fail(request_index, prefix + message)

    def live_rows(self) -> list[int]:
        """Rows of the requests that have not failed, in order."""
        return [row for row, owner in enumerate(self.owner) if owner not in self.errors]

    def option(self, name: str, default: Any, check: Callable[[Any], bool] | None = None, rule: str = "") -> list[Any]:
        """One value per row of the optional input ``name`` ([rows, 1]); ``default`` where absent.

        A value refused by ``check`` fails its request with a message that names the input,
        the row and ``rule``.
        """
        values: list[Any] = [default] * len(self.texts)
        for index, request in enumerate(self.requests):
            if index in self.errors:
                continue
            array = optional_array(request, name)
            if array is None or array.size == 0:
                continue
            span = self.spans[index]
            flat = array.reshape(len(span), -1) if array.size % max(len(span), 1) == 0 else None
            if flat is None or flat.shape[1] != 1:
                self.fail(index, f"input '{name}' must have one value per row of TEXT ({len(span)}), not {array.size}.")
                continue
            for offset, row in enumerate(span):
                value = _plain(flat[offset, 0])
                if check is not None and not check(value):
                    where = f" row {offset}" if len(span) > 1 else ""
                    self.fail(index, f"input '{name}'{where} is {value!r}; it must be {rule}.")
                    break
                values[row] = value
        return values

    def strings(self, name: str) -> list[str]:
        """One string per row of the required input ``name`` ([rows, 1]); a request without it fails."""
        values = [""] * len(self.texts)
        for index, request in enumerate(self.requests):
            if index in self.errors:
                continue
            try:
                found = decode_texts(input_array(request, name), name)
            except BadRequest as exc:
                self.fail(index, str(exc))
                continue
            if len(found) != len(self.spans[index]):
                self.fail(index, f"input '{name}' must have one value per row ({len(self.spans[index])}).")
                continue
            for offset, row in enumerate(self.spans[index]):
                values[row] = found[offset]
        return values

    def string_lists(self, name: str) -> list[list[str] | None]:
        """Per row, the non-empty strings of row j of the optional input ``name`` ([rows, k]); None where absent.

        Rows may use fewer strings than k by padding with empty strings.
        """
        values: list[list[str] | None] = [None] * len(self.texts)
        for index, request in enumerate(self.requests):
            if index in self.errors:
                continue
            array = optional_array(request, name)
            if array is None:
                continue
            span = self.spans[index]
            if array.ndim != 2 or array.shape[0] != len(span):
                self.fail(
                    index, f"input '{name}' must have one row per row of TEXT ({len(span)}), shape {array.shape}."
                )
                continue
            try:
                for offset, row in enumerate(span):
                    values[row] = [text for text in decode_texts(array[offset], name) if text.strip()]
            except BadRequest as exc:
                self.fail(index, str(exc))
        return values

    def respond(self, answer: Callable[[range], Any]) -> list[Any]:
        """One response per request, in order: ``answer(rows)``, or that request's error.

        ``answer`` may raise ``BadRequest`` for a request that only it can judge; that request
        alone gets the error.
        """
        responses = []
        for index, span in enumerate(self.spans):
            if index in self.errors:
                responses.append(error_response(self.errors[index]))
                continue
            try:
                responses.append(answer(span))
            except BadRequest as exc:
                responses.append(error_response(str(exc)))
        return responses


# ---------------------------------------------------------------------------- long inputs and token budgets


@dataclass
class Encoded:
    """Tokenized items: per key its token features (windows, for ``windows=True``) and whether it was cut.

    ``features[key]`` is a list of windows; each window is a dict of lists (input_ids,
    attention_mask, ... as the tokenizer returns them). Without windows an item has one.
    ``too_long`` lists the keys that were too long where cutting was not allowed; ``first_too_long``
    the pairs whose first text alone leaves no room (they are not tokenized at all).
    """

    features: dict[Any, list[dict[str, list[Any]]]] = field(default_factory=dict)
    truncated: dict[Any, bool] = field(default_factory=dict)
    too_long: list[Any] = field(default_factory=list)
    first_too_long: list[Any] = field(default_factory=list)  # pairs whose first text alone fills the limit

    def length(self, key: Any) -> int:
        return max(len(window["input_ids"]) for window in self.features[key])


def encode(
    tokenizer: Any,
    items: Sequence[tuple[Any, str, str | None]],
    limit: int,
    truncate: Callable[[Any], bool] | None = None,
    windows: bool = False,
    stride: int = 0,
    **extra: Any,
) -> Encoded:
    """Tokenize ``items`` (key, text, optional second text of a pair) once, each to at most ``limit`` tokens.

    The long-input policy, the same in every template:
    * ``windows=True`` (token classification, question answering): a long item becomes
      overlapping windows of ``limit`` tokens that overlap by ``stride``; nothing is dropped.
    * otherwise the item is cut to ``limit`` tokens and ``truncated[key]`` says so; where
      ``truncate(key)`` is False it is listed in ``too_long`` instead, for the template to refuse.
    A pair's second text (a document, a context) is cut before the first (the query).
    """
    encoded = Encoded()
    if items and items[0][2] is not None:
        # A pair whose first text (a query, a question) leaves no room for its second cannot be cut.
        room = {key: limit - len(tokenizer(text)["input_ids"]) - 2 for key, text, _ in items}
        encoded.first_too_long = [key for key, _, _ in items if room[key] < 2]
        items = [item for item in items if item[0] not in encoded.first_too_long]
        if windows:  # each pair alone: the overlap must fit the room its own first text leaves
            for key, text, pair in items:
                own = _tokenize(tokenizer, [(key, text, pair)], limit, windows, min(stride, room[key] // 2), extra)
                _merge(encoded, own)
            encoded.too_long = [
                key for key in encoded.features if encoded.truncated[key] and truncate and not truncate(key)
            ]
            return encoded
    _merge(encoded, _tokenize(tokenizer, items, limit, windows, stride, extra))
    encoded.too_long = [key for key in encoded.features if encoded.truncated[key] and truncate and not truncate(key)]
    return encoded


def _merge(into: Encoded, part: Encoded) -> None:
    into.features.update(part.features)
    into.truncated.update(part.truncated)


def _tokenize(
    tokenizer: Any, items: Sequence[tuple[Any, str, str | None]], limit: int, windows: bool, stride: int, extra: Any
) -> Encoded:
    encoded = Encoded()
    if not items:
        return encoded
    keys = [key for key, _, _ in items]
    texts = [text for _, text, _ in items]
    second = [pair or "" for _, _, pair in items] if items[0][2] is not None else None
    options: dict[str, Any] = dict(extra)
    if tokenizer.is_fast:
        options.update(return_overflowing_tokens=True, stride=stride if windows else 0)
    result = tokenizer(
        texts,
        second,
        truncation="only_second" if second is not None else True,
        max_length=limit,
        padding=False,
        **options,
    )
    mapping = result.get("overflow_to_sample_mapping") or list(range(len(texts)))
    names = [name for name in result if name != "overflow_to_sample_mapping"]
    for window_index, sample in enumerate(mapping):
        window = {name: list(result[name][window_index]) for name in names}
        if second is not None and tokenizer.is_fast:  # which tokens are the pair's second text (a context)
            window["sequence_ids"] = list(result.sequence_ids(window_index))
        encoded.features.setdefault(keys[sample], []).append(window)
    if tokenizer.is_fast:  # one window per item unless windows were asked for; more means it was cut
        for key in keys:
            encoded.truncated[key] = not windows and len(encoded.features[key]) > 1
            if not windows:
                del encoded.features[key][1:]
    else:  # a slow tokenizer gives no overflow information: count the full length separately
        full = tokenizer(texts, second, truncation=False, padding=False)["input_ids"]
        for key, ids in zip(keys, full, strict=True):
            encoded.truncated[key] = len(ids) > limit
    return encoded


def too_long_message(limit: int, name: str = "TEXT") -> str:
    """The refusal of a too-long text; "context length" is the phrase the SDK maps to ContextLengthError."""
    return (
        f"input '{name}' is longer than the model's context length of {limit} tokens. Shorten it, or send "
        "truncate=true (TRUNCATE) to have it cut."
    )


def encode_rows(
    tokenizer: Any,
    batch: Batch,
    limit: int,
    truncate: Sequence[bool] | None = None,
    windows: bool = False,
    stride: int = 0,
    pairs: Sequence[str] | None = None,
    **extra: Any,
) -> Encoded:
    """``encode`` of the live rows of ``batch``; a row too long to cut fails its request, naming the limit.

    ``pairs`` (one per row, "" for none) pairs a row with a second text; rows with and without one are
    tokenized apart, so a single text is never given a pair's separators by its neighbours.
    """
    live = batch.live_rows()
    cut = (lambda row: bool(truncate[row])) if truncate is not None else None
    singles = [(row, batch.texts[row], None) for row in live if not (pairs and pairs[row])]
    encoded = encode(tokenizer, singles, limit, cut, windows, stride, **extra)
    if pairs:
        paired = encode(tokenizer, [(row, batch.texts[row], pairs[row]) for row in live if pairs[row]], limit, cut,
                        windows, stride, **extra)  # fmt: skip
        _merge(encoded, paired)
        encoded.too_long += paired.too_long
        for row in paired.first_too_long:
            batch.fail_row(row, too_long_message(limit))
    for row in encoded.too_long:
        batch.fail_row(row, too_long_message(limit))
    return encoded


_PAD_VALUES = {"attention_mask": 0, "special_tokens_mask": 1, "offset_mapping": (0, 0)}


def pad(tokenizer: Any, windows: Sequence[dict[str, list[Any]]], device_name: str = "cpu") -> dict[str, Any]:
    """Right-pad windows of token features into tensors (input_ids with the pad token, masks with 0)."""
    import torch

    width = max(len(window["input_ids"]) for window in windows)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tensors: dict[str, Any] = {}
    for key in windows[0]:
        if key == "sequence_ids":  # bookkeeping, not a model input
            continue
        fill = _PAD_VALUES.get(key, pad_id if key == "input_ids" else 0)
        rows = [list(window[key]) + [fill] * (width - len(window[key])) for window in windows]
        tensors[key] = torch.tensor(rows).to(device_name)
    return tensors


def budget_groups(lengths: Mapping[K, int], budget: int, max_rows: int = 0) -> list[list[K]]:
    """Rows grouped for forward passes: sorted by length, split where padding costs more than a pass.

    A group costs one pass plus rows x its longest row in padded tokens. Sorting first means a
    long text pads only its neighbours in length (text-embeddings-inference does the same); the
    split points are then chosen to minimise the total cost, counting a pass as
    ``PASS_COST_TOKENS`` padded tokens, so a few long texts get passes of their own instead of
    padding every short one to their length. No group exceeds ``budget`` padded tokens (a row
    longer than the budget gets a group of its own) or ``max_rows`` rows when that is set.
    """
    rows = sorted(lengths, key=lambda r: (lengths[r], r))
    most = max_rows or len(rows)
    # best[j]: the cheapest grouping of rows[:j]; start[j]: where its last group begins
    best = [0.0] + [float("inf")] * len(rows)
    start = [0] * (len(rows) + 1)
    for end in range(1, len(rows) + 1):
        longest = lengths[rows[end - 1]]
        for first in range(end - 1, max(-1, end - 1 - most), -1):
            size = end - first
            if size > 1 and size * longest > budget:
                break
            cost = best[first] + PASS_COST_TOKENS + size * longest
            if cost < best[end]:
                best[end], start[end] = cost, first
    groups: list[list[K]] = []
    end = len(rows)
    while end > 0:
        groups.append(rows[start[end] : end])
        end = start[end]
    return groups[::-1]


def model_inputs(tokenizer: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """Only the tensors the model takes (input_ids, attention_mask, token_type_ids ...)."""
    names = set(getattr(tokenizer, "model_input_names", ["input_ids", "attention_mask"]))
    return {key: value for key, value in batch.items() if key in names}


def pool(last_hidden_state: Any, attention_mask: Any, pooling: str) -> Any:
    """One vector per text: the first token (``cls``) or the mean of the real tokens (``mean``)."""
    if pooling == "cls":
        return last_hidden_state[:, 0]
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    return (last_hidden_state * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


# ---------------------------------------------------------------------------- answers


def error_response(message: str, invalid_input: bool = True) -> Any:
    """An error answer for one request; INVALID_ARG (HTTP 400) unless the model itself failed."""
    pb = pb_utils()
    code = pb.TritonError.INVALID_ARG if invalid_input else pb.TritonError.INTERNAL
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, code))


def busy_response(waiting: int) -> Any:
    """UNAVAILABLE (HTTP 503, gRPC UNAVAILABLE) for a request beyond a template's own queue bound, in the
    words Triton uses for its queue ("exceeds maximum queue size"), so clients treat both alike."""
    pb = pb_utils()
    message = (
        f"Exceeds maximum queue size: {waiting} requests are already waiting (parameter max_waiting). "
        "The model is busy: retry shortly."
    )
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, pb.TritonError.UNAVAILABLE))


def string_tensor(name: str, values: Sequence[Any]) -> Any:
    """A BYTES output: an object array of UTF-8 bytes, one row per text."""
    array = np.array([[str(value).encode("utf-8")] for value in values], dtype=np.object_)
    return pb_utils().Tensor(name, array.reshape(len(values), 1))


def string_matrix(name: str, rows: Sequence[Sequence[str]]) -> Any:
    """A BYTES output [rows, k]; shorter rows are padded with empty strings."""
    width = max((len(row) for row in rows), default=0)
    array = np.array(
        [[value.encode("utf-8") for value in row] + [b""] * (width - len(row)) for row in rows], dtype=np.object_
    )
    return pb_utils().Tensor(name, array.reshape(len(rows), width))


def float_tensor(name: str, values: Any) -> Any:
    return pb_utils().Tensor(name, np.ascontiguousarray(values, dtype=np.float32))


def int_tensor(name: str, values: Sequence[int]) -> Any:
    return pb_utils().Tensor(name, np.array(values, dtype=np.int32).reshape(len(values), 1))


def bool_tensor(name: str, values: Sequence[bool]) -> Any:
    return pb_utils().Tensor(name, np.array(values, dtype=np.bool_).reshape(len(values), 1))


def ranked_labels(scores: np.ndarray[Any, Any], labels: Sequence[str], top_k: int) -> tuple[list[str], list[float]]:
    """One row's labels best first, and their scores, the ``top_k`` best."""
    order = np.argsort(-scores, kind="stable")[:top_k]
    return [labels[index] for index in order], [float(scores[index]) for index in order]


def ranked_labels_outputs(ranked: Sequence[tuple[list[str], list[float]]]) -> list[Any]:
    """LABEL, SCORE (the best label per row) and LABELS, SCORES (best first; padded with "" and 0)."""
    width = max((len(labels) for labels, _ in ranked), default=0)
    scores = np.zeros((len(ranked), width), dtype=np.float32)
    for row, (_, values) in enumerate(ranked):
        scores[row, : len(values)] = values
    return [
        string_tensor("LABEL", [labels[0] for labels, _ in ranked]),
        float_tensor("SCORE", scores[:, :1]),
        string_matrix("LABELS", [labels for labels, _ in ranked]),
        float_tensor("SCORES", scores),
    ]


# ---------------------------------------------------------------------------- streamed text answers


class TextReply:
    """One streamed text answer (decoupled models): tokens in, text chunks out.

    Decodes only the new tokens' text (a short window, holding back an incomplete UTF-8
    character), cuts at a stop string and holds back text that may be the start of one, and
    ends with the usage (finish_reason, prompt and completion tokens) and the final flag.
    ``sender`` None (a warm-up) sends nothing.
    """

    def __init__(
        self, sender: Any, tokenizer: Any, stops: Sequence[str], prompt_tokens: int, prompt_tokens_cut: int = 0
    ) -> None:
        self.sender, self.tokenizer, self.stops = sender, tokenizer, list(stops)
        self.prompt_tokens, self.prompt_tokens_cut = prompt_tokens, prompt_tokens_cut
        self.tokens: list[int] = []
        self.text = ""  # the decoded text so far
        self.sent = 0  # characters of it already sent
        self.prefix_offset = self.read_offset = 0
        self.finish_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def _decode(self, start: int, stop: int | None = None) -> str:
        return str(self.tokenizer.decode(self.tokens[start:stop], skip_special_tokens=True))

    def add(self, token: int) -> None:
        """One more generated token: send what is safe to send; finish at a stop string."""
        self.tokens.append(token)
        before = self._decode(self.prefix_offset, self.read_offset)
        after = self._decode(self.prefix_offset)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
            self.text += after[len(before) :]
        for stop in self.stops:
            found = self.text.find(stop, max(0, self.sent - len(stop)))
            if found >= 0:
                self.text = self.text[:found]
                self.prefix_offset = self.read_offset = len(self.tokens)  # nothing left to flush
                self.finish("stop")
                return
        safe = len(self.text)  # hold back text that may be the start of a stop string
        for stop in self.stops:
            for size in range(min(len(stop) - 1, safe), 0, -1):
                if self.text.endswith(stop[:size]):
                    safe = min(safe, len(self.text) - size)
                    break
        self._send(safe)

    def _send(self, end: int, extra: Sequence[Any] = ()) -> None:
        chunk = self.text[self.sent : end]
        if (chunk or extra) and self.sender is not None:
            pb = pb_utils()
            self.sender.send(pb.InferenceResponse(output_tensors=[string_tensor("text_output", [chunk]), *extra]))
        self.sent = max(self.sent, end)

    def finish(self, reason: str, error: str | None = None) -> None:
        """Send what was held back with the usage, then the final flag (or the error, or just the flag)."""
        self.finish_reason = reason
        if self.sender is None:
            return
        pb = pb_utils()
        final = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            if error is not None:
                self.sender.send(error_response(error, invalid_input=False), flags=final)
            elif reason == "cancelled":
                self.sender.send(flags=final)
            else:
                self.text += self._decode(self.prefix_offset)[len(self._decode(self.prefix_offset, self.read_offset)) :]
                usage = [
                    string_tensor("finish_reason", [reason]),
                    pb.Tensor("prompt_tokens", np.array([[self.prompt_tokens]], dtype=np.int32)),
                    pb.Tensor("completion_tokens", np.array([[len(self.tokens)]], dtype=np.int32)),
                ]
                if self.prompt_tokens_cut:  # the request asked to truncate: the answer says what went
                    usage.append(pb.Tensor("prompt_tokens_cut", np.array([[self.prompt_tokens_cut]], dtype=np.int32)))
                self._send(len(self.text), usage)
                self.sender.send(flags=final)
        except Exception:  # the client went away between two checks: nothing left to tell it
            pass
