"""Tiny random HuggingFace models built locally (no hub): a few MB, a few seconds.

Weights are random, so labels are meaningless; what tests compare is the served
answer against the same model called directly with transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
)

WORDS = [
    "the",
    "a",
    "movie",
    "film",
    "is",
    "was",
    "absolutely",
    "wonderful",
    "terrible",
    "great",
    "bad",
    "good",
    "awful",
    "plot",
    "actors",
    "music",
    "paris",
    "london",
    "berlin",
    "alice",
    "bob",
    "carol",
    "works",
    "at",
    "lives",
    "in",
    "acme",
    "google",
    "visited",
    "met",
    "with",
    "and",
    "of",
    "to",
    "i",
    "you",
    "we",
    "they",
    "love",
    "hate",
    "like",
    "this",
    "that",
    "it",
    "very",
    "not",
    "really",
    "hello",
    "world",
    "say",
    "tell",
    "me",
    "story",
    "about",
    "cat",
    "dog",
]
CORPUS = [" ".join(WORDS[i : i + 7]) for i in range(len(WORDS))] * 20

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _wordpiece_tokenizer(folder: Path, max_length: int = 64, padding_side: str = "right") -> PreTrainedTokenizerFast:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"abcdefghijklmnopqrstuvwxyz"]
    vocab += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    vocab = list(dict.fromkeys(vocab))  # "a" and "i" are words and letters: one id each
    backend = Tokenizer(models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_length,
        padding_side=padding_side,
    )
    tokenizer.save_pretrained(folder)
    return tokenizer


def _bert_config(tokenizer: PreTrainedTokenizerFast, **extra: object) -> BertConfig:
    return BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        **extra,
    )


def build_classifier(folder: Path, multi_label: bool = False) -> Path:
    torch.manual_seed(0)
    tokenizer = _wordpiece_tokenizer(folder)
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    config = _bert_config(
        tokenizer,
        num_labels=3,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    return folder


def build_ner(folder: Path) -> Path:
    torch.manual_seed(1)
    tokenizer = _wordpiece_tokenizer(folder)
    labels = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC", 5: "B-ORG", 6: "I-ORG"}
    config = _bert_config(
        tokenizer, num_labels=len(labels), id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    model = BertForTokenClassification(config).eval()
    with torch.no_grad():  # make entities likely: favour the entity labels over "O"
        model.classifier.bias[0] = -1.0
    model.save_pretrained(folder)
    return folder


def build_encoder(folder: Path, pooling: str = "mean", normalize: bool = True, padding_side: str = "right") -> Path:
    """A bare BERT with a sentence-transformers pooling config (as all-MiniLM-L6-v2 has).

    ``padding_side="left"`` saves a tokenizer that pads on the left, which templates must override.
    """
    torch.manual_seed(2)
    tokenizer = _wordpiece_tokenizer(folder, padding_side=padding_side)
    BertModel(_bert_config(tokenizer)).eval().save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    pooling_config = {
        "word_embedding_dimension": 32,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
    }
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def build_generator(folder: Path) -> Path:
    """A tiny GPT-2 with a byte-level BPE trained on the fly, and a chat template."""
    torch.manual_seed(3)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import decoders

    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|endoftext|>", bos_token="<|endoftext|>", model_max_length=128
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_embd=32,
        n_layer=2,
        n_head=2,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    GPT2LMHeadModel(config).eval().save_pretrained(folder)
    return folder


# A reasoning model's chat template, as Qwen3's and DeepSeek-R1's: the generation prompt opens the thinking block,
# and enable_thinking=false closes it at once (the answer is then all content).
THINKER_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% else %}<think>{% endif %}"
    "{% endif %}"
)
THINKER_THINKS, THINKER_SAYS = "i like this", " hello world"


def build_thinker(folder: Path) -> Path:
    """A tiny GPT-2 that reasons by script: after the prompt's "<think>" it writes THINKER_THINKS, "</think>",
    THINKER_SAYS and ends; after "</think>" (thinking turned off) THINKER_SAYS. Its weights make each token's logits a
    table lookup (one-hot embeddings, blocks that add nothing, an output layer mapping each token to the next), so the
    answer is the same greedy or sampled, and a grammar's mask picks among the rest deterministically."""
    build_generator(folder)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    tokenizer.add_tokens(["<think>", "</think>"])  # plain added tokens (not special): decoded with the text
    tokenizer.chat_template = THINKER_TEMPLATE
    tokenizer.model_max_length = 1024  # room for the generic tool prompt (its position embeddings are zero)
    tokenizer.save_pretrained(folder)
    size = len(tokenizer)
    config = GPT2Config(vocab_size=size, n_positions=1024, n_embd=size, n_layer=1, n_head=1, tie_word_embeddings=False,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)  # fmt: skip
    model = GPT2LMHeadModel(config).eval()

    def words(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    # each token of the script -> the next one; every token in it once, so the table is a function
    ids = [*words("<think>"), *words(THINKER_THINKS), *words("</think>"), *words(THINKER_SAYS)]
    assert len(set(ids)) == len(ids), tokenizer.convert_ids_to_tokens(ids)
    with torch.no_grad():
        model.transformer.wte.weight.copy_(torch.eye(size))
        model.transformer.wpe.weight.zero_()
        for block in model.transformer.h:  # the residual stream passes through unchanged
            for layer in (block.attn.c_proj, block.mlp.c_proj):
                layer.weight.zero_()
                layer.bias.zero_()
        head = torch.zeros(size, size)
        head[tokenizer.eos_token_id, :] = 1.0  # any other token: the end of text
        for current, following in zip(ids, [*ids[1:], tokenizer.eos_token_id]):
            head[:, current] = 0.0
            head[following, current] = 10.0
        model.lm_head.weight.copy_(head)
    model.save_pretrained(folder)
    return folder


def build_llama_generator(folder: Path) -> Path:
    """A tiny Llama (the architecture of SmolLM2, TinyLlama) with the GPT-2 generator's BPE and chat
    template: what the OpenVINO engine's GGUF export takes. Wide weights (std 0.2) make its greedy
    tokens depend on the prompt instead of repeating one token."""
    from transformers import LlamaConfig, LlamaForCausalLM

    build_generator(folder)  # the tokenizer (and a GPT-2, replaced below)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    torch.manual_seed(11)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
        rope_theta=10000.0, tie_word_embeddings=True, initializer_range=0.2,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    return folder


def build_cross_encoder(folder: Path) -> Path:
    """A BERT cross-encoder with one relevance logit (as ms-marco MiniLM rerankers have)."""
    torch.manual_seed(4)
    tokenizer = _wordpiece_tokenizer(folder)
    BertForSequenceClassification(_bert_config(tokenizer, num_labels=1)).eval().save_pretrained(folder)
    return folder


def build_question_answering(folder: Path) -> Path:
    torch.manual_seed(5)
    tokenizer = _wordpiece_tokenizer(folder)
    BertForQuestionAnswering(_bert_config(tokenizer)).eval().save_pretrained(folder)
    return folder


def build_masked_lm(folder: Path) -> Path:
    torch.manual_seed(6)
    tokenizer = _wordpiece_tokenizer(folder)
    BertForMaskedLM(_bert_config(tokenizer)).eval().save_pretrained(folder)
    return folder


def build_seq2seq(folder: Path) -> Path:
    """A tiny BART (encoder-decoder) with a byte-level BPE trained on the fly."""
    torch.manual_seed(7)
    from tokenizers import decoders

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    special = ["<s>", "<pad>", "</s>", "<unk>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
        model_max_length=64,
    )  # fmt: skip
    tokenizer.save_pretrained(folder)
    config = BartConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=None,
    )  # fmt: skip
    model = BartForConditionalGeneration(config).eval()
    model.generation_config.forced_bos_token_id = None
    model.save_pretrained(folder)
    return folder


