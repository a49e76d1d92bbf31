"""A sentence-transformers folder read into the template's parameters, or refused by name.

Every module ``modules.json`` lists is either served (``tritonhf.runtime.sentence`` says how) or named in a
``GalleryError`` with the fix: a model is never served with fewer modules than the library runs. Both pooling
formats are read: the library's current ``"pooling_mode": "cls"`` (or a list) and the older
``pooling_mode_cls_token``-style flags.
"""

from __future__ import annotations

import json
from pathlib import Path

from tritonhf._files import read_json, read_json_object
from tritonhf.errors import GalleryError
from tritonhf.runtime.common import (
    PARAM_DEFAULT_PROMPT,
    PARAM_DENSE,
    PARAM_INCLUDE_PROMPT,
    PARAM_MAX_SEQ_LENGTH,
    PARAM_NORMALIZE,
    PARAM_POOLING,
    PARAM_PROMPTS,
)
from tritonhf.runtime.sentence import ACTIVATIONS, DENSE_WEIGHTS, POOLING_MODES

_LEGACY_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def is_sentence_transformers(folder: Path) -> bool:
    return (folder / "modules.json").is_file()


def options(folder: Path, default_prompt_name: str | None = None) -> dict[str, str]:
    """The parameters that make the template answer as ``SentenceTransformer(folder).encode`` does; {} for a
    folder that is not a sentence-transformers model (the template's defaults: mean pooling, normalised).
    ``default_prompt_name`` (``--default-prompt-name``) replaces the model's own default prompt."""
    if not is_sentence_transformers(folder):
        if default_prompt_name:
            raise GalleryError(f"--default-prompt-name {default_prompt_name!r}: {folder} declares no prompts.")
        return {}
    modules = read_json(folder / "modules.json")
    if not isinstance(modules, list):
        raise GalleryError(f"{folder}/modules.json is not a list of modules.")
    found: dict[str, str] = {PARAM_NORMALIZE: "false"}
    dense: list[str] = []
    for index, module in enumerate(modules):
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        path = str(module.get("path", "")) if isinstance(module, dict) else ""
        short = kind.rsplit(".", 1)[-1]
        if short == "Transformer":
            if index != 0 or path not in ("", "."):
                raise GalleryError(
                    f"{folder}: the Transformer module is in {path!r}, not at the folder's root; re-save the model "
                    "with a current sentence-transformers (model.save(folder)) and add that folder."
                )
        elif short == "Pooling":
            found.update(_pooling(folder / path))
        elif short == "Dense":
            dense.append(_dense(folder, path))
        elif short == "Normalize":
            if index != len(modules) - 1:
                raise GalleryError(f"{folder}: a module runs after Normalize ({modules[index + 1]}); not served.")
            found[PARAM_NORMALIZE] = "true"
        else:
            raise GalleryError(
                f"{folder}: the sentence-transformers module {kind or module!r} is not served by the "
                "feature-extraction template (it serves Transformer, Pooling, Dense and Normalize); its vectors "
                "would not be the library's. Serve it another way, or remove that module if the model allows."
            )
    if PARAM_POOLING not in found:
        raise GalleryError(f"{folder}: modules.json lists no Pooling module; the template cannot pool as it would.")
    if dense:
        found[PARAM_DENSE] = ",".join(dense)
    found.update(_prompts(folder, default_prompt_name))
    transformer = read_json_object(folder / "sentence_bert_config.json")
    text = (transformer.get("modality_config") or {}).get("text") or {}
    task, method = transformer.get("transformer_task", "feature-extraction"), text.get("method", "forward")
    if (
        task != "feature-extraction"
        or method != "forward"
        or text.get("method_output_name", "last_hidden_state") != ("last_hidden_state")
    ):
        raise GalleryError(
            f"{folder}/sentence_bert_config.json: the transformer runs as {task!r} through {method!r}; the template "
            "pools the last hidden state of a feature-extraction forward pass, so its vectors would not be the model's."
        )
    if "message" in (transformer.get("modality_config") or {}):
        raise GalleryError(
            f"{folder}: its tokenizer has a chat template, so sentence-transformers formats each text as a chat "
            "message through it; the template embeds the plain text, so its vectors would not be the model's. "
            "Remove the tokenizer's chat template (and the 'message' entry of sentence_bert_config.json's "
            "modality_config) if the model was trained on plain texts."
        )
    if isinstance(transformer.get("max_seq_length"), int):
        found[PARAM_MAX_SEQ_LENGTH] = str(transformer["max_seq_length"])
    if transformer.get("do_lower_case"):
        raise GalleryError(
            f"{folder}: sentence_bert_config.json sets do_lower_case, which the template does not apply; "
            "lower-case in the tokenizer's normalizer instead."
        )
    return found


