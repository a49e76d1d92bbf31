"""A HuggingFace causal LM folder written as one GGUF file, for the OpenVINO generation engine.

OpenVINO GenAI's ``ContinuousBatchingPipeline`` reads a GGUF file directly (weights,
hyper-parameters and tokenizer in one file, loaded in seconds) and quantised GGUF weights
are what make it fast on a CPU. A hub id or a local folder is therefore exported here once,
at ``gallery add``, with nothing but the ``gguf`` package and numpy: no optimum-intel, which
pins its own torch and transformers.

Supported: the llama family (``LlamaForCausalLM``: SmolLM2, Llama, TinyLlama; ``MistralForCausalLM``)
and ``Qwen2ForCausalLM`` (the same blocks with q/k/v biases). Weights: ``q8_0`` (int8 blocks
of 32, the default), ``q4_0`` (int4, opt-in: smaller and faster, less exact) or ``f16``.
Norms stay f32. The layout follows llama.cpp's converter: q/k rows permuted from
HuggingFace's rotary halves to GGML's interleaved pairs, the output matrix omitted when tied.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf.errors import ModelSourceError

WEIGHT_FORMATS = ("q8_0", "q4_0", "f16")
DEFAULT_WEIGHT_FORMAT = "q8_0"
GGUF_FILE = "model.gguf"
# HuggingFace architecture -> GGUF architecture name; both read the same tensors below.
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
# HuggingFace parameter name inside a decoder layer -> GGUF tensor name (blk.N.<this>.weight|bias).
_LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


@dataclass(frozen=True)
class Exported:
    path: Path
    architecture: str
    weight_format: str


def supported(folder: Path) -> str | None:
    """None when ``folder`` can be exported; else why not (said by ``--engine auto`` when it falls back)."""
    config = _config(folder)
    architectures = config.get("architectures") or []
    if not any(name in ARCHITECTURES for name in architectures):
        return (
            f"the GGUF export knows {', '.join(sorted(ARCHITECTURES))}, not {', '.join(architectures) or 'this model'}"
        )
    rope = _rope(config)
    if config.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        return "rope scaling is not exported"
    if not (folder / "tokenizer.json").is_file():
        return "the model has no tokenizer.json (a fast tokenizer) to write into the GGUF file"
    return None


def _rope(config: dict[str, Any]) -> dict[str, Any]:
    """The rotary settings: transformers 5 writes them as ``rope_parameters`` (its ``rope_theta`` and
    ``rope_type``), older configs as ``rope_theta`` and ``rope_scaling`` at the top."""
    found = config.get("rope_parameters")
    return dict(found) if isinstance(found, dict) else {}


def _config(folder: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((folder / "config.json").read_text()))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{folder} has no readable config.json: {exc}") from exc


def export(folder: Path, target: Path, weight_format: str = DEFAULT_WEIGHT_FORMAT) -> Exported:
    """Write ``target`` (a .gguf file) from the HuggingFace folder ``folder``."""
    import gguf

    if weight_format not in WEIGHT_FORMATS:
        raise ModelSourceError(f"weight format must be one of {', '.join(WEIGHT_FORMATS)}, not {weight_format!r}.")
    why_not = supported(folder)
    if why_not is not None:
        raise ModelSourceError(f"cannot export {folder} to GGUF: {why_not}.")
    config = _config(folder)
    arch = next(ARCHITECTURES[name] for name in config["architectures"] if name in ARCHITECTURES)
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    hidden = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    writer = gguf.GGUFWriter(str(target), arch)
    writer.add_name(folder.name)
    writer.add_context_length(int(config.get("max_position_embeddings", 2048)))
    writer.add_embedding_length(hidden)
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(_rope(config).get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_file_type(_FILE_TYPES[weight_format](gguf))
    _write_tokenizer(gguf, writer, folder, int(config["vocab_size"]))
    tied = bool(config.get("tie_word_embeddings", False))
    for name, tensor in _tensors(folder, arch, heads, kv_heads, tied):
        data, qtype = _encode(gguf, name, tensor, weight_format)
        writer.add_tensor(name, data, raw_dtype=qtype)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Exported(target, arch, weight_format)


_FILE_TYPES = {
    "q8_0": lambda gguf: gguf.LlamaFileType.MOSTLY_Q8_0,
    "q4_0": lambda gguf: gguf.LlamaFileType.MOSTLY_Q4_0,
    "f16": lambda gguf: gguf.LlamaFileType.MOSTLY_F16,
}


def _write_tokenizer(gguf: Any, writer: Any, folder: Path, vocab_size: int) -> None:
    """The byte-level BPE vocabulary, merges, special ids and chat template (llama.cpp's 'gpt2' model)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if json.loads((folder / "tokenizer.json").read_text()).get("model", {}).get("type") != "BPE":
        raise ModelSourceError(f"{folder}'s tokenizer is not a BPE tokenizer; the GGUF export writes BPE only.")
    by_id = {token_id: token for token, token_id in tokenizer.get_vocab().items()}
    added = {token_id: token for token_id, token in tokenizer.added_tokens_decoder.items()}
    tokens: list[str] = []
    types: list[int] = []
    for token_id in range(vocab_size):
        if token_id not in by_id:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
        elif token_id in added:
            tokens.append(by_id[token_id])
            types.append(gguf.TokenType.CONTROL if added[token_id].special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[token_id])
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size)
    special.add_to_gguf(writer, quiet=True)


