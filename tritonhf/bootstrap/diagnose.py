"""Known failure lines of a server log, each mapped to a cause and a fix in plain words.

Every rule is a regular expression over one log line (the texts were recorded from
Triton 2.51 running natively) and a function that turns its match into a ``Diagnosis``.
Tests feed recorded lines to ``diagnose`` so that a rule cannot silently rot.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tritonhf.tasks import ONNX_PART_SUFFIX


@dataclass(frozen=True)
class Diagnosis:
    """One understood failure: which model (if any), what happened, what to do."""

    cause: str
    fix: str
    model: str | None = None
    port: int | None = None  # the port another process holds, for "already in use"

    def __str__(self) -> str:
        where = f"model '{self.model}': " if self.model else ""
        return f"{where}{self.cause}\n  fix: {self.fix}"


Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], Diagnosis]]


def _config_parse_error(match: re.Match[str]) -> Diagnosis:
    line, column, detail = match.group("line"), match.group("col"), match.group("detail")
    return Diagnosis(
        cause=f"config.pbtxt does not parse (line {line}, column {column}): {detail}",
        fix="Correct that line of config.pbtxt; field names are those of Triton's ModelConfig. "
        "`tritonhf gallery validate` checks every config without starting a server.",
    )


def _backend_missing(match: re.Match[str]) -> Diagnosis:
    backend, model = match.group("backend"), match.group("model")
    if backend == "onnxruntime":  # most likely a part written by `gallery add --backend onnx`
        return Diagnosis(
            cause="it needs Triton's onnxruntime backend, which this server does not have",
            fix=f"Re-add model '{model.removesuffix(ONNX_PART_SUFFIX)}' with `--backend onnx --onnx-runtime python` "
            "(onnxruntime inside the Python backend), or run `tritonhf bootstrap --from-dir` with a server that "
            "has backends/onnxruntime.",
            model=model,
        )
    return Diagnosis(
        cause=f"no backend named '{backend}' in the server's backends folder",
        fix='Set `backend: "python"` in config.pbtxt (the only backend this install ships), '
        "or run `tritonhf bootstrap --from-dir` with a server that has that backend.",
        model=model,
    )


_RULES: list[Rule] = [
    (
        re.compile(r"Error parsing text-format inference\.ModelConfig: (?P<line>\d+):(?P<col>\d+): (?P<detail>.*)"),
        _config_parse_error,
    ),
    (
        re.compile(r"Poll failed for model directory '(?P<model>[^']+)': failed to read text proto"),
        lambda m: Diagnosis(
            cause="its config.pbtxt could not be read as Triton's ModelConfig text format",
            fix="See the parse error above for the line; `tritonhf gallery validate` shows it too.",
            model=m.group("model"),
        ),
    ),
    (
        re.compile(
            r"failed to load '(?P<model>[^']+)'.*unable to find backend library for backend '(?P<backend>[^']+)'"
        ),
        _backend_missing,
    ),
    (
        re.compile(r"failed to load model '(?P<model>[^']+)': at least one version must be available"),
        lambda m: Diagnosis(
            cause="its folder has no version folder with the model in it",
            fix=f"Put model.py (or the model file) in {m.group('model')}/1/: Triton serves numbered version "
            "folders. `tritonhf gallery validate` checks the layout.",
            model=m.group("model"),
        ),
    ),
    (
        re.compile(r"failed to load '(?P<model>[^']+)'.*ModuleNotFoundError: No module named '(?P<module>[^'\\]+)'"),
        lambda m: Diagnosis(
            cause=f"model.py imports '{m.group('module')}', which the stub's Python environment lacks",
            fix=f"Install it into the environment tritonhf runs in (`python -m pip install "
            f"{m.group('module').split('.')[0]}`), then start again; `tritonhf doctor` names that environment.",
            model=m.group("model"),
        ),
    ),
    (
        re.compile(r"unpack_from requires a buffer of at least|output tensor shape does not match size of output"),
        lambda m: Diagnosis(
            cause="the stub crashed decoding a tensor: numpy 2 is installed in the stub's environment",
            fix="Install numpy < 2 in that environment: python -m pip install 'numpy<2'",
        ),
    ),
    (
        re.compile(r"Stub process '(?P<model>[^']+?)(?:_\d+_\d+)?' is not healthy"),
        lambda m: Diagnosis(
            cause="its stub process died (killed for memory, a crash in a native library, or numpy 2)",
            fix="Check `dmesg` for the OOM killer and `tritonhf doctor` for numpy; restart the server "
            "or unload and load the model to bring it back.",
            model=m.group("model"),
        ),
    ),
    (
        re.compile(r"Failed to increase the shared memory pool size|[Cc]ould not allocate.*shared memory|shm_open"),
        lambda m: Diagnosis(
            cause="the shared memory between server and stub ran out (/dev/shm is too small)",
            fix="Give /dev/shm more room (docker: --shm-size=1g; elsewhere: mount -o remount,size=1G "
            "/dev/shm), or send smaller batches.",
        ),
    ),
    (
        re.compile(r"CUDA out of memory|OutOfMemoryError"),
        lambda m: Diagnosis(
            cause="the GPU ran out of memory",
            fix="Use fewer instances (--instances 1), a smaller --max-batch-size, or --device cpu.",
        ),
    ),
    (
        re.compile(r"failed to start (?P<service>\w+) service: .*Socket '(?P<address>[^']+)' already in use"),
        lambda m: Diagnosis(
            cause=f"the {m.group('service')} port {m.group('address')} is already taken by another process",
            fix="Stop that process, or start with another port (--http-port/--grpc-port/--metrics-port auto).",
            port=int(m.group("address").rsplit(":", 1)[1]),
        ),
    ),
    (
        re.compile(r"version `(?P<symbol>GLIBC(?:XX)?_[\d.]+)' not found"),
        lambda m: Diagnosis(
            cause=f"this system's C/C++ runtime is older than the server needs ({m.group('symbol')} missing)",
            fix="Run on glibc >= 2.35 (Ubuntu 22.04+, Debian 12+, Colab), or use --from-dir with a "
            "server built for this system.",
        ),
    ),
    (
        re.compile(r"undefined symbol: _Py\w+"),
        lambda m: Diagnosis(
            cause="the stub loaded a libpython that does not match the interpreter's standard library",
            fix="Start the server through tritonhf (it puts the interpreter's own libpython first on "
            "LD_LIBRARY_PATH); check `tritonhf doctor`.",
        ),
    ),
    (
        re.compile(r"error while loading shared libraries: (?P<lib>\S+): cannot open shared object"),
        lambda m: Diagnosis(
            cause=f"the shared library {m.group('lib')} was not found",
            fix="Start the server through tritonhf (it sets LD_LIBRARY_PATH), or re-run `tritonhf bootstrap`.",
        ),
    ),
]

_RULES += [
    (
        re.compile(r"Unable to create S3 filesystem client"),
        lambda m: Diagnosis(
            cause="Triton could not open the S3 repository (a missing bucket, wrong credentials or an "
            "unreachable endpoint: Triton reports them all this way)",
            fix="Check with `tritonhf gallery pull URL /tmp/check`, which names the cause; credentials come from "
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the region from AWS_DEFAULT_REGION.",
        ),
    ),
    (
        re.compile(r"repository path is not a valid directory"),
        lambda m: Diagnosis(
            cause="the model repository path does not exist (for S3: nothing under that prefix)",
            fix="Point --repository at a folder of models, or push one: `tritonhf gallery push REPO s3://...`.",
        ),
    ),
]

# The last resort: a model failed and no rule above knows why; the server's own words.
_MODEL_FAILED = re.compile(r"failed to load '(?P<model>[^']+)' version \d+: (?P<reason>.*?)\"?$")


def diagnose_line(line: str) -> Diagnosis | None:
    """The diagnosis of one log line, or None when the line is not a known failure."""
    for pattern, explain in _RULES:
        match = pattern.search(line)
        if match:
            return explain(match)
    return None


def diagnose(lines: Iterable[str]) -> list[Diagnosis]:
    """Every distinct failure found in the log lines, in the order they appear."""
    found: list[Diagnosis] = []
    for line in lines:
        diagnosis = diagnose_line(line)
        if diagnosis is None:
            match = _MODEL_FAILED.search(line)
            if match:
                reason = match.group("reason").split("\\n")[0]
                diagnosis = Diagnosis(
                    cause=f"it failed to load: {reason}",
                    fix="Read the traceback in the server log; `tritonhf gallery validate` checks the config.",
                    model=match.group("model"),
                )
        if diagnosis is not None and diagnosis not in found:
            found.append(diagnosis)
    return _merge_model_names(found)


def _merge_model_names(found: list[Diagnosis]) -> list[Diagnosis]:
    """A config parse error is logged without the model; the next line names it. Join them."""
    merged: list[Diagnosis] = []
    for diagnosis in found:
        if (
            merged
            and merged[-1].model is None
            and diagnosis.model is not None
            and "could not be read as Triton's ModelConfig" in diagnosis.cause
        ):
            merged[-1] = Diagnosis(merged[-1].cause, merged[-1].fix, diagnosis.model)
            continue
        merged.append(diagnosis)
    return merged
