"""Server commands: bootstrap, up, down, status, logs, doctor."""

from __future__ import annotations

import contextlib
import subprocess
import time
import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from tritonhf.bootstrap.admin import ModelStatus
from tritonhf.bootstrap.doctor import run_checks
from tritonhf.bootstrap.installation.install import bootstrap
from tritonhf.bootstrap.installation.sources import choose_source
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.network import LOOPBACK
from tritonhf.bootstrap.process import MODEL_CONTROL_MODES, Server, Tls
from tritonhf.bootstrap.stack import Gateway, Stack, stop_workspace
from tritonhf.bootstrap.stubs import alive_per_model, stubs_of
from tritonhf.bootstrap.supervisor import Counters, supervisor_file
from tritonhf.cli import _limits
from tritonhf.cli._console import RichProgress, console, err_console, friendly_errors, table
from tritonhf.errors import ServerNotRunningError
from tritonhf.serve.limits import Limits

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
    stub = result.stub_environment
    console.print(
        f"  stub environment: {stub.prefix} (numpy {stub.numpy}; torch {stub.torch}, transformers "
        f"{stub.transformers} shared with this environment, which keeps its numpy)"
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
        str,
        typer.Option(help="Where the exposed protocol listens; anything but loopback exposes it (admin APIs closed)."),
    ] = LOOPBACK,
    expose: Annotated[
        str,
        typer.Option(help="With --host beyond loopback: the protocol to expose, grpc or http (the other stays local)."),
    ] = "grpc",
    expose_metrics: Annotated[bool, typer.Option(help="Metrics on --host too (default: loopback).")] = False,
    tls_cert: Annotated[Path | None, typer.Option(help="PEM certificate: gRPC over TLS (grpcs://).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key for --tls-cert.")] = None,
    tls_ca: Annotated[Path | None, typer.Option(help="PEM CA: require client certificates (mutual TLS).")] = None,
    repository: Annotated[
        str | None,
        typer.Option(help="A repository folder, or s3://BUCKET/PREFIX, or s3://http://HOST:PORT/BUCKET/PREFIX."),
    ] = None,
    model_control: Annotated[
        str, typer.Option(help=f"One of {', '.join(MODEL_CONTROL_MODES)}; explicit lets the supervisor repair models.")
    ] = "explicit",
    supervise: Annotated[bool, typer.Option(help="Repair dead stubs and restart a dead server.")] = True,
    openai_port: Annotated[
        str | None, typer.Option(help="Also serve the OpenAI/TEI gateway on this port (or 'auto').")
    ] = None,
    openai_host: Annotated[
        str, typer.Option(help="Where the gateway listens; beyond loopback it requires the workspace's key.")
    ] = LOOPBACK,
    open_page: Annotated[
        bool, typer.Option("--open", help="Open the gateway's page in a browser once up (with --openai-port).")
    ] = False,
    log_verbose: Annotated[int, typer.Option(help="Triton's --log-verbose level.")] = 0,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the server and its models.")] = 60.0,
    payload_limit: _limits.PayloadLimit = _limits.DEFAULT_PAYLOAD_LIMIT,
    max_client_batch_size: _limits.MaxClientBatchSize = _limits.DEFAULT_MAX_CLIENT_BATCH_SIZE,
    max_concurrent_requests: _limits.MaxConcurrentRequests = _limits.DEFAULT_MAX_CONCURRENT_REQUESTS,
    max_batch_tokens: _limits.MaxBatchTokens = _limits.DEFAULT_MAX_BATCH_TOKENS,
    max_audio_bytes: _limits.MaxAudioBytes = _limits.DEFAULT_MAX_AUDIO_BYTES,
    allow_image_urls: _limits.AllowImageUrls = False,
    stored_responses: _limits.StoredResponses = _limits.DEFAULT_STORED_RESPONSES,
    stored_response_seconds: _limits.StoredResponseSeconds = _limits.DEFAULT_STORED_RESPONSE_SECONDS,
) -> None:
    """Start tritonserver in the background and wait until it and its models are ready."""
    if (tls_cert is None) != (tls_key is None) or (tls_ca is not None and tls_cert is None):
        raise ValueError("--tls-cert and --tls-key go together (and --tls-ca needs them).")
    if open_page and openai_port is None:
        raise ValueError("--open opens the gateway's page: give --openai-port too (a port, or 'auto').")
    tls = (
        Tls(tls_cert.absolute(), tls_key.absolute(), tls_ca.absolute() if tls_ca else None)
        if tls_cert and tls_key
        else None
    )
    server = Server(
        workspace,
        host=host,
        expose=expose,
        expose_metrics=expose_metrics,
        tls=tls,
        repository=repository if repository is None or "://" in repository else Path(repository).absolute(),
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        model_control=model_control,
        log_verbose=log_verbose,
        startup_timeout=timeout,
        die_with_parent=False,
    )
    limits = Limits(
        payload_limit=payload_limit,
        max_client_batch_size=max_client_batch_size,
        max_concurrent_requests=max_concurrent_requests,
        max_batch_tokens=max_batch_tokens,
        max_audio_bytes=max_audio_bytes,
        stored_responses=stored_responses,
        stored_response_seconds=stored_response_seconds,
        allow_image_urls=allow_image_urls,
    )
    gateway = Gateway(openai_host, openai_port, tuple(limits.argv())) if openai_port is not None else None
    stack = Stack(server, gateway=gateway, supervise=supervise)
    if server.exposed:
        plain = expose == "http" or tls is None
        err_console.print(
            f"[yellow]warning:[/] {expose} on {host}: anyone who can reach this machine can call the models. "
            "Its admin APIs (repository, shared memory, statistics, trace, logging) are closed there; "
            f"tritonhf manages the server through {server.admin_protocol} on loopback."
            + (
                f" [bold]{expose.upper()} traffic is not encrypted[/]"
                + (" (Triton's HTTP server has no TLS)." if expose == "http" else ": pass --tls-cert/--tls-key.")
                if plain
                else ""
            ),
            soft_wrap=True,
        )
    started = time.monotonic()
    with console.status("Starting tritonserver and loading models ..."):
        state = stack.start()
    console.print(f"[green]✓[/] tritonserver ready in {time.monotonic() - started:.1f} s (pid {state.pid})")
    _endpoints(server)
    _models_table(server.models())
    if open_page and state.gateway_url:
        webbrowser.open(state.gateway_url.removesuffix("/v1") + "/")


