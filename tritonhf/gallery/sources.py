"""Where a model's weights come from, and copying them into a repository (vendoring).

A source is one of:
* a local folder in HuggingFace layout (config.json, tokenizer files, *.safetensors);
* a ``.gguf`` file: converted once to a safetensors folder, cached by the file's hash;
* a hub id (``org/name``): downloaded with huggingface_hub, which shows progress.

Vendoring copies only what serving needs, and only safetensors weights unless pickled
weights are explicitly allowed (a pickle can run code when it is loaded).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonhf._files import read_json_object
from tritonhf._progress import Progress
from tritonhf.bootstrap.installation.sources import cache_dir
from tritonhf.errors import ModelSourceError

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
# Files a served model needs besides weights: configs (a sentence-transformers model's modules' among them), tokenizers.
_KEEP = re.compile(
    r"^(.*\.json|.*\.jinja|.*\.txt|.*\.model|.*\.tiktoken|merges\.txt|vocab\..*|tokenizer\..*|1_Pooling/config\.json)$"
)
_SAFE_WEIGHTS = re.compile(r"^.*\.safetensors$")
_PICKLE_WEIGHTS = re.compile(r"^.*\.(bin|pt|pth|ckpt)$")
_SKIP = {"README.md", ".gitattributes", "data_config.json", "training_args.bin"}


@dataclass(frozen=True)
class ResolvedSource:
    """A source as a local folder, plus what the user gave (recorded in the config)."""

    given: str
    kind: str  # "dir" | "gguf" | "hub"
    folder: Path


def is_hub_id(source: str) -> bool:
    return bool(HUB_ID.match(source)) and ".." not in source


def resolve(source: str, revision: str | None, progress: Progress, trust_remote_code: bool = False) -> ResolvedSource:
    """A local folder holding the model's files, downloading or converting when needed."""
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(
                f"{path} has no config.json: it is not a HuggingFace model folder. Give a folder "
                "written by save_pretrained, a .gguf file, or a hub id."
            )
        return ResolvedSource(source, "dir", path.absolute())
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelSourceError(f"GGUF file {path} does not exist.")
        return ResolvedSource(source, "gguf", convert_gguf(path.absolute(), progress))
    if path.exists() or source.startswith((".", "/", "~")):
        raise ModelSourceError(f"{source} is neither a model folder nor a .gguf file.")
    if not is_hub_id(source):
        raise ModelSourceError(f"{source!r} is not a local folder, a .gguf file, or a valid hub id (org/name).")
    return ResolvedSource(source, "hub", download(source, revision, progress))