def build_image_classifier(folder: Path) -> Path:
    """A tiny ViT (32x32 images, 8x8 patches, 5 labels) and its image processor (PIL backend).

    Wide random weights (initializer_range 0.5) so that scores differ with the image: with the
    default 0.02 every image scores about 1/5 per label and label order is a coin toss.
    """
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessorPil

    torch.manual_seed(8)
    labels = ["cat", "dog", "car", "tree", "boat"]
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=len(labels), initializer_range=0.5,
        id2label=dict(enumerate(labels)), label2id={label: index for index, label in enumerate(labels)},
    )  # fmt: skip
    ViTForImageClassification(config).eval().save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def byte_level_clip_tokenizer(folder: Path, max_length: int) -> Any:
    """CLIP's tokenizer over a byte-level vocabulary (256 characters and their ``</w>`` forms) with no merges:
    every character a token, offline."""
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import CLIPTokenizer

    vocab: dict[str, int] = {}
    for suffix in ("", "</w>"):
        for char in sorted(ByteLevel.alphabet()):
            vocab[char + suffix] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(
        vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"), model_max_length=max_length
    )
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_clip(folder: Path) -> Path:
    """A tiny CLIP (32x32 images, 8x8 patches; texts of up to 32 characters) with its processor (PIL backend).

    Wide random weights (initializer_factor 5) so that label scores differ with the image."""
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel

    torch.manual_seed(9)
    tokenizer = byte_level_clip_tokenizer(folder, max_length=32)
    text = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "max_position_embeddings": 32, "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    vision = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2}  # fmt: skip
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16, initializer_factor=5.0)
    CLIPModel(config).eval().save_pretrained(folder)
    CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def build_siglip(folder: Path) -> Path:
    """A tiny SigLIP (sigmoid scores with a learnt bias; texts padded to 32 tokens, as SigLIP is trained) with
    CLIP's byte-level tokenizer (SigLIP's own is a sentencepiece model that cannot be made offline)."""
    from transformers import SiglipConfig, SiglipImageProcessorPil, SiglipModel

    torch.manual_seed(10)
    tokenizer = byte_level_clip_tokenizer(folder, max_length=32)
    text = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "max_position_embeddings": 32, "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id, "bos_token_id": tokenizer.bos_token_id}  # fmt: skip
    vision = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2}  # fmt: skip
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision, initializer_factor=5.0)).eval()
    with torch.no_grad():  # SigLIP's initial scale and bias (log 10, -10) make every sigmoid ~0: spread them
        model.logit_scale.fill_(1.0)
        model.logit_bias.fill_(0.0)
    model.save_pretrained(folder)
    SiglipImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


