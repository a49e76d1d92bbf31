"""Tiny random models of many architectures, for the conformance matrix (tests/unit/test_conformance.py).

Each encoder architecture gets the same WordPiece tokenizer (which emits token_type_ids, as a BERT tokenizer
config in front of DistilBERT, DeBERTa-v2 or MPNet does) and heads for classification, NER, a single-output
score and regression, NLI, and sentence-transformers folders of every pooling mode, Dense layers, Normalize and
prompts, built with sentence-transformers itself (a decoder backbone among them: a Qwen3 model with last-token
pooling, as Qwen3-Embedding is). Weights are random: what the tests compare is the served answer against the
model's own library.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from harness.tiny_models import _wordpiece_tokenizer

SMALL = {"num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 72}
# architecture -> (config class, its size fields)
ENCODERS: dict[str, tuple[str, dict[str, Any]]] = {
    "bert": ("BertConfig", {"hidden_size": 32, **SMALL}),
    "roberta": ("RobertaConfig", {"hidden_size": 32, **SMALL}),
    "xlm-roberta": ("XLMRobertaConfig", {"hidden_size": 32, **SMALL}),
    "deberta-v2": ("DebertaV2Config", {"hidden_size": 32, **SMALL, "type_vocab_size": 0}),
    "electra": ("ElectraConfig", {"hidden_size": 32, "embedding_size": 32, **SMALL}),
    "distilbert": (
        "DistilBertConfig",
        {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64, "max_position_embeddings": 72},
    ),
    "mpnet": ("MPNetConfig", {"hidden_size": 32, **SMALL}),
    "albert": ("AlbertConfig", {"hidden_size": 32, "embedding_size": 16, **SMALL}),
    "modernbert": (
        "ModernBertConfig",
        {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 72,
            "global_attn_every_n_layers": 1,
        },
    ),
}
CLASSES = {
    "text-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "feature-extraction": "AutoModel",
}
NLI_LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}
SENTIMENT = {0: "negative", 1: "neutral", 2: "positive"}
ENTITIES = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def _config(architecture: str, tokenizer: Any, **extra: Any) -> Any:
    class_name, sizes = ENCODERS[architecture]
    ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.cls_token_id,
        "eos_token_id": tokenizer.sep_token_id,
    }
    if architecture == "modernbert":
        ids.update(cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
    return getattr(transformers, class_name)(vocab_size=len(tokenizer), **sizes, **ids, **extra)


def build_encoder(folder: Path, architecture: str, task: str, **heads: Any) -> Path:
    """``architecture``'s tiny model for ``task`` (``CLASSES``), with the head fields given (``id2label``,
    ``problem_type`` ...), saved with its tokenizer."""
    torch.manual_seed(7)
    tokenizer = _wordpiece_tokenizer(folder)
    labels = heads.pop("id2label", None)
    if labels is not None:
        heads.update(id2label=labels, label2id={v: k for k, v in labels.items()}, num_labels=len(labels))
    config = _config(architecture, tokenizer, **heads)
    model = getattr(transformers, CLASSES[task]).from_config(config)
    model.eval().save_pretrained(folder)
    return folder


def build_sentence_transformer(
    folder: Path,
    pooling: str | tuple[str, ...] = "mean",
    dense: int = 0,
    normalize: bool = False,
    prompts: dict[str, str] | None = None,
    default_prompt: str | None = None,
    include_prompt: bool = True,
    backbone: str = "bert",
    legacy_pooling: bool = False,
) -> Path:
    """A sentence-transformers folder saved by the library: ``backbone`` (an encoder of ``ENCODERS`` or "qwen3"),
    Pooling, ``dense`` output features of a Tanh Dense layer when not 0, Normalize when asked, prompts.
    ``legacy_pooling`` rewrites the pooling config in the older ``pooling_mode_*_token`` flags."""
    import json

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    backbone_folder = folder.parent / f".{folder.name}-backbone"
    backbone_folder.mkdir(parents=True, exist_ok=True)
    if backbone == "qwen3":
        hidden = _qwen3(backbone_folder)
    else:
        build_encoder(backbone_folder, backbone, "feature-extraction")
        hidden = 32
    torch.manual_seed(11)
    modules: list[Any] = [
        Transformer(str(backbone_folder)),
        Pooling(hidden, pooling_mode=pooling, include_prompt=include_prompt),
    ]
    if dense:
        modules.append(Dense(modules[1].get_embedding_dimension(), dense, activation_function=torch.nn.Tanh()))
    if normalize:
        modules.append(Normalize())
    SentenceTransformer(modules=modules, prompts=prompts, default_prompt_name=default_prompt, device="cpu").save(
        str(folder)
    )
    if legacy_pooling:
        path = folder / "1_Pooling" / "config.json"
        config = json.loads(path.read_text())
        modes = config.pop("pooling_mode")
        modes = [modes] if isinstance(modes, str) else modes
        names = {
            "cls": "cls_token",
            "max": "max_tokens",
            "mean": "mean_tokens",
            "mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
            "weightedmean": "weightedmean_tokens",
            "lasttoken": "lasttoken",
        }
        config.update({f"pooling_mode_{name}": mode in modes for mode, name in names.items()})
        config["word_embedding_dimension"] = config.pop("embedding_dimension")
        path.write_text(json.dumps(config))
    return folder


def _qwen3(folder: Path) -> int:
    """A tiny Qwen3 backbone (Qwen3-Embedding's shape) with the tiny GPT-2's byte-level BPE; its hidden size."""
    tokenizer = _bpe_tokenizer(folder)
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.chat_template = None  # with one, sentence-transformers formats texts as chat messages (refused)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer.save_pretrained(folder)
    config = transformers.Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    transformers.Qwen3Model(config).eval().save_pretrained(folder)
    return 32


# The sentence-transformers variants: name -> keyword arguments of build_sentence_transformer.
SENTENCE_VARIANTS: dict[str, dict[str, Any]] = {
    "cls": {"pooling": "cls", "normalize": True},
    "cls-legacy": {"pooling": "cls", "normalize": True, "legacy_pooling": True},
    "max": {"pooling": "max"},
    "mean-sqrt-len": {"pooling": "mean_sqrt_len_tokens"},
    "weightedmean": {"pooling": "weightedmean", "prompts": {"query": "query: ", "passage": "passage: "}},
    "lasttoken": {
        "pooling": "lasttoken",
        "prompts": {"query": "tell me about "},
        "default_prompt": "query",
        "include_prompt": False,
    },
    "cls-mean-dense": {"pooling": ("cls", "mean"), "dense": 16, "normalize": True},
    "qwen3-lasttoken": {
        "pooling": "lasttoken",
        "backbone": "qwen3",
        "normalize": True,
        "prompts": {"query": "Instruct: find the answer\nQuery: "},
    },
}


def builders() -> dict[str, Callable[[Path], Path]]:
    """Every conformance model, by name: ``ARCH/TASK`` encoders, the single-output and NLI heads, ``st/VARIANT``."""
    found: dict[str, Callable[[Path], Path]] = {}
    for arch in ENCODERS:
        found[f"{arch}/text-classification"] = lambda f, a=arch: build_encoder(
            f, a, "text-classification", id2label=SENTIMENT
        )
        found[f"{arch}/token-classification"] = lambda f, a=arch: build_encoder(
            f, a, "token-classification", id2label=ENTITIES
        )
        found[f"{arch}/feature-extraction"] = lambda f, a=arch: build_sentence_transformer(f, backbone=a)
    found["bert/score"] = lambda f: build_encoder(f, "bert", "text-classification", id2label={0: "LABEL_0"})
    found["bert/regression"] = lambda f: build_encoder(
        f, "bert", "text-classification", id2label={0: "LABEL_0"}, problem_type="regression"
    )
    found["bert/nli"] = lambda f: build_encoder(f, "bert", "text-classification", id2label=NLI_LABELS)
    found["deberta-v2/nli"] = lambda f: build_encoder(f, "deberta-v2", "text-classification", id2label=NLI_LABELS)
    for name, options in SENTENCE_VARIANTS.items():
        found[f"st/{name}"] = lambda f, o=options: build_sentence_transformer(f, **o)
    return found


# causal LM family -> (config class, model class, its extra config fields)
CAUSAL_LMS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 16, "sliding_window": 64}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {"pad_token_id": 0}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {}),
}


def _bpe_tokenizer(folder: Path) -> Any:
    """The tiny GPT-2's byte-level BPE tokenizer and chat template in ``folder`` (its weights left out)."""
    from harness.tiny_models import build_generator

    build_generator(folder)  # the tokenizer (and a GPT-2, replaced by the caller's model)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    return transformers.PreTrainedTokenizerFast.from_pretrained(folder)


def build_causal_lm(folder: Path, family: str) -> Path:
    """A tiny causal LM of ``family`` with the tiny GPT-2's BPE tokenizer and chat template; wide weights (std 0.2)
    so that its greedy tokens depend on the prompt."""
    tokenizer = _bpe_tokenizer(folder)
    config_class, model_class, extra = CAUSAL_LMS[family]
    torch.manual_seed(13)
    fields = {
        "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
        "tie_word_embeddings": True, "initializer_range": 0.2, "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.eos_token_id, **extra,
    }  # fmt: skip
    config = getattr(transformers, config_class)(**fields)
    getattr(transformers, model_class)(config).eval().save_pretrained(folder)
    return folder


# BART's and Marian's size fields (the same blocks)
_BART_SIZES: dict[str, Any] = {
    "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
}  # fmt: skip
# text2text family -> (config class, model class, its size fields)
SEQ2SEQ: dict[str, tuple[str, str, dict[str, Any]]] = {
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        {"d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 1, "num_heads": 2},
    ),
    "bart": ("BartConfig", "BartForConditionalGeneration", _BART_SIZES),
    "marian": ("MarianConfig", "MarianMTModel", _BART_SIZES),
}


def build_seq2seq(folder: Path, family: str) -> Path:
    """A tiny encoder-decoder of ``family`` with the tiny BART's byte-level BPE tokenizer."""
    from harness.tiny_models import build_seq2seq as tiny_bart

    tiny_bart(folder)  # the tokenizer (and a BART, replaced below)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(folder)
    config_class, model_class, sizes = SEQ2SEQ[family]
    torch.manual_seed(17)
    start = tokenizer.pad_token_id if family in ("t5", "marian") else tokenizer.eos_token_id
    config = getattr(transformers, config_class)(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id, decoder_start_token_id=start, **sizes,
    )  # fmt: skip
    if family == "marian":
        config.decoder_vocab_size = len(tokenizer)
    model = getattr(transformers, model_class)(config).eval()
    model.generation_config.forced_bos_token_id = None
    model.generation_config.forced_eos_token_id = None
    model.save_pretrained(folder)
    return folder
