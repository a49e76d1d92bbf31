"""The llama.cpp engine's add-time side: what a device and an install allow, its weights (the GGUF file as it is:
every architecture and quant type llama.cpp reads, no export) and their check.

The check loads the file as the template serves it (``templates/text_generation/llamacpp_engine.py``: llama-server's
slots through ``xllamacpp``, a key/value cache per slot, flash attention off) and asks it for greedy answers to a few
prompts, each alone and all together; the config reports how many agree. On the batch-invariant settings (the
default) the model serves one sequence at a time (``max_running`` 1), each answer as llama-server alone gives it:
llama.cpp does not promise invariance across batch sizes, and its llamafile matrix kernels (Q4_0, Q5_0, Q8_0, F16
...) run only for batches larger than one, on the output matrix of most files (SmolLM2's Q4_1 file ties it to a
Q8_0 embedding; Gemma 3's Q4_K_M too): the real-model guard saw an answer turn at a near-tie with 8 slots. With
``--param batch_invariant=false`` the slots compute together.
"""

from __future__ import annotations

import json
import secrets
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import installed, sources
from tritonhf.gallery.families.generation.gguf_export import GGUF_FILE
from tritonhf.gallery.families.generation.measure import PROMPTS
from tritonhf.gallery.families.generation.params import PARAM_ENGINE_CHECK, PARAM_ENGINE_REASON
from tritonhf.gallery.timing import threads
from tritonhf.runtime.openvino_settings import batch_invariant
from tritonhf.tasks import PARAM_ENGINE, PARAM_GGUF_FILE, VENDORED_WEIGHTS_DIR

if TYPE_CHECKING:
    from tritonhf.gallery.families.generation.measure import Runner
    from tritonhf.gallery.request import AddRequest

CHECK_PROMPTS = PROMPTS[:4]  # the measurement's first four
CHECK_TOKENS = 24
CHECK_CONTEXT = 256  # tokens per slot for the check: its prompts and answers are short


def unavailable(request: AddRequest) -> str | None:
    """Why the llama.cpp engine cannot serve a model here; None: it can."""
    if request.options.device == "gpu":
        return "--device gpu: the llama.cpp engine here is xllamacpp's CPU build"
    if not request.vendor:
        return "--no-vendor keeps a reference, and the llama.cpp engine needs its GGUF file in the repository"
    return installed.llamacpp_missing()


def source(request: AddRequest, progress: Progress) -> tuple[sources.ResolvedSource, str | None, str | None]:
    """The source as this engine reads it: a GGUF file as it is (its tokenizer and config read beside it); any other
    source cannot be served (why returned)."""
    path = Path(request.source).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        return sources.ResolvedSource(request.source, "dir", path), None, "the llama.cpp engine serves a GGUF file"
    metadata = sources.gguf_metadata(path.absolute(), progress)
    return sources.ResolvedSource(request.source, "gguf", metadata), None, None


def weights(
    request: AddRequest, weight_format: str, resolved: sources.ResolvedSource, version_dir: Path, progress: Progress
) -> tuple[dict[str, str], sources.ResolvedSource]:
    """model.gguf (the file as it is) with the tokenizer and config, and its check: greedy answers alone against
    together, reported. On the batch-invariant settings one sequence runs at a time (``max_running`` 1).
    ModelSourceError when llama.cpp cannot load it, or max_running above 1 is asked on those settings."""
    weights_dir = version_dir / VENDORED_WEIGHTS_DIR
    sources.vendor_metadata(resolved.folder, weights_dir)
    served, given = weights_dir / GGUF_FILE, Path(resolved.given).expanduser()
    copied = served.is_file() and (served.stat().st_size, served.stat().st_mtime) == (
        given.stat().st_size,
        given.stat().st_mtime,
    )
    if not copied:  # under --engine auto an engine before this one may have copied the same file already
        progress.step(f"Copying {given.name} into the repository as {served.name}")
        shutil.copy2(given, served)
    try:
        invariant = batch_invariant(request.params)
    except ValueError as exc:
        raise GalleryError(f"--param {exc}.") from exc
    progress.step("Checking llama.cpp's greedy answers alone against the same answers computed together")
    checked = check(served, weights_dir, request.options.instances)
    progress.step(checked.summary)
    found = {PARAM_ENGINE: "llamacpp", PARAM_GGUF_FILE: served.name}
    how = "its slots computed together (batch_invariant=false)"
    if invariant:  # served as llama-server alone answers: one sequence at a time
        if request.params.get("max_running", "1") != "1":
            raise ModelSourceError(
                "the llama.cpp engine serves one sequence at a time on the batch-invariant settings (its matrix "
                "kernels for a batch differ from one token's): drop --param max_running, or add --param "
                "batch_invariant=false"
            )
        found["max_running"] = "1"
        how = (
            "one sequence at a time, as llama-server alone answers: llama.cpp's matrix kernels for a batch differ "
            "from one token's for the Q8_0, Q4_0, Q5_0 and F16 tensors most files hold (the tied output matrix), so "
            "an answer computed beside others can turn at a near-tie (batch_invariant=false computes the slots "
            "together)"
        )
    found[PARAM_ENGINE_CHECK] = f"llama.cpp on {served.name} ({checked.file}); {checked.summary}; {how}"
    return found, resolved