WHISPER_LANGUAGES = ("en", "de", "fr")


# Sizes: the tests' tiny one, and Whisper base's shapes for benchmarks (random weights, real work per token).
WHISPER_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"num_mel_bins": 16, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
             "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_target_positions": 128,
             "init_std": 0.3},
    "base": {"num_mel_bins": 80, "d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
             "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048,
             "max_target_positions": 448, "init_std": 0.02, "vocab_size": 51865},
}  # fmt: skip


def build_whisper(folder: Path, languages: tuple[str, ...] = WHISPER_LANGUAGES, size: str = "tiny") -> Path:
    """A tiny multilingual Whisper (16 mel bins, 2+2 layers, 128-token context; 30 s windows as the real
    one) with a byte-level tokenizer made here: 256 byte characters, Whisper's special tokens and its 1501
    timestamps (``<|0.00|>`` .. ``<|30.00|>``), no merges. ``size="base"``: Whisper base's shapes, the
    vocabulary filled to its 51,865 tokens with two-character tokens (so the output layer costs what it does).

    Random weights at Whisper's default scale emit only special tokens or one repeated character; wider
    weights (init_std 0.3), text restricted to a-z and space by ``suppress_tokens``, and one direction of
    the decoder's output that pulls every timestamp's logit down (a trained Whisper emits them only when
    asked) give text that depends on the audio, so parity tests mean something."""
    from tokenizers import AddedToken, decoders
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    torch.manual_seed(11)
    shape = dict(WHISPER_SIZES[size])
    alphabet = sorted(ByteLevel.alphabet())
    vocab = {char: index for index, char in enumerate(alphabet)}
    vocab[""] = len(vocab)  # a multilingual Whisper's vocabulary holds an empty token: how CTranslate2 tells
    # it from an English-only one (and detects languages only on one)
    specials = ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{code}|>" for code in languages], "<|translate|>",
                "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
                *[f"<|{index * 0.02:.2f}|>" for index in range(1501)]]  # fmt: skip
    pairs = (first + second for first in alphabet for second in alphabet)
    for _ in range(shape.pop("vocab_size", 0) - len(vocab) - len(specials)):  # base: filler tokens up to 51,865
        vocab[next(pairs)] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in specials])
    tokenizer = WhisperTokenizerFast(tokenizer_object=backend, unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                                     eos_token="<|endoftext|>", pad_token="<|endoftext|>")  # fmt: skip
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in specials[: len(languages) + 8]}
    extractor = WhisperFeatureExtractor(feature_size=shape["num_mel_bins"])
    WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    end, no_timestamps = ids["<|endoftext|>"], ids["<|notimestamps|>"]
    config = WhisperConfig(vocab_size=len(tokenizer), max_source_positions=1500, eos_token_id=end, pad_token_id=end,
                           decoder_start_token_id=ids["<|startoftranscript|>"], bos_token_id=end, **shape)  # fmt: skip
    model = WhisperForConditionalGeneration(config).eval()
    direction = torch.randn(config.d_model)
    direction /= direction.norm()
    with torch.no_grad():
        model.model.decoder.layer_norm.bias += 3 * direction
        model.model.decoder.embed_tokens.weight[no_timestamps + 1 :] -= 3 * direction
    text = {tokenizer.convert_tokens_to_ids(char) for char in "abcdefghijklmnopqrstuvwxyz\u0120"}  # \u0120: space
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=end, pad_token_id=end, bos_token_id=end,
        max_length=config.max_target_positions, is_multilingual=True,
        lang_to_id={f"<|{code}|>": ids[f"<|{code}|>"] for code in languages},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=no_timestamps, prev_sot_token_id=ids["<|startofprev|>"], max_initial_timestamp_index=50,
        suppress_tokens=[index for index in range(no_timestamps + 1) if index not in text and index != end],
        begin_suppress_tokens=[end],
    )  # fmt: skip
    model.save_pretrained(folder)
    return folder


