"""What a user chooses about a Kubernetes deployment (``DeploySpec``): the one value the manifests of Triton
(``kubernetes.py``) and of the gateway (``gateway.py``) are written from, so neither module imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonhf.deploy.storage import S3Location
from tritonhf.errors import DeployError


@dataclass(frozen=True)
class DeploySpec:
    """What the user chooses about a deployment; everything else follows from the repository."""

    repository: str  # s3://BUCKET/PREFIX or s3://http://HOST:PORT/BUCKET/PREFIX
    name: str = "tritonhf"
    replicas: int = 2
    max_replicas: int = 8
    image: str = "tritonhf-serving:latest"  # built from the Dockerfile written beside the manifests
    gpus: int = 0
    cpus: int = 2
    memory: str = "4Gi"
    shm: str = "1Gi"
    queue_target_us: int = 50_000  # scale out when requests wait longer than this on average
    s3_secret: str = "tritonhf-s3"  # holds AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
    admin_secret: str = "tritonhf-admin"  # holds key: the repository API's key inside the cluster
    region: str = "us-east-1"
    requirements: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    gateway: bool = True  # also the OpenAI/TEI gateway (deploy/gateway.py)
    gateway_image: str = "tritonhf-gateway:latest"  # built from Dockerfile.gateway
    gateway_replicas: int = 2
    gateway_max_replicas: int = 8
    gateway_cpus: int = 1
    gateway_secret: str = "tritonhf-gateway"  # holds key: what the gateway's clients send as Bearer
    gateway_max_concurrent_requests: int = 512

    def check(self) -> S3Location:
        if not 1 <= self.replicas <= self.max_replicas:
            raise DeployError(
                f"--replicas must be from 1 to --max-replicas ({self.max_replicas}), not {self.replicas}."
            )
        if self.gpus < 0 or self.cpus < 1:
            raise DeployError("--gpu must be 0 or more and --cpus 1 or more.")
        if self.gateway and not 1 <= self.gateway_replicas <= self.gateway_max_replicas:
            raise DeployError(f"--gateway-replicas must be from 1 to {self.gateway_max_replicas}, "
                              f"not {self.gateway_replicas}.")  # fmt: skip
        return S3Location.parse(self.repository)
