"""Names every served model and tritonhf agree on (config parameters, defaults), and the
two things every runtime module uses: ``BadRequest`` and Triton's ``pb_utils``.
"""

from __future__ import annotations

from typing import Any

# Config parameters the gallery writes into every model, so that clients and
# `gallery validate` can tell what a model is without guessing from its name.
PARAM_TASK = "tritonhf.task"
PARAM_SOURCE = "tritonhf.source"
PARAM_VERSION = "tritonhf.version"
PARAM_WEIGHTS = "tritonhf.weights"
PARAM_DEVICE = "tritonhf.device"
PARAM_TRUST_REMOTE_CODE = "tritonhf.trust_remote_code"
PARAM_BACKEND = "tritonhf.backend"  # pytorch | onnx | openvino | ctranslate2
# why gallery add chose it (what it measured on the machine it was added on), and with --backend auto both
# engines' figures
PARAM_BACKEND_REASON = "tritonhf.backend_reason"
PARAM_CALIBRATION = "tritonhf.engine_calibration"
# text-generation: which engine computes the tokens (transformers | openvino), and the GGUF file
# the openvino engine loads from the weights folder.
PARAM_ENGINE = "tritonhf.engine"
PARAM_GGUF_FILE = "tritonhf.gguf_file"
# ... or the folder of an OpenVINO IR export (--weight-format int4-ir / int8-ir / fp16-ir), which it loads instead
PARAM_OPENVINO_MODEL = "tritonhf.openvino_model"
# text-generation on OpenVINO: "false" trades batch invariance for batched throughput (runtime.openvino_settings).
PARAM_BATCH_INVARIANT = "batch_invariant"
# feature-extraction: "true" where the model was trained so that its first N components are an embedding of their
# own (Matryoshka); only then does the gateway's /v1/embeddings take OpenAI's ``dimensions``.
PARAM_MATRYOSHKA = "matryoshka"
PARAM_REASONING = "reasoning"  # text-generation: "think" when the chat template writes a <think> block
# feature-extraction (and zero-shot by embeddings): what a sentence-transformers folder declares (runtime.sentence)
PARAM_POOLING = "pooling"  # comma-separated modes, in POOLING_MODES' order
PARAM_INCLUDE_PROMPT = "include_prompt"
PARAM_DENSE = "dense"  # comma-separated folders of Dense modules, in the order they run
PARAM_NORMALIZE = "normalize"
PARAM_PROMPTS = "prompts"  # a JSON object: prompt name -> the text put before each input
PARAM_DEFAULT_PROMPT = "default_prompt_name"
PARAM_MAX_SEQ_LENGTH = "max_seq_length"
# zero-shot-classification: "entailment" (an NLI classifier, as transformers' pipeline) or "embeddings"
PARAM_ZERO_SHOT_METHOD = "zero_shot_method"
PARAM_ENTAILMENT_ID = "entailment_id"  # with "entailment": the entailment label's index
# With --backend onnx on a server that has Triton's onnxruntime backend, the forward pass is
# a second model (the "ONNX part"): the template calls it by name (BLS) with these tensors.
PARAM_ONNX_MODEL = "tritonhf.onnx_model"  # the part's model name
PARAM_ONNX_INPUTS = "tritonhf.onnx_inputs"  # comma-separated: input_ids,attention_mask[,token_type_ids]
PARAM_ONNX_OUTPUT = "tritonhf.onnx_output"  # logits | last_hidden_state
PARAM_ONNX_TOWERS = "tritonhf.onnx_towers"  # image-text models: "vision.onnx,text.onnx", one graph per tower
PARAM_LOGIT_SCALE = "logit_scale"  # image-text models exported to ONNX: the model's exp(logit_scale) ...
PARAM_LOGIT_BIAS = "logit_bias"  # ... and SigLIP's logit_bias, read at `gallery add` (no PyTorch weights kept)
PARAM_ONNX_FILE = "tritonhf.onnx_file"  # model.onnx, or model.int8.onnx with --quantize int8
PARAM_PART_OF = "tritonhf.part_of"  # written into the part: the model it belongs to

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
RUNTIME_DIR = "tritonhf_runtime"  # this package's name beside model.py


# The export checks' figures that gallery add writes into a config: the largest difference from PyTorch's output.
PARAM_ONNX_DIFF = "tritonhf.onnx_max_abs_diff"
PARAM_OPENVINO_DIFF = "tritonhf.openvino_max_abs_diff"


class BadRequest(ValueError):
    """A request's input is unusable; answered as an error for that request alone."""


def pb_utils() -> Any:
    import triton_python_backend_utils  # type: ignore[import-not-found]  # provided by the stub

    return triton_python_backend_utils