def download(repo_id: str, revision: str | None, progress: Progress) -> Path:
    """``snapshot_download`` of the files serving needs; a clear error without network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    progress.step(f"Downloading {repo_id} from the HuggingFace hub")
    # *.json and *.safetensors match in sub-folders too: a sentence-transformers model's 1_Pooling/, 2_Dense/ ...
    patterns = ["*.json", "*.txt", "*.model", "*.safetensors", "tokenizer*", "vocab*", "merges.txt"]
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
    except RepositoryNotFoundError as exc:
        raise ModelSourceError(f"The hub has no model {repo_id!r} (or it is private). Check the id.") from exc
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise ModelSourceError(
            f"Could not download {repo_id!r} from the HuggingFace hub: {type(exc).__name__}. Without "
            "network access, pass a local folder (a model saved with save_pretrained) or a .gguf file "
            "as --model instead."
        ) from exc


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _built_once(target: Path, what: str, build: Callable[[Path], None]) -> Path:
    """``target`` (a folder in the cache), built by ``build(staging)`` unless already there; a failed or
    interrupted build leaves nothing behind."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # A staging folder of its own: another process may be building the same target right now.
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        build(staging)
        try:
            staging.replace(target)  # a rename: the cache never holds half a folder
        except OSError:
            if not (target / "config.json").is_file():
                raise
            # the other process finished first: its folder has the same content
    except (ImportError, OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelSourceError(f"Could not {what}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def convert_gguf(path: Path, progress: Progress) -> Path:
    """A safetensors folder converted from a GGUF file; done once, cached by content hash.

    transformers dequantises GGUF on load but refuses to save such a model; a fresh model
    built from the config (without ``quantization_config``) takes its weights and saves.
    """
    target = cache_dir() / "gguf" / f"{path.stem}-{_file_hash(path)}"

    def build(staging: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        progress.step(f"Converting {path.name} to safetensors (once; cached in {target.parent})")
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
        fresh.load_state_dict(loaded.state_dict())
        fresh.generation_config = loaded.generation_config
        fresh.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)

    return _built_once(target, f"convert {path} from GGUF", build)


def gguf_metadata(path: Path, progress: Progress) -> Path:
    """A folder with the GGUF file's tokenizer and config in HuggingFace layout, and no weights: what
    the openvino engine needs beside the GGUF file it loads. Done once, cached by content hash."""
    target = cache_dir() / "gguf" / f"{path.stem}-{_file_hash(path)}-metadata"

    def build(staging: Path) -> None:
        from transformers import AutoConfig, AutoTokenizer

        progress.step(f"Reading the tokenizer and config of {path.name} (once; cached in {target.parent})")
        AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(staging)
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(staging)

    return _built_once(target, f"read the tokenizer and config of {path}", build)


def vendor_metadata(source: Path, destination: Path) -> list[str]:
    """Copy a model folder's configs and tokenizer, not its weights (the openvino engine reads a GGUF file)."""
    names = [p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file() and p.name not in _SKIP]
    keep = [name for name in names if _KEEP.match(name) and ".cache" not in name]
    destination.mkdir(parents=True, exist_ok=True)
    for name in keep:
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, destination / name)
    return keep


def vendor(source: Path, destination: Path, allow_pickle: bool = False) -> list[str]:
    """Copy what serving needs from ``source`` into ``destination``; return the copied names."""
    files = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file() and p.name not in _SKIP)
    # huggingface_hub keeps download metadata in .cache/ inside a local folder: not model files.
    relative = [p.as_posix() for p in files if ".cache" not in p.parts]
    safe = [name for name in relative if _SAFE_WEIGHTS.match(name)]
    pickled = [name for name in relative if _PICKLE_WEIGHTS.match(name)]
    if not safe and pickled and not allow_pickle:
        raise ModelSourceError(
            f"{source} has only pickled weights ({', '.join(pickled[:3])}); loading a pickle can run code. "
            "Convert the model to safetensors, or pass --allow-pickle if you trust it."
        )
    if not safe and not pickled:
        raise ModelSourceError(f"{source} holds no weights (*.safetensors).")
    keep = [
        name
        for name in relative
        if _KEEP.match(name) or name in safe or (allow_pickle and not safe and name in pickled)
    ]
    destination.mkdir(parents=True, exist_ok=True)
    for name in keep:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target)
    return keep


def drop_source_weights(folder: Path) -> None:
    """The model's own weights in ``folder``, no longer read once it is served from a converted file (model.onnx,
    model.gguf, an OpenVINO or CTranslate2 export): safetensors and pickled files at its top. Configs, tokenizer
    and processor stay, and so do a sentence-transformers model's module folders (a Dense layer's weights)."""
    for name in sorted(folder.iterdir()):
        if name.is_file() and (_SAFE_WEIGHTS.match(name.name) or _PICKLE_WEIGHTS.match(name.name)):
            name.unlink()


def model_config(folder: Path) -> dict[str, Any]:
    return read_json_object(folder / "config.json")


def chat_template(folder: Path) -> str:
    """The tokenizer's chat template as transformers reads it (chat_template.jinja, else tokenizer_config.json's
    ``chat_template``, its default when a list), or "" when it has none."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    found = read_json_object(folder / "tokenizer_config.json").get("chat_template") or ""
    if isinstance(found, list):  # named templates: the default one
        found = next((item.get("template", "") for item in found if item.get("name") == "default"), "")
    return str(found)


def gguf_kind(gguf_file: Path) -> str:
    """The GGUF file's architecture and quant type, as its header says (``llama Q4_1``)."""
    import gguf

    try:
        fields = gguf.GGUFReader(str(gguf_file)).fields
        architecture = bytes(fields["general.architecture"].parts[-1]).decode()
        kind = int(fields["general.file_type"].parts[-1][0]) if "general.file_type" in fields else None
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelSourceError(f"{gguf_file.name} has no GGUF header that says its kind: {exc}") from exc
    try:
        name = gguf.LlamaFileType(kind).name.removeprefix("MOSTLY_") if kind is not None else "of an unnamed quant type"
    except ValueError:
        name = f"of file type {kind}"
    return f"{architecture} {name}"
