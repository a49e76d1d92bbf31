"""What a sentence-transformers model does after its transformer, as its folder declares it.

``modules.json`` lists the modules ``SentenceTransformer.encode`` runs in order: the transformer, then
``Pooling`` (one or several modes, concatenated in the library's order), any ``Dense`` layers (a linear map and
its activation) and ``Normalize``. ``config_sentence_transformers.json`` names the prompts and the default one;
``sentence_bert_config.json`` the longest input. ``gallery add`` reads these (``tritonhf.gallery.sentence``) into
the parameters below, and the templates apply them here, so a served vector is the library's vector.

Pooling follows the library's padded path for right-padded rows (the templates pad on the right): ``cls`` is the
first pooled token, ``lasttoken`` the last real one, ``weightedmean`` weighs a token by its position plus one,
and a prompt that is not included (``include_prompt`` false) is left out of every mode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .common import (
    PARAM_DEFAULT_PROMPT,
    PARAM_DENSE,
    PARAM_INCLUDE_PROMPT,
    PARAM_NORMALIZE,
    PARAM_POOLING,
    PARAM_PROMPTS,
)

# The library's concatenation order when several modes are on.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# Dense activations by the name the library saves (``fullname`` of the module), as torch function names.
ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.activation.SiLU": "silu",
}
DENSE_WEIGHTS = "model.safetensors"


def pooling_modes(value: str) -> tuple[str, ...]:
    """The modes of a ``pooling`` parameter, checked (a clear error at load time, naming the bad one)."""
    modes = tuple(mode.strip() for mode in value.split(",") if mode.strip()) or ("mean",)
    for mode in modes:
        if mode not in POOLING_MODES:
            raise ValueError(f"config parameter 'pooling' has {mode!r}; the modes are {', '.join(POOLING_MODES)}.")
    return modes


def pool(tokens: Any, attention_mask: Any, modes: str | Sequence[str], skip: Sequence[int] | None = None) -> Any:
    """One vector per row of right-padded token vectors [rows, length, dim]: each mode's (``modes``: names, or a
    ``pooling`` parameter's value), concatenated.

    ``skip`` (one count per row) leaves that many first tokens out, as the library leaves out a prompt when its
    Pooling has ``include_prompt`` false; ``weightedmean`` keeps the other tokens' position weights then.
    """
    import torch

    if isinstance(modes, str):
        modes = pooling_modes(modes)
    mask = attention_mask.to(tokens.dtype)
    if skip is not None and any(skip):
        positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
        counts = torch.tensor(list(skip), device=mask.device).unsqueeze(1)
        mask = mask * (positions >= counts).to(mask.dtype)
    weights = mask.unsqueeze(-1)
    vectors = []
    for mode in modes:
        if mode == "cls":
            first = mask.argmax(dim=1)
            vectors.append(tokens[torch.arange(tokens.shape[0]), first])
        elif mode == "max":
            vectors.append(tokens.masked_fill(weights == 0, float("-inf")).max(dim=1).values)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = (tokens * weights).sum(dim=1)
            count = weights.sum(dim=1).clamp(min=1e-9)
            vectors.append(total / (count if mode == "mean" else count.sqrt()))
        elif mode == "weightedmean":
            positions = torch.arange(1, tokens.shape[1] + 1, device=tokens.device, dtype=tokens.dtype)
            weighted = weights * positions.view(1, -1, 1)
            vectors.append((tokens * weighted).sum(dim=1) / weighted.sum(dim=1).clamp(min=1e-9))
        elif mode == "lasttoken":
            found, index = mask.flip(1).max(dim=1)
            last = torch.where(found == 0, tokens.shape[1] - 1, tokens.shape[1] - index - 1)
            vectors.append((tokens * weights)[torch.arange(tokens.shape[0]), last])
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
    return torch.cat(vectors, dim=-1)


class Dense:
    """One Dense module: ``activation(x @ weight.T + bias)``, read from its folder (config.json, model.safetensors)."""

    def __init__(self, folder: Path) -> None:
        import torch
        from safetensors.torch import load_file

        config = json.loads((folder / "config.json").read_text())
        name = str(config.get("activation_function", "torch.nn.modules.activation.Tanh"))
        if name not in ACTIVATIONS:
            raise ValueError(f"{folder.name}: activation {name!r} is not one of {', '.join(ACTIVATIONS)}.")
        if config.get("use_residual"):
            raise ValueError(f"{folder.name}: a Dense module with use_residual is not served.")
        tensors = load_file(str(folder / DENSE_WEIGHTS))
        self.weight = tensors["linear.weight"].float()
        self.bias = tensors["linear.bias"].float() if "linear.bias" in tensors else None
        self.activation = ACTIVATIONS[name]
        self.out_features = int(self.weight.shape[0])
        self._torch = torch

    def __call__(self, vectors: Any) -> Any:
        torch = self._torch
        bias = None if self.bias is None else self.bias.to(vectors.device)
        out = torch.nn.functional.linear(vectors, self.weight.to(vectors.device), bias)
        return out if self.activation == "identity" else getattr(torch.nn.functional, self.activation)(out)


class SentenceHead:
    """Pooling, Dense layers and prompts of a sentence-transformers model, from a template's parameters.

    ``vectors(tokens, mask, skip)`` gives the vectors before Normalize (``normalize`` says whether the model
    normalises by default); ``prompt(name)`` the text put before an input and the tokens it takes.
    """

    def __init__(self, params: Mapping[str, str], folder: str, tokenizer: Any, hidden_size: int) -> None:
        self.modes = pooling_modes(params.get(PARAM_POOLING, "mean"))
        self.include_prompt = params.get(PARAM_INCLUDE_PROMPT, "true") != "false"
        self.dense = [Dense(Path(folder) / part) for part in params.get(PARAM_DENSE, "").split(",") if part]
        self.normalize = params.get(PARAM_NORMALIZE, "true") == "true"
        self.prompts: dict[str, str] = json.loads(params.get(PARAM_PROMPTS) or "{}")
        self.default_prompt = params.get(PARAM_DEFAULT_PROMPT, "")
        if self.default_prompt and self.default_prompt not in self.prompts:
            raise ValueError(f"config parameter {PARAM_DEFAULT_PROMPT!r} names {self.default_prompt!r}, not a prompt.")
        self.tokenizer = tokenizer
        self.dim = self.dense[-1].out_features if self.dense else len(self.modes) * hidden_size
        self._lengths: dict[str, int] = {}

    def prompt(self, name: str) -> tuple[str, int]:
        """The text of prompt ``name`` ("" for the model's default) and how many of its tokens pooling leaves out;
        a KeyError naming the prompts there are when the model has no such prompt."""
        name = name or self.default_prompt
        if not name:
            return "", 0
        if name not in self.prompts:
            known = ", ".join(sorted(self.prompts)) or "none"
            raise KeyError(f"prompt_name {name!r} is not one of this model's prompts ({known}).")
        text = self.prompts[name]
        if self.include_prompt or not text:
            return text, 0
        if text not in self._lengths:  # the library's count: the prompt's tokens without a trailing special one
            ids = self.tokenizer(text)["input_ids"]
            special = set(getattr(self.tokenizer, "all_special_ids", ()))
            self._lengths[text] = len(ids) - (1 if ids and ids[-1] in special else 0)
        return text, self._lengths[text]

    def vectors(self, tokens: Any, attention_mask: Any, skip: Sequence[int] | None = None) -> Any:
        """Pooled vectors through the Dense layers, not normalised."""
        vectors = pool(tokens, attention_mask, self.modes, skip)
        for layer in self.dense:
            vectors = layer(vectors)
        return vectors
