"""``tritonhf deploy``: the files a cluster needs to serve a repository from object storage."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.bootstrap.layout import Workspace
from tritonhf.cli._console import console, friendly_errors
from tritonhf.deploy.kubernetes import write
from tritonhf.deploy.requirements import serving_requirements
from tritonhf.deploy.spec import DeploySpec

app = typer.Typer(help="Kubernetes and KServe manifests for a repository in object storage.", no_args_is_help=True)

Repository = Annotated[str, typer.Option(help="s3://BUCKET/PREFIX or s3://http://HOST:PORT/BUCKET/PREFIX")]
Out = Annotated[Path, typer.Option(help="Folder to write the files into.")]
Image = Annotated[str, typer.Option(help="The serving image (built from the Dockerfile written).")]
Gpus = Annotated[int, typer.Option(help="GPUs per replica.")]
Memory = Annotated[str, typer.Option(help="Memory per replica.")]
Local = Annotated[
    Path | None,
    typer.Option(help="The same repository on disk, to pin its requirements (default: the workspace's)."),
]


def _spec(
    repository: str, name: str, replicas: int, max_replicas: int, image: str, gpu: int, cpus: int, memory: str,
    shm: str, local: Path | None, **gateway: object,
) -> DeploySpec:  # fmt: skip
    workspace = Workspace.at()
    requirements = serving_requirements(local or workspace.model_repository, StubEnvironment.for_workspace(workspace))
    return DeploySpec(
        repository=repository, name=name, replicas=replicas, max_replicas=max_replicas, image=image, gpus=gpu,
        cpus=cpus, memory=memory, shm=shm, requirements=tuple(requirements), **gateway,  # type: ignore[arg-type]
    )  # fmt: skip


def _write(spec: DeploySpec, out: Path, kserve: bool = False) -> None:
    for path in write(spec, out, kserve=kserve):
        console.print(f"[green]✓[/] {path}")
    console.print(f"next: the commands in {out / 'NOTES.txt'}")


@app.command("kubernetes")
@friendly_errors
def kubernetes_command(
    repository: Repository,
    out: Out = Path("deploy"),
    name: Annotated[str, typer.Option(help="Name of the Deployment, Service ...")] = "tritonhf",
    replicas: Annotated[int, typer.Option(help="Replicas (the autoscaler's minimum).")] = 2,
    max_replicas: Annotated[int, typer.Option(help="The autoscaler's maximum.")] = 8,
    image: Image = "tritonhf-serving:latest",
    gpu: Gpus = 0,
    cpus: Annotated[int, typer.Option(help="CPUs per replica (also OMP_NUM_THREADS).")] = 2,
    memory: Memory = "4Gi",
    shm: Annotated[str, typer.Option(help="/dev/shm size (the Python backend's shared memory).")] = "1Gi",
    local_repository: Local = None,
    gateway: Annotated[
        bool, typer.Option(help="Also the OpenAI/TEI gateway: its own Deployment, Service and CPU autoscaler.")
    ] = True,
    gateway_image: Annotated[str, typer.Option(help="The gateway's image (from Dockerfile.gateway).")] = (
        "tritonhf-gateway:latest"
    ),
    gateway_replicas: Annotated[int, typer.Option(help="Gateway replicas (its autoscaler's minimum).")] = 2,
) -> None:
    """Deployment, Service, HPA on queue time (+ prometheus-adapter rule), PDB, probe, the gateway, Dockerfiles."""
    spec = _spec(
        repository, name, replicas, max_replicas, image, gpu, cpus, memory, shm, local_repository,
        gateway=gateway, gateway_image=gateway_image, gateway_replicas=gateway_replicas,
    )  # fmt: skip
    _write(spec, out)


@app.command("kserve")
@friendly_errors
def kserve_command(
    repository: Repository,
    out: Out = Path("deploy-kserve"),
    name: Annotated[str, typer.Option(help="Name of the InferenceService.")] = "tritonhf",
    replicas: Annotated[int, typer.Option(help="Minimum replicas.")] = 1,
    max_replicas: Annotated[int, typer.Option(help="Maximum replicas.")] = 8,
    image: Image = "tritonhf-serving:latest",
    gpu: Gpus = 0,
    cpus: Annotated[int, typer.Option(help="CPUs per replica.")] = 2,
    memory: Memory = "4Gi",
    shm: Annotated[str, typer.Option(help="/dev/shm size.")] = "1Gi",
    local_repository: Local = None,
) -> None:
    """A KServe InferenceService for the kserve-tritonserver runtime, with the serving image's Dockerfile."""
    _write(
        _spec(repository, name, replicas, max_replicas, image, gpu, cpus, memory, shm, local_repository),
        out,
        kserve=True,
    )