def build_wav2vec2_ctc(folder: Path) -> Path:
    """A tiny wav2vec2 CTC model (3 conv layers, 80 samples per frame, 2 transformer layers) with a letter
    vocabulary made here; wide random weights (initializer_range 0.5) so the letters depend on the audio."""
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
        Wav2Vec2Processor,
    )

    torch.manual_seed(12)
    vocab = {
        "<pad>": 0,
        "<unk>": 1,
        "|": 2,
        **{char: index + 3 for index, char in enumerate("abcdefghijklmnopqrstuvwxyz'")},
    }
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), unk_token="<unk>", pad_token="<pad>",
                                     word_delimiter_token="|")  # fmt: skip
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                         return_attention_mask=False)  # fmt: skip
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    config = Wav2Vec2Config(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, conv_dim=(32, 32, 32), conv_stride=(5, 4, 4), conv_kernel=(10, 8, 8),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, pad_token_id=0,
                            feat_extract_norm="group", do_stable_layer_norm=False, initializer_range=0.5)  # fmt: skip
    Wav2Vec2ForCTC(config).eval().save_pretrained(folder)
    return folder


# Qwen2-VL's chat template (its processor's), videos left out: an image part is one <|image_pad|> between the vision
# markers, which the processor widens to the image's tokens.
QWEN_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_VL_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                   "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]  # fmt: skip