def _tensors(
    folder: Path, arch: str, heads: int, kv_heads: int, tied: bool
) -> Iterator[tuple[str, np.ndarray[Any, Any]]]:
    """(GGUF name, float32 array) for every tensor, in llama.cpp's layout."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelSourceError(f"{folder} holds no *.safetensors weights to export.")
    seen: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open handles are not mappings
                name = _gguf_name(key)
                if name is None or (tied and name == "output.weight"):
                    continue
                array = handle.get_tensor(key).float().numpy()
                if name.endswith("attn_q.weight") or name.endswith("attn_q.bias"):
                    array = _permute(array, heads)
                elif name.endswith("attn_k.weight") or name.endswith("attn_k.bias"):
                    array = _permute(array, kv_heads)
                seen.add(name)
                yield name, array
    if "token_embd.weight" not in seen:
        raise ModelSourceError(f"{folder}: no model.embed_tokens.weight found; not a {arch} checkpoint.")


def _gguf_name(key: str) -> str | None:
    key = key.removeprefix("model.")
    if key == "embed_tokens.weight":
        return "token_embd.weight"
    if key == "norm.weight":
        return "output_norm.weight"
    if key == "lm_head.weight":
        return "output.weight"
    parts = key.split(".")
    if parts[0] == "layers" and len(parts) >= 4:
        inner, kind = ".".join(parts[2:-1]), parts[-1]
        if inner in _LAYER_TENSORS:
            return f"blk.{parts[1]}.{_LAYER_TENSORS[inner]}.{kind}"
    if key.endswith("rotary_emb.inv_freq"):
        return None  # recomputed from the rope base
    raise ModelSourceError(f"tensor {key!r} has no GGUF counterpart in the export.")


def _permute(weights: np.ndarray[Any, Any], heads: int) -> np.ndarray[Any, Any]:
    """HuggingFace's rotary layout (two halves per head) -> GGML's (interleaved pairs), as llama.cpp does."""
    shape = weights.shape
    permuted: np.ndarray[Any, Any] = weights.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2)
    result: np.ndarray[Any, Any] = permuted.reshape(shape)
    return result


def _encode(gguf: Any, name: str, array: np.ndarray[Any, Any], weight_format: str) -> tuple[Any, Any]:
    """The data to store and its GGML type (None: from the numpy dtype): norms and biases f32,
    matrices in the chosen format (f16 where a row does not split into blocks of 32)."""
    if array.ndim < 2:
        return array.astype(np.float32), None
    if weight_format == "f16" or array.shape[-1] % 32 != 0:
        return array.astype(np.float16), None
    qtype = gguf.GGMLQuantizationType.Q8_0 if weight_format == "q8_0" else gguf.GGMLQuantizationType.Q4_0
    if weight_format == "q4_0" and name == "token_embd.weight":
        qtype = gguf.GGMLQuantizationType.Q8_0  # as llama.cpp's Q4_0 files do: the embedding stays 8-bit
    data = gguf.quants.quantize(np.ascontiguousarray(array, dtype=np.float32), qtype)
    return data, qtype