class Checked:
    """What the check found: the file's architecture and quant type, its load time, and whether each prompt's greedy
    answer alone equals the one computed with the others."""

    def __init__(self, file: str, loaded_s: float, alone: list[str], together: list[str]) -> None:
        self.file, self.loaded_s, self.alone, self.together = file, loaded_s, alone, together

    @property
    def invariant(self) -> bool:
        return self.alone == self.together and all(self.alone)

    @property
    def summary(self) -> str:
        equal = sum(a == b for a, b in zip(self.alone, self.together))
        return (
            f"loads in {self.loaded_s:.1f} s; greedy answers alone equal to together {equal}/{len(self.alone)} "
            f"({len(self.alone)} prompts x {CHECK_TOKENS} tokens, a key/value cache per slot)"
        )


def server(gguf_file: Path, slots: int, context: int, instances: int = 1) -> Any:
    """An ``xllamacpp.Server`` as the template makes it (a cache per slot, flash attention off, the instance's threads,
    no prompt cache)."""
    import xllamacpp

    common = xllamacpp.CommonParams()
    common.model.path = str(gguf_file)
    common.n_parallel = slots
    common.n_ctx = slots * context
    common.kv_unified = False
    common.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as the template does
    common.cache_prompt = False
    common.cpuparams.n_threads = common.cpuparams_batch.n_threads = threads(instances)
    common.api_keys = [secrets.token_hex(16)]
    common.verbosity = -1
    try:
        return xllamacpp.Server(common)
    except Exception as exc:  # llama.cpp's own load failure, of whatever kind
        raise ModelSourceError(f"llama.cpp could not load {gguf_file.name}: {exc}") from exc


def runner(gguf_file: Path, folder: Path, params: Mapping[str, str], request: AddRequest) -> Runner:
    """How ``--engine auto`` times this engine: its slots as served (``max_running`` of them: one on the batch-invariant
    settings, the sequences one after another), every prompt one completion, each to exactly ``tokens`` greedy
    tokens."""
    slots = int(params.get("max_running", request.params.get("max_running", "8")))
    running = server(gguf_file, slots, CHECK_CONTEXT, request.options.instances)
    return lambda prompt_ids, tokens: greedy(running, prompt_ids, tokens, together=slots > 1, ignore_eos=True)


def greedy(
    running: Any, prompt_ids: list[list[int]], tokens: int, together: bool, ignore_eos: bool = False
) -> list[str]:
    """Each prompt's greedy answer as llama.cpp streams it (its text): one completion after another, or all at once
    (one thread each)."""
    found: list[list[str]] = [[] for _ in prompt_ids]

    def one(index: int) -> None:
        body = {"prompt": prompt_ids[index], "n_predict": tokens, "stream": True, "temperature": 0,
                "cache_prompt": False, "ignore_eos": ignore_eos}  # fmt: skip

        def on_chunk(chunk: str) -> bool:
            found[index] += [str(choice.get("text") or "") for choice in json.loads(chunk).get("choices", [])]
            return False

        running.handle_completions(json.dumps(body), on_chunk)

    if not together:
        for index in range(len(prompt_ids)):
            one(index)
    else:
        workers = [threading.Thread(target=one, args=(index,)) for index in range(len(prompt_ids))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    return ["".join(pieces) for pieces in found]


def check(gguf_file: Path, folder: Path, instances: int = 1) -> Checked:
    """Greedy answers of ``CHECK_PROMPTS`` alone and together on the file, as served; ModelSourceError when llama.cpp
    cannot load it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt_ids = [list(tokenizer(prompt)["input_ids"]) for prompt in CHECK_PROMPTS]
    file = sources.gguf_kind(gguf_file)
    started = time.monotonic()
    running = server(gguf_file, len(prompt_ids), CHECK_CONTEXT, instances)
    loaded = time.monotonic() - started
    alone = greedy(running, prompt_ids, CHECK_TOKENS, together=False)
    together = greedy(running, prompt_ids, CHECK_TOKENS, together=True)
    del running
    return Checked(file, loaded, alone, together)


def notes(params: Mapping[str, str]) -> list[str]:
    """The config's lines about a model served by the llama.cpp engine (and why not an engine before it)."""
    reason = params.get(PARAM_ENGINE_REASON)
    because = [f"Engine: llama.cpp, because {reason}."] if reason and not reason.startswith("--engine") else []
    return [
        *because,
        f"Engine: llama.cpp's slots over {params.get(PARAM_GGUF_FILE, GGUF_FILE)} (llamacpp_engine.py, xllamacpp); "
        "parameters max_running (slots), context (tokens per sequence), prefix_caching (true: a prompt that repeats "
        "an earlier one's start reuses its slot's cache; off by default on the batch-invariant settings), "
        "batch_invariant (false: one cache shared by the slots).",
    ]