def _endpoints(server: Server) -> None:
    state = server.state
    assert state is not None
    for service, url in (("HTTP", server.http_url), ("gRPC", server.grpc_url), ("metrics", server.metrics_url)):
        note = "  (tritonhf's admin path)" if url == server.local_url else ""
        console.print(f"  {service:<8} {url}{note}")
    if state.gateway_url:
        key = " (Bearer key: WORKSPACE/run/api-key)" if state.gateway_host not in (LOOPBACK, "localhost", "::1") else ""
        alive = "" if state.gateway is None or state.gateway.alive() else "  [red](not running)[/]"
        console.print(f"  OpenAI   {state.gateway_url}{key}{alive}")
        console.print(f"  page     {state.gateway_url.removesuffix('/v1')}/  (the models to try, the server's state)")
    console.print(f"  log      {server.workspace.server_log}")


@friendly_errors
def down_command(
    workspace: WorkspaceOption = None,
    grace: Annotated[float, typer.Option(help="Seconds to let in-flight work finish before killing.")] = 30.0,
) -> None:
    """Stop everything `up` started (supervisor, server, stubs), whatever state it is in; clean shared memory."""
    space = Workspace.at(workspace)
    with console.status("Stopping ..."):
        found = stop_workspace(space, grace=grace)
    if not found:
        raise ServerNotRunningError(
            f"No tritonhf server is running for workspace {space.root}. Start one with `tritonhf up`."
        )
    console.print(f"[green]✓[/] stopped everything tritonhf started in {space.root}")


@friendly_errors
def status_command(workspace: WorkspaceOption = None) -> None:
    """Is the server running? Endpoints, and each model's health as it really is (stub processes alive)."""
    server = Server.attach(workspace)
    state = server.state
    assert state is not None
    ready = "ready" if server.is_ready() else "[yellow]not ready[/]"
    console.print(f"[green]●[/] running, {ready} (pid {server.pid})")
    _endpoints(server)
    counters = Counters.load(supervisor_file(server.workspace))
    if counters is not None:
        console.print(
            f"  supervisor pid {counters.pid}: {counters.server_restarts} server restart(s), "
            f"{counters.gateway_restarts} gateway restart(s)"
        )
    alive = alive_per_model(stubs_of(state.shm_prefix))
    view = table("model", "backend", "state", "stubs alive", "health", "repairs")
    for model in server.models():
        backend = server.backend(model.name) if model.state == "READY" else ""
        python = backend in ("python", "")
        expected = server.instance_count(model.name) if model.state == "READY" and python else 0
        healthy = model.state == "READY" and (alive.get(model.name, 0) >= expected if python else True)
        unhealthy = (counters.unhealthy if counters else {}).get(model.name)
        health = (
            "[green]healthy[/]" if healthy and not unhealthy else f"[red]{unhealthy or model.reason or model.state}[/]"
        )
        repairs = (counters.model_repairs if counters else {}).get(model.name, 0)
        stubs = f"{alive.get(model.name, 0)}/{expected}" if python else "- (probed)"
        view.add_row(model.name, backend or "-", model.state, stubs, health, str(repairs))
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