def build_qwen_vl(
    folder: Path, family: str = "qwen2_vl", hidden: int = 64, layers: int = 2, vision: int = 32, largest: int = 112
) -> Path:
    """A tiny Qwen2-VL (``family`` qwen2_vl), Qwen2.5-VL (qwen2_5_vl) or Qwen3-VL (qwen3_vl: the one whose served
    answers differed, runtime/vision.py): a byte-level BPE with Qwen's special tokens,
    ``hidden`` 64, two ``layers``, a two-layer vision tower of width ``vision``, and a processor that resizes images to
    56x56..``largest`` squared pixels (4 to 16 image tokens at 112). The processor is the PIL one (torchvision does
    not import beside this torch), no videos. Larger settings make a random model of a realistic cost (the bench)."""
    from tokenizers import decoders
    from transformers import AutoConfig, AutoModelForImageTextToText

    torch.manual_seed(11)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=QWEN_VL_SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS + ["describe the picture", "what colour is it"] * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=1024
    )
    tokenizer.chat_template = QWEN_VL_TEMPLATE
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_VL_SPECIAL}
    patch = 16 if family == "qwen3_vl" else 14
    tower: dict[str, Any] = {"depth": layers, "num_heads": 2, "patch_size": patch, "spatial_merge_size": 2,
                             "temporal_patch_size": 2}  # fmt: skip
    if family == "qwen2_vl":
        tower |= {"embed_dim": vision, "hidden_size": hidden, "mlp_ratio": 2}
    elif family == "qwen3_vl":  # learned position embeddings (a square grid), deepstack features from a layer
        tower |= {"hidden_size": vision, "out_hidden_size": hidden, "intermediate_size": 2 * vision,
                  "num_position_embeddings": 256, "deepstack_visual_indexes": [layers - 1]}  # fmt: skip
    else:
        tower |= {"hidden_size": vision, "out_hidden_size": hidden, "intermediate_size": 2 * vision,
                  "fullatt_block_indexes": [layers - 1], "window_size": 56}  # fmt: skip
    heads = max(4, hidden // 64)
    half = hidden // heads // 2  # the rotary half of a head, split over time, height and width
    text = {"vocab_size": len(tokenizer), "hidden_size": hidden, "intermediate_size": 2 * hidden,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": heads // 2,
            "max_position_embeddings": 4096,
            "rope_scaling": {"type": "mrope", "mrope_section": [half // 4, half // 4, half - 2 * (half // 4)]},
            "tie_word_embeddings": False, "eos_token_id": ids["<|im_end|>"],
            "bos_token_id": ids["<|endoftext|>"]}  # fmt: skip
    if family == "qwen3_vl":  # interleaved multimodal rotary sections, a head size of its own
        del text["rope_scaling"]
        text |= {
            "head_dim": hidden // heads,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5e6,
                "mrope_section": [half // 4, half // 4 + 1, half - 2 * (half // 4) - 1],
                "mrope_interleaved": True,
            },
        }
    config = AutoConfig.for_model(
        family,
        text_config=text,
        vision_config=tower,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        **({"tie_word_embeddings": False} if family == "qwen3_vl" else text),
    )
    AutoModelForImageTextToText.from_config(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    factor = 2 * patch  # a merged patch's side
    pixels = {"shortest_edge": (2 * factor) ** 2, "longest_edge": (largest // factor * factor) ** 2}
    processor = {"image_processor_type": "Qwen2VLImageProcessorPil", "processor_class": "Qwen2VLProcessor",
                 "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
                 "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                 "merge_size": 2, "patch_size": patch, "temporal_patch_size": 2, "resample": 3,
                 "rescale_factor": 1 / 255, "size": pixels, "min_pixels": pixels["shortest_edge"],
                 "max_pixels": pixels["longest_edge"]}  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": QWEN_VL_TEMPLATE}))
    generation = {"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"], "do_sample": False}
    (folder / "generation_config.json").write_text(json.dumps(generation))
    return folder
