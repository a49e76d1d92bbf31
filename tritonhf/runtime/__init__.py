"""What the gallery's model.py templates share inside the Triton stub: one plain package.

`tritonhf gallery add` copies this folder next to each model.py as ``tritonhf_runtime/``
(the stub puts a model's version folder on ``sys.path``), so a model repository runs on
any Triton whose Python has the serving requirements, without tritonhf installed. It is a
leaf: its modules import only the standard library, numpy and each other (relatively) at
module level; torch, transformers,
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

* audio: ``decode_audio`` reads each row's encoded file (limits first), mixes it down and
  resamples it to the model's rate; ``long_form_settings`` names what a Whisper generation
  config asks of a long file beyond reading it window after window.
* images: ``pixel_rows`` decodes each row's encoded image (limits first, as transformers'
  ``load_image`` reads a file) and runs the model's image processor; ``Vision`` sizes a chat's images as the
  model's processor does and widens its prompt's placeholders (``vision``).

One module per concern: ``common`` (parameter names, the single place that knows them;
``tritonhf.tasks`` imports them from there), ``loading``, ``batching``, ``windows``, ``images``, ``audio``,
``replies``, ``reasoning`` (a reasoning model's thinking apart from its answer), ``pipeline``, ``int8``,
``sentence`` (what a sentence-transformers model runs after its transformer), ``openvino_settings``,
``ranges`` (every numeric option's range, which the SDK and the gateway read too), ``generation`` (the generation
templates' sequences, sampling options and token picking), ``grammars`` and ``tools`` (constrained answers and tool
calls of the generation template).
Templates use the names re-exported here (``runtime.Batch``).
"""

from __future__ import annotations

from . import tools, vision
from .audio import (
    CT2_FOLDER,
    DEFAULT_MAX_AUDIO_SECONDS,
    OPENVINO_ENCODER,
    OPENVINO_WHISPER,
    PARAM_COMPUTE_TYPE,
    PARAM_ENCODER,
    PARAM_MAX_AUDIO_SECONDS,
    decode_audio,
    long_form_settings,
    resample,
)
from .batching import (
    Batch,
    decode_texts,
    input_array,
    optional_array,
    optional_scalar,
    optional_strings,
)
from .common import (
    DEFAULT_MAX_BATCH_TOKENS,
    PARAM_BACKEND,
    PARAM_BATCH_INVARIANT,
    PARAM_DEVICE,
    PARAM_ENGINE,
    PARAM_ENTAILMENT_ID,
    PARAM_GGUF_FILE,
    PARAM_LOGIT_BIAS,
    PARAM_LOGIT_SCALE,
    PARAM_MATRYOSHKA,
    PARAM_MAX_BATCH_TOKENS,
    PARAM_ONNX_FILE,
    PARAM_ONNX_INPUTS,
    PARAM_ONNX_MODEL,
    PARAM_ONNX_OUTPUT,
    PARAM_ONNX_TOWERS,
    PARAM_OPENVINO_MODEL,
    PARAM_PART_OF,
    PARAM_REASONING,
    PARAM_SOURCE,
    PARAM_TASK,
    PARAM_THREADS,
    PARAM_TRUST_REMOTE_CODE,
    PARAM_VERSION,
    PARAM_WEIGHTS,
    PARAM_ZERO_SHOT_METHOD,
    PASS_COST_TOKENS,
    RUNTIME_DIR,
    VENDORED_WEIGHTS_DIR,
    BadRequest,
    pb_utils,
)
from .generation import GREEDY, Sampling, Sequence, pick_token, read_flag, read_max_tokens, read_sampling
from .grammars import Grammars
from .images import (
    DEFAULT_MAX_IMAGE_PIXELS,
    IMAGE_BACKEND,
    PARAM_IMAGE_BACKEND,
    PARAM_MAX_IMAGE_PIXELS,
    blank_pixels,
    decode_image,
    load_image_processor,
    pixel_rows,
)
from .int8 import PARAM_QUANTIZE, int8_linear_layers
from .loading import (
    OnnxModel,
    TritonOnnxModel,
    device,
    engine_class,
    eos_ids,
    forward_is_local,
    instance_threads,
    int_parameter,
    limit_threads,
    load_model,
    load_tokenizer,
    load_towers,
    max_length,
    model_config,
    parameters,
    start,
    torch_dtype,
    torch_threads,
    trust_remote_code,
    weights_location,
)
from .openvino_settings import EngineSettings, batch_invariant, engine_settings
from .pipeline import (
    DecoupledModel,
    Pipeline,
    PipelinedModel,
    Work,
)
from .ranges import (
    ANSWERS_MAX,
    AUDIO_TEMPERATURE_MAX,
    CANDIDATES_MAX,
    LOGIT_BIAS_MAX,
    LOGIT_BIAS_TOKENS,
    MAX_TOKENS_MIN,
    MIN_P_MAX,
    PENALTY_MAX,
    REPETITION_PENALTY_MAX,
    REPETITION_PENALTY_MIN,
    TEMPERATURE_MAX,
    TOP_K_MIN,
    TOP_LOGPROBS_MAX,
    TOP_P_MAX,
    seed_from_wire,
)
from .reasoning import THINK_END, THINK_START, opened_in_prompt, thinks
from .replies import (
    TextReply,
    bool_tensor,
    busy_response,
    error_response,
    float_tensor,
    int_tensor,
    ranked_labels,
    ranked_labels_outputs,
    string_matrix,
    string_tensor,
)
from .sentence import SentenceHead, pool
from .vision import (
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_IMAGES,
    PARAM_MAX_IMAGE_BYTES,
    PARAM_MAX_IMAGES,
    Vision,
)
from .windows import (
    Encoded,
    budget_groups,
    encode,
    encode_rows,
    model_inputs,
    pad,
    too_long_message,
)

