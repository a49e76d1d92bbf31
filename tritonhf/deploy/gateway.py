"""The OpenAI/TEI gateway in a cluster: its own Deployment, Service and autoscaler beside Triton's.

The gateway is stateless and CPU-bound (JSON, tokenizer-free routes): it scales on its own CPU,
apart from Triton, which scales on queue time. It runs ``tritonhf openai`` pointed at Triton's
Service over gRPC, listening on all interfaces, so it requires its clients' key (a Secret mounted
as a file, never on a command line or in the manifest). To list models it uses Triton's
repository API, which the cluster closes with the admin key: it gets that key as
``$TRITONHF_API_KEY`` from the admin Secret, as any SDK client would.

The gateway image is not NVIDIA's: ``Dockerfile.gateway`` installs tritonhf with its ``serve``
extra on a slim Python image (no Triton, no model weights).
"""

from __future__ import annotations

from typing import Any

from tritonhf.deploy.spec import DeploySpec
from tritonhf.serve.limits import Limits

GATEWAY_PORT = 9000
KEY_MOUNT = "/var/run/tritonhf-gateway"
PYTHON_IMAGE = "python:3.11-slim"
CPU_TARGET = {"type": "Utilization", "averageUtilization": 70}


def gateway_name(spec: DeploySpec) -> str:
    return f"{spec.name}-gateway"


def _labels(spec: DeploySpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": gateway_name(spec),
        "app.kubernetes.io/component": "gateway",
        "app.kubernetes.io/part-of": spec.name,
        "app.kubernetes.io/managed-by": "tritonhf",
        **spec.labels,
    }


def deployment(spec: DeploySpec) -> dict[str, Any]:
    name = gateway_name(spec)
    limits = Limits(max_concurrent_requests=spec.gateway_max_concurrent_requests)
    container = {
        "name": "gateway",
        "image": spec.gateway_image,
        "command": ["tritonhf", "openai"],
        "args": [
            *("--url", f"grpc://{spec.name}:8001", "--host", "0.0.0.0", "--port", str(GATEWAY_PORT)),
            *("--api-key-file", f"{KEY_MOUNT}/key"),
            *limits.argv(),
        ],
        "env": [
            # Triton's repository API is closed by the admin key inside the cluster; the SDK sends it.
            {"name": "TRITONHF_API_KEY", "valueFrom": {"secretKeyRef": {"name": spec.admin_secret, "key": "key"}}},
        ],
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT}],
        "resources": {
            "requests": {"cpu": str(spec.gateway_cpus), "memory": "1Gi"},
            "limits": {"cpu": str(spec.gateway_cpus), "memory": "2Gi"},
        },
        "volumeMounts": [{"name": "key", "mountPath": KEY_MOUNT, "readOnly": True}],
        # /health follows Triton's readiness: a gateway whose Triton is away takes no traffic ...
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5, "failureThreshold": 2},
        # ... but is not restarted for it (its process is fine): liveness is the port alone.
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 20, "failureThreshold": 3},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "allowPrivilegeEscalation": False},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": _labels(spec)},
        "spec": {
            "replicas": spec.gateway_replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {
                    "labels": _labels(spec),
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": str(GATEWAY_PORT)},
                },
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [{"name": "key", "secret": {"secretName": spec.gateway_secret, "defaultMode": 0o400}}],
                },
            },
        },
    }


def service(spec: DeploySpec) -> dict[str, Any]:
    name = gateway_name(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": _labels(spec)},
        "spec": {
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": GATEWAY_PORT, "targetPort": "http"}],
        },
    }


def autoscaler(spec: DeploySpec) -> dict[str, Any]:
    name = gateway_name(spec)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "labels": _labels(spec)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": spec.gateway_replicas,
            "maxReplicas": spec.gateway_max_replicas,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": CPU_TARGET}}],
        },
    }


def dockerfile() -> str:
    return (
        "# The gateway image: tritonhf with its serve extra on a slim Python (no Triton, no weights).\n"
        f"FROM {PYTHON_IMAGE}\n"
        "# tritonhf[serve] from PyPI, or a wheel / git URL of the same version as the one that wrote these files:\n"
        'ARG TRITONHF="tritonhf[serve]"\n'
        "RUN python3 -m pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \\\n"
        '    && python3 -m pip install --no-cache-dir "$TRITONHF"\n'
        "USER 10001\n"
        f"EXPOSE {GATEWAY_PORT}\n"
    )


def notes(spec: DeploySpec) -> list[str]:
    return [
        "# The OpenAI/TEI gateway (its own image, Dockerfile.gateway):",
        f"docker build -f Dockerfile.gateway -t {spec.gateway_image} . && docker push {spec.gateway_image}",
        "# The key its clients send (Authorization: Bearer KEY):",
        f"kubectl create secret generic {spec.gateway_secret} --from-literal=key=$(openssl rand -hex 32)",
        "kubectl apply -f gateway-deployment.yaml -f gateway-service.yaml -f gateway-hpa.yaml",
    ]
