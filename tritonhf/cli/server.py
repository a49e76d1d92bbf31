"""Server commands: bootstrap, up, down, status, logs, doctor."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from typing import Annotated

import typer

from tritonhf.bootstrap.doctor import run_checks
from tritonhf.bootstrap.install import bootstrap
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.process import LOOPBACK, MODEL_CONTROL_MODES, ModelStatus, Server
from tritonhf.bootstrap.sources import choose_source
from tritonhf.bootstrap.stubs import alive_per_model, stubs_of
from tritonhf.bootstrap.supervisor import Counters, supervisor_file
from tritonhf.cli._console import RichProgress, console, err_console, friendly_errors, table

WorkspaceOption = Annotated[
    Path | None,
    typer.Option("--workspace", "-w", help="Workspace folder (default: $TRITONHF_WORKSPACE or ./triton_workspace)."),
]


@friendly_errors
def bootstrap_command(
    workspace: WorkspaceOption = None,
    from_wheel: Annotated[Path | None, typer.Option(help="An already downloaded nvidia-pytriton wheel.")] = None,
    from_dir: Annotated[Path | None, typer.Option(help="An existing install, e.g. /opt/tritonserver.")] = None,
    from_tarball: Annotated[Path | None, typer.Option(help="A Triton release tarball.")] = None,
    force: Annotated[bool, typer.Option(help="Reinstall even if the workspace is current.")] = False,
) -> None:
    """Install a native Triton server into the workspace (no Docker)."""
    started = time.monotonic()
    space = Workspace.at(workspace)
    progress = RichProgress()
    try:
        result = bootstrap(space, choose_source(from_wheel, from_dir, from_tarball), progress, force=force)
    finally:
        progress.close()
    manifest = result.manifest
    verb = "Reused" if result.reused else "Installed"
    console.print(
        f"[green]✓[/] {verb} Triton {manifest.triton_version} in {space.server_dir} "
        f"(Python stub {manifest.python_stub}, {time.monotonic() - started:.1f} s)"
    )
    console.print(f"  model repository: {space.model_repository}")
    console.print(f"  logs:             {space.logs_dir}")
    console.print("  next: `tritonhf gallery add ...` then `tritonhf up`")


def _models_table(models: list[ModelStatus]) -> None:
    if not models:
        console.print("  (the model repository is empty)")
        return
    view = table("model", "version", "state", "reason")
    for model in models:
        colour = "green" if model.state == "READY" else "yellow"
        view.add_row(model.name, model.version or "-", f"[{colour}]{model.state}[/]", model.reason[:80])
    console.print(view)


@friendly_errors
def up_command(
    workspace: WorkspaceOption = None,
    http_port: Annotated[str, typer.Option(help="A port number, or 'auto' for a free one.")] = "8000",
    grpc_port: Annotated[str, typer.Option(help="A port number, or 'auto'.")] = "8001",
    metrics_port: Annotated[str, typer.Option(help="A port number, or 'auto'.")] = "8002",
    host: Annotated[
        str, typer.Option(help="Address for all services; other than 127.0.0.1 exposes the server.")
    ] = LOOPBACK,
    model_control: Annotated[
        str, typer.Option(help=f"One of {', '.join(MODEL_CONTROL_MODES)}; explicit lets the supervisor repair models.")
    ] = "explicit",
    supervise: Annotated[bool, typer.Option(help="Repair dead stubs and restart a dead server.")] = True,
    log_verbose: Annotated[int, typer.Option(help="Triton's --log-verbose level.")] = 0,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the server and its models.")] = 60.0,
) -> None:
    """Start tritonserver in the background and wait until it and its models are ready."""
    if host != LOOPBACK:
        err_console.print(
            f"[yellow]warning:[/] binding to {host}: anyone who can reach this machine can call the models. "
            "Loading and unloading models needs the key in WORKSPACE/run/api-key (header tritonhf-key)."
        )
    server = Server(
        workspace,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        model_control=model_control,
        log_verbose=log_verbose,
        startup_timeout=timeout,
        die_with_parent=False,
        supervise=supervise,
    )
    started = time.monotonic()
    with console.status("Starting tritonserver and loading models ..."):
        state = server.start()
    console.print(f"[green]✓[/] tritonserver ready in {time.monotonic() - started:.1f} s (pid {state.pid})")
    _endpoints(server)
    _models_table(server.models())


def _endpoints(server: Server) -> None:
    console.print(f"  HTTP     {server.http_url}")
    console.print(f"  gRPC     {server.grpc_url}")
    console.print(f"  metrics  {server.metrics_url}")
    console.print(f"  log      {server.workspace.server_log}")


@friendly_errors
def down_command(
    workspace: WorkspaceOption = None,
    grace: Annotated[float, typer.Option(help="Seconds to let in-flight work finish before killing.")] = 30.0,
) -> None:
    """Stop the workspace's server (gracefully, then by force) and clean its shared memory."""
    server = Server.attach(workspace)
    pid = server.pid
    with console.status(f"Stopping tritonserver (pid {pid}) ..."):
        server.stop(grace=grace)
    console.print(f"[green]✓[/] stopped tritonserver (pid {pid})")


@friendly_errors
def status_command(workspace: WorkspaceOption = None) -> None:
    """Is the server running? Endpoints, and each model's health as it really is (stub processes alive)."""
    server = Server.attach(workspace)
    ready = "ready" if server.is_ready() else "[yellow]not ready[/]"
    console.print(f"[green]●[/] running, {ready} (pid {server.pid})")
    _endpoints(server)
    counters = Counters.load(supervisor_file(server.workspace))
    if counters is not None:
        console.print(f"  supervisor pid {counters.pid}: {counters.server_restarts} server restart(s)")
    alive = alive_per_model(stubs_of(server.pid))
    view = table("model", "state", "stubs alive", "health", "repairs")
    for model in server.models():
        expected = server.instance_count(model.name) if model.state == "READY" else 0
        healthy = model.state == "READY" and alive.get(model.name, 0) >= expected
        health = (
            "[green]healthy[/]"
            if healthy
            else f"[red]{(counters.unhealthy if counters else {}).get(model.name, model.reason or model.state)}[/]"
        )
        repairs = (counters.model_repairs if counters else {}).get(model.name, 0)
        view.add_row(model.name, model.state, f"{alive.get(model.name, 0)}/{expected}", health, str(repairs))
    console.print(view)


@friendly_errors
def logs_command(
    workspace: WorkspaceOption = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many lines to show.")] = 50,
) -> None:
    """Print the server log (its path is logs/server.log in the workspace)."""
    log = Workspace.at(workspace).server_log
    if not log.exists():
        err_console.print(f"No server log yet at {log}; start a server with `tritonhf up`.")
        raise typer.Exit(1)
    err_console.print(f"[dim]{log}[/]")
    command = ["tail", "-n", str(lines), *(["-F"] if follow else []), str(log)]
    with contextlib.suppress(KeyboardInterrupt):
        subprocess.run(command, check=False)


@friendly_errors
def doctor_command(workspace: WorkspaceOption = None) -> None:
    """Check everything a native server needs; each FAIL comes with its fix."""
    checks = run_checks(Workspace.at(workspace))
    view = table("check", "result", "detail", "fix")
    for check in checks:
        view.add_row(
            check.name, "[green]OK[/]" if check.ok else "[red]FAIL[/]", check.detail, "" if check.ok else check.fix
        )
    console.print(view)
    if not all(check.ok for check in checks):
        raise typer.Exit(1)