def embedding_dimension(folder: Path, hidden_size: int) -> int:
    """The size of the vectors the model gives: its last Dense layer's, else the pooled modes' concatenation."""
    params = options(folder)
    if params.get(PARAM_DENSE):
        last = params[PARAM_DENSE].split(",")[-1]
        return int(read_json_object(folder / last / "config.json")["out_features"])
    return len(params.get(PARAM_POOLING, "mean").split(",")) * hidden_size


def _pooling(folder: Path) -> dict[str, str]:
    config = read_json_object(folder / "config.json")
    given = config.get("pooling_mode")
    if isinstance(given, str):
        modes = [given]
    elif isinstance(given, list):
        modes = [str(mode) for mode in given]
    else:
        modes = [mode for flag, mode in _LEGACY_FLAGS.items() if config.get(flag)] or ["mean"]
    unknown = [mode for mode in modes if mode not in POOLING_MODES]
    if unknown:
        raise GalleryError(f"{folder}/config.json: pooling {unknown[0]!r} is not one of {', '.join(POOLING_MODES)}.")
    # The library concatenates in its own order, whatever order the list gives.
    ordered = [mode for mode in POOLING_MODES if mode in modes]
    return {PARAM_POOLING: ",".join(ordered), PARAM_INCLUDE_PROMPT: "false" if config.get("include_prompt") is False
            else "true"}  # fmt: skip


def _dense(folder: Path, path: str) -> str:
    config = read_json_object(folder / path / "config.json")
    activation = str(config.get("activation_function", "torch.nn.modules.activation.Tanh"))
    if activation not in ACTIVATIONS:
        raise GalleryError(
            f"{folder}/{path}: the Dense activation {activation!r} is not served (served: "
            f"{', '.join(name.rsplit('.', 1)[-1] for name in ACTIVATIONS)})."
        )
    if config.get("use_residual") or config.get("module_input_name", "sentence_embedding") != "sentence_embedding":
        raise GalleryError(f"{folder}/{path}: a Dense module with a residual or on token vectors is not served.")
    if not (folder / path / DENSE_WEIGHTS).is_file():
        raise GalleryError(
            f"{folder}/{path} has no {DENSE_WEIGHTS} (pickled weights only?); re-save the model with a current "
            "sentence-transformers, which writes safetensors."
        )
    return path


def _prompts(folder: Path, default_prompt_name: str | None) -> dict[str, str]:
    config = read_json_object(folder / "config_sentence_transformers.json")
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict):
        raise GalleryError(f"{folder}/config_sentence_transformers.json: prompts is not an object.")
    prompts = {str(name): str(text) for name, text in prompts.items() if text is not None}
    default = default_prompt_name if default_prompt_name is not None else config.get("default_prompt_name")
    if default and default not in prompts:
        raise GalleryError(
            f"the default prompt {default!r} is not one of the model's prompts ({', '.join(prompts) or 'none'})."
        )
    found = {PARAM_PROMPTS: json.dumps(prompts, ensure_ascii=False)} if prompts else {}
    if default:
        found[PARAM_DEFAULT_PROMPT] = str(default)
    return found
