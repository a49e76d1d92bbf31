"""``tritonhf gallery``: list, show, add, remove and validate models of a repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from google.protobuf import json_format
from rich.syntax import Syntax

from tritonhf._wire.config import ModelConfig
from tritonhf.bootstrap.layout import Workspace
from tritonhf.cli._console import RichProgress, console, err_console, friendly_errors, table
from tritonhf.gallery.add import add_model, parse_params, template_source
from tritonhf.gallery.config import ModelOptions, build_config, config_to_text, parse_config
from tritonhf.gallery.families import backend_help, engine_help
from tritonhf.gallery.listing import remove_model
from tritonhf.gallery.request import AddRequest
from tritonhf.gallery.validate import validate_repository
from tritonhf.runtime.audio import DEFAULT_MAX_AUDIO_SECONDS
from tritonhf.runtime.images import DEFAULT_MAX_IMAGE_PIXELS
from tritonhf.tasks import ALIASES, ONNX_PART_SUFFIX, PARAM_TASK, TASKS, TensorSpec, get_task

app = typer.Typer(help="Ready model.py + config.pbtxt templates for HuggingFace tasks.", no_args_is_help=True)

RepositoryOption = Annotated[
    Path | None,
    typer.Option("--repository", "-r", help="Model repository (default: the workspace's model_repository)."),
]


def _repository(repository: Path | None) -> Path:
    return repository if repository is not None else Workspace.at().model_repository


def _tensors(specs: tuple[TensorSpec, ...]) -> str:
    return ", ".join(f"{s.name}{'?' if s.optional else ''}:{s.wire_datatype}{list(s.dims)}" for s in specs)


@app.command("list")
def list_command() -> None:
    """Every task with a one-line description and its tensors (? = optional)."""
    view = table("task", "what it does", "inputs", "outputs")
    view.columns[0].min_width = max(len(name) for name in TASKS)  # task names are never cut
    for task in TASKS.values():
        view.add_row(task.name, task.summary, _tensors(task.inputs), _tensors(task.outputs))
    console.print(view)


@app.command("show")
@friendly_errors
def show_command(
    task: Annotated[str, typer.Argument(help="A task name from `gallery list`, or a model of the repository.")],
    repository: RepositoryOption = None,
) -> None:
    """Print a template's config.pbtxt and model.py, or a model's config.pbtxt (its engine, its settings, and
    whether its answers are batch-invariant)."""
    folder = _repository(repository) / task
    if task not in TASKS and task not in ALIASES and (folder / "config.pbtxt").is_file():
        _show_model(folder)
        return
    spec = get_task(task)
    config = build_config(spec, "MODEL_NAME", ModelOptions(parameters={PARAM_TASK: spec.name}))
    console.rule(f"{spec.name}: config.pbtxt")
    console.print(Syntax(config_to_text(config, spec), "text", theme="ansi_dark"))
    console.rule(f"{spec.name}: 1/model.py")
    console.print(Syntax(template_source(spec), "python", theme="ansi_dark"))


def _show_model(folder: Path) -> None:
    text = (folder / "config.pbtxt").read_text()
    config = ModelConfig.parse(json_format.MessageToDict(parse_config(text), preserving_proto_field_name=True))
    invariant = "yes" if config.batch_invariant else "NO (batch_invariant=false: answers may change with batch-mates)"
    console.print(f"{folder.name}: task {config.task or '?'}, batch-invariant: {invariant}")
    console.rule(f"{folder.name}: config.pbtxt")
    console.print(Syntax(text, "text", theme="ansi_dark"))


@app.command("add")
@friendly_errors
def add_command(
    task: Annotated[str, typer.Argument(help="A task name from `gallery list`.")],
    model: Annotated[str, typer.Option("--model", "-m", help="A hub id, a local model folder, or a .gguf file.")],
    name: Annotated[str | None, typer.Option(help="Model name in the repository (default: from --model).")] = None,
    repository: RepositoryOption = None,
    max_batch_size: Annotated[int, typer.Option(help="Largest batch Triton builds (default: per task).")] = 0,
    instances: Annotated[int, typer.Option(help="Model instances (stub processes).")] = 1,
    max_queue_size: Annotated[
        int,
        typer.Option(
            help="Requests Triton queues before refusing with UNAVAILABLE (-1: four full batches; 0: no "
            "bound). Generation models bound their own queue: --param max_waiting=N."
        ),
    ] = -1,
    device: Annotated[str, typer.Option(help="auto | cpu | gpu")] = "auto",
    stream: Annotated[
        bool,
        typer.Option(
            help="Speech: answer in parts as each window ends (a decoupled model; callers use the SDK's "
            "transcribe(stream=True), gRPC streaming or the generate routes, not plain /infer)."
        ),
    ] = False,
    max_image_pixels: Annotated[
        int,
        typer.Option(
            help="Image tasks: the largest image a request may send, in pixels (width x height); a bigger one is "
            f"refused from its header, before it is decoded (0: {DEFAULT_MAX_IMAGE_PIXELS:,})."
        ),
    ] = 0,
    max_audio_seconds: Annotated[
        int,
        typer.Option(
            help="Speech: the longest audio a request may send, in seconds; a longer file is refused from its "
            f"header, before it is decoded (0: {DEFAULT_MAX_AUDIO_SECONDS:,})."
        ),
    ] = 0,
    revision: Annotated[str | None, typer.Option(help="Hub revision (branch, tag or commit).")] = None,
    vendor: Annotated[
        bool, typer.Option(help="Copy weights into the repository (--no-vendor keeps a reference).")
    ] = True,
    labels: Annotated[str | None, typer.Option(help="Zero-shot candidate labels, comma-separated.")] = None,
    default_prompt_name: Annotated[
        str | None,
        typer.Option(
            help="feature-extraction: the model's prompt put before every text that names none (TEI's "
            "--default-prompt-name; default: the model's own default_prompt_name)."
        ),
    ] = None,
    allow_pickle: Annotated[bool, typer.Option(help="Allow pickled (.bin) weights; they can run code.")] = False,
    trust_remote_code: Annotated[bool, typer.Option(help="Let the model run code it ships (off by default).")] = False,
    backend: Annotated[
        str,
        typer.Option(help=backend_help()),
    ] = "auto",
    quantize: Annotated[
        str | None,
        typer.Option(
            help="int8: int8 weights, per-token activations (encoders; speech: PyTorch's Linear layers, "
            "CTranslate2's int8 kernels and Whisper's encoder on OpenVINO where it measures faster, or OpenVINO "
            "GenAI's int8 weights); kept only above a quality gate."
        ),
    ] = None,
    calibration: Annotated[
        Path | None, typer.Option(help="With --quantize: a file of texts (one per line) for the quality gate.")
    ] = None,
    force: Annotated[bool, typer.Option(help="With --quantize: keep the int8 model even below the gate.")] = False,
    onnx_runtime: Annotated[
        str,
        typer.Option(
            help="With --backend onnx: native (Triton's onnxruntime backend, as model NAME__onnx), python "
            "(onnxruntime inside the Python backend), or auto (native if this workspace's server has it)."
        ),
    ] = "auto",
    engine: Annotated[
        str,
        typer.Option(help=engine_help()),
    ] = "auto",
    weight_format: Annotated[
        str,
        typer.Option(
            help="With the OpenVINO engine, text-generation exports a hub id or folder to GGUF: int8 (default), "
            "int4 or fp16 (a family the GGUF writer does not know: to OpenVINO IR at the same width); or to "
            "OpenVINO IR with optimum-intel (any source, a GGUF file too): int4-ir, int8-ir or fp16-ir. "
            "image-text-to-text exports to OpenVINO IR: fp16 (default), int8 or int4."
        ),
    ] = "",
    param: Annotated[list[str] | None, typer.Option(help="Extra config parameter KEY=VALUE (repeatable).")] = None,
) -> None:
    """Add a model of TASK to the repository: NAME/config.pbtxt, NAME/1/model.py and its weights."""
    request = AddRequest(
        task=task,
        source=model,
        repository=_repository(repository),
        name=name,
        revision=revision,
        vendor=vendor,
        allow_pickle=allow_pickle,
        trust_remote_code=trust_remote_code,
        backend=backend,
        onnx_runtime=onnx_runtime,
        quantize=quantize,
        calibration=tuple(line for line in calibration.read_text().splitlines() if line.strip()) if calibration else (),
        force=force,
        engine=engine,
        weight_format=weight_format,
        labels=tuple(labels.split(",")) if labels else (),
        default_prompt_name=default_prompt_name,
        options=ModelOptions(
            max_batch_size=max_batch_size,
            instances=instances,
            device=device,
            max_queue_size=max_queue_size,
            stream=stream,
            max_image_pixels=max_image_pixels,
            max_audio_seconds=max_audio_seconds,
        ),
        params=parse_params(param or []),
    )
    progress = RichProgress()
    try:
        folder = add_model(request, progress)
    except KeyboardInterrupt:
        err_console.print("Interrupted: the repository is unchanged.")
        raise typer.Exit(130) from None
    finally:
        progress.close()
    console.print(f"[green]✓[/] added {folder.name} ({get_task(task).name}) in {folder}")
    part = folder.parent / (folder.name + ONNX_PART_SUFFIX)
    if part.is_dir():
        console.print(f"  its forward pass is model {part.name}: model.onnx on Triton's onnxruntime backend")
    console.print("  next: `tritonhf up` (or restart the server) to serve it")


@app.command("remove")
@friendly_errors
def remove_command(name: Annotated[str, typer.Argument()], repository: RepositoryOption = None) -> None:
    """Remove a model from the repository."""
    folder = remove_model(_repository(repository), name)
    console.print(f"[green]✓[/] removed {name} from {folder.parent}")


@app.command("validate")
@friendly_errors
def validate_command(repository: RepositoryOption = None) -> None:
    """Check every model of a repository without starting a server."""
    folder = _repository(repository)
    problems = validate_repository(folder)
    if not problems:
        console.print(f"[green]✓[/] {folder}: every model is valid")
        return
    for problem in problems:
        err_console.print(f"[red]✗[/] {problem}", soft_wrap=True)
    raise typer.Exit(1)


@app.command("requirements")
@friendly_errors
def requirements_command(
    repository: RepositoryOption = None,
    workspace: Annotated[Path | None, typer.Option("--workspace", "-w", help="Whose stub environment pins.")] = None,
) -> None:
    """The exact Python packages this repository needs on any Triton (pinned; no tritonhf among them)."""
    from tritonhf.bootstrap.environment import StubEnvironment
    from tritonhf.deploy.requirements import serving_requirements

    environment = StubEnvironment.for_workspace(Workspace.at(workspace))
    for line in serving_requirements(_repository(repository), environment):
        console.print(line, highlight=False)


@app.command("push")
@friendly_errors
def push_command(
    url: Annotated[str, typer.Argument(help="s3://BUCKET/PREFIX or s3://http://HOST:PORT/BUCKET/PREFIX")],
    repository: RepositoryOption = None,
) -> None:
    """Upload the repository's models to object storage (credentials from the AWS environment/profile)."""
    from tritonhf.deploy.storage import push

    progress = RichProgress()
    try:
        models = push(_repository(repository), url, progress)
    finally:
        progress.close()
    console.print(f"[green]✓[/] pushed {', '.join(models)} to {url}")


@app.command("pull")
@friendly_errors
def pull_command(
    url: Annotated[str, typer.Argument(help="s3://BUCKET/PREFIX or s3://http://HOST:PORT/BUCKET/PREFIX")],
    repository: RepositoryOption = None,
) -> None:
    """Download the models under URL into the repository (each replaces a local model of its name)."""
    from tritonhf.deploy.storage import pull

    progress = RichProgress()
    try:
        models = pull(url, _repository(repository), progress)
    finally:
        progress.close()
    console.print(f"[green]✓[/] pulled {', '.join(models)} into {_repository(repository)}")