__all__ = [
    "ANSWERS_MAX",
    "AUDIO_TEMPERATURE_MAX",
    "CANDIDATES_MAX",
    "CT2_FOLDER",
    "DEFAULT_MAX_AUDIO_SECONDS",
    "DEFAULT_MAX_BATCH_TOKENS",
    "DEFAULT_MAX_IMAGES",
    "DEFAULT_MAX_IMAGE_BYTES",
    "DEFAULT_MAX_IMAGE_PIXELS",
    "GREEDY",
    "IMAGE_BACKEND",
    "LOGIT_BIAS_MAX",
    "LOGIT_BIAS_TOKENS",
    "MAX_TOKENS_MIN",
    "MIN_P_MAX",
    "OPENVINO_ENCODER",
    "OPENVINO_WHISPER",
    "PARAM_BACKEND",
    "PARAM_BATCH_INVARIANT",
    "PARAM_COMPUTE_TYPE",
    "PARAM_DEVICE",
    "PARAM_ENCODER",
    "PARAM_ENGINE",
    "PARAM_ENTAILMENT_ID",
    "PARAM_GGUF_FILE",
    "PARAM_IMAGE_BACKEND",
    "PARAM_LOGIT_BIAS",
    "PARAM_LOGIT_SCALE",
    "PARAM_MATRYOSHKA",
    "PARAM_MAX_AUDIO_SECONDS",
    "PARAM_MAX_BATCH_TOKENS",
    "PARAM_MAX_IMAGES",
    "PARAM_MAX_IMAGE_BYTES",
    "PARAM_MAX_IMAGE_PIXELS",
    "PARAM_ONNX_FILE",
    "PARAM_ONNX_INPUTS",
    "PARAM_ONNX_MODEL",
    "PARAM_ONNX_OUTPUT",
    "PARAM_ONNX_TOWERS",
    "PARAM_OPENVINO_MODEL",
    "PARAM_PART_OF",
    "PARAM_QUANTIZE",
    "PARAM_REASONING",
    "PARAM_SOURCE",
    "PARAM_TASK",
    "PARAM_THREADS",
    "PARAM_TRUST_REMOTE_CODE",
    "PARAM_VERSION",
    "PARAM_WEIGHTS",
    "PARAM_ZERO_SHOT_METHOD",
    "PASS_COST_TOKENS",
    "PENALTY_MAX",
    "REPETITION_PENALTY_MAX",
    "REPETITION_PENALTY_MIN",
    "RUNTIME_DIR",
    "TEMPERATURE_MAX",
    "THINK_END",
    "THINK_START",
    "TOP_K_MIN",
    "TOP_LOGPROBS_MAX",
    "TOP_P_MAX",
    "VENDORED_WEIGHTS_DIR",
    "BadRequest",
    "Batch",
    "DecoupledModel",
    "Encoded",
    "EngineSettings",
    "Grammars",
    "OnnxModel",
    "Pipeline",
    "PipelinedModel",
    "Sampling",
    "SentenceHead",
    "Sequence",
    "TextReply",
    "TritonOnnxModel",
    "Vision",
    "Work",
    "batch_invariant",
    "blank_pixels",
    "bool_tensor",
    "budget_groups",
    "busy_response",
    "decode_audio",
    "decode_image",
    "decode_texts",
    "device",
    "encode",
    "encode_rows",
    "engine_class",
    "engine_settings",
    "eos_ids",
    "error_response",
    "float_tensor",
    "forward_is_local",
    "input_array",
    "instance_threads",
    "int8_linear_layers",
    "int_parameter",
    "int_tensor",
    "limit_threads",
    "load_image_processor",
    "load_model",
    "load_tokenizer",
    "load_towers",
    "long_form_settings",
    "max_length",
    "model_config",
    "model_inputs",
    "opened_in_prompt",
    "optional_array",
    "optional_scalar",
    "optional_strings",
    "pad",
    "parameters",
    "pb_utils",
    "pick_token",
    "pixel_rows",
    "pool",
    "ranked_labels",
    "ranked_labels_outputs",
    "read_flag",
    "read_max_tokens",
    "read_sampling",
    "resample",
    "seed_from_wire",
    "start",
    "string_matrix",
    "string_tensor",
    "thinks",
    "too_long_message",
    "tools",
    "torch_dtype",
    "torch_threads",
    "trust_remote_code",
    "vision",
    "weights_location",
]
