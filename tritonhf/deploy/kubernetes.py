"""Kubernetes and KServe manifests for a gallery repository in object storage.

``tritonhf deploy kubernetes`` writes, into one folder:

  deployment.yaml     Triton reading the repository from S3 (credentials from a Secret), /dev/shm as
                      a memory volume, OMP_NUM_THREADS = the CPU limit, a probe that sends each ready
                      model one row (Triton's /v2/health/ready stays 200 when a stub died), poll mode
                      so models pushed later appear, admin APIs closed by a key from a Secret
  service.yaml        HTTP 8000, gRPC 8001, metrics 8002
  hpa.yaml            autoscaling/v2 on queue time per request (a custom metric) ...
  prometheus-adapter.yaml  ... which this prometheus-adapter rule defines from Triton's metrics
  pdb.yaml            at most one replica down at a time
  probe.yaml          the probe script, as a ConfigMap
  gateway-*.yaml      the OpenAI/TEI gateway: its own Deployment, Service and CPU autoscaler
                      (deploy/gateway.py; ``--no-gateway`` leaves it out)
  Dockerfile, requirements.txt   the serving image: NVIDIA's Triton of the matching version plus the
                      pinned serving requirements (no tritonhf)
  Dockerfile.gateway  the gateway's image (tritonhf[serve] on a slim Python)
  NOTES.txt           the commands to create the Secrets and apply, in order

``tritonhf deploy kserve`` writes inferenceservice.yaml for KServe's ``kserve-tritonserver``
runtime instead (and the same Dockerfile). The manifests are plain dicts dumped as YAML; the
tests validate them offline (kubernetes-validate --strict, KServe's CRD schema).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tritonhf.bootstrap.command import ADMIN_APIS
from tritonhf.deploy import gateway
from tritonhf.deploy.spec import DeploySpec
from tritonhf.sdk import API_KEY_HEADER

TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"  # Triton 2.51, the version the wheel carries
QUEUE_METRIC = "tritonhf_queue_us_per_request"


def _labels(spec: DeploySpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/managed-by": "tritonhf", **spec.labels}


def _resources(spec: DeploySpec) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": str(spec.cpus), "memory": spec.memory}
    if spec.gpus:
        limits["nvidia.com/gpu"] = str(spec.gpus)
    return {"requests": {"cpu": str(spec.cpus), "memory": spec.memory}, "limits": limits}


def _probe(spec: DeploySpec, failures: int, period: int) -> dict[str, Any]:
    return {
        "exec": {"command": ["python3", "/opt/tritonhf/probe.py", "http://127.0.0.1:8000"]},
        "periodSeconds": period,
        "timeoutSeconds": 45,
        "failureThreshold": failures,
    }


def _s3_env(spec: DeploySpec) -> list[dict[str, Any]]:
    secret = {"name": spec.s3_secret}
    return [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {**secret, "key": "AWS_ACCESS_KEY_ID"}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {**secret, "key": "AWS_SECRET_ACCESS_KEY"}}},
        {"name": "AWS_DEFAULT_REGION", "value": spec.region},
    ]


def deployment(spec: DeploySpec) -> dict[str, Any]:
    location = spec.check()
    labels = _labels(spec)
    admin_key = {"secretKeyRef": {"name": spec.admin_secret, "key": "key"}}
    triton = {
        "name": "triton",
        "image": spec.image,
        "command": ["tritonserver"],
        "args": [
            f"--model-repository={location.url}",
            "--model-control-mode=poll",  # models pushed later appear within a poll
            "--repository-poll-secs=30",
            "--http-port=8000",
            "--grpc-port=8001",
            "--metrics-port=8002",
            "--exit-timeout-secs=30",
            # Kubernetes expands $(VAR) from the container's env: the key never sits in the manifest.
            # The header is the SDK's: a client given the key ($TRITONHF_API_KEY, the gateway) gets in.
            f"--http-restricted-api={ADMIN_APIS}:{API_KEY_HEADER}=$(TRITONHF_ADMIN_KEY)",
            f"--grpc-restricted-protocol={ADMIN_APIS}:{API_KEY_HEADER}=$(TRITONHF_ADMIN_KEY)",
        ],
        "env": [
            *_s3_env(spec),
            {"name": "TRITONHF_ADMIN_KEY", "valueFrom": admin_key},
            {"name": "OMP_NUM_THREADS", "value": str(spec.cpus)},
        ],
        "ports": [
            {"name": "http", "containerPort": 8000},
            {"name": "grpc", "containerPort": 8001},
            {"name": "metrics", "containerPort": 8002},
        ],
        "resources": _resources(spec),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "probe", "mountPath": "/opt/tritonhf"}],
        "startupProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 120,
        },
        "readinessProbe": _probe(spec, failures=2, period=15),
        "livenessProbe": _probe(spec, failures=4, period=30),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": spec.name}},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8002"},
                },
                "spec": {
                    "terminationGracePeriodSeconds": 45,
                    "containers": [triton],
                    "volumes": [
                        # The Python backend's stubs talk to the server through /dev/shm (64 MiB by default).
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm}},
                        {"name": "probe", "configMap": {"name": f"{spec.name}-probe"}},
                    ],
                },
            },
        },
    }


def service(spec: DeploySpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "selector": {"app.kubernetes.io/name": spec.name},
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http"},
                {"name": "grpc", "port": 8001, "targetPort": "grpc", "appProtocol": "kubernetes.io/h2c"},
                {"name": "metrics", "port": 8002, "targetPort": "metrics"},
            ],
        },
    }


def autoscaler(spec: DeploySpec) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
            "minReplicas": spec.replicas,
            "maxReplicas": spec.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": QUEUE_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(spec.queue_target_us)},
                    },
                }
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
        },
    }


def adapter_rules(spec: DeploySpec) -> dict[str, Any]:
    """prometheus-adapter's rule for the HPA's metric: microseconds queued per successful request."""
    rule = {
        "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "nv_inference_queue_duration_us", "as": QUEUE_METRIC},
        "metricsQuery": (
            "sum(rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>) / "
            "clamp_min(sum(rate(nv_inference_request_success{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>), 1)"
        ),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "prometheus-adapter-tritonhf", "labels": _labels(spec)},
        "data": {"config.yaml": yaml.safe_dump({"rules": [rule]}, sort_keys=False)},
    }


def disruption_budget(spec: DeploySpec) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": spec.name}}},
    }


def probe_config_map(spec: DeploySpec) -> dict[str, Any]:
    script = resources.files("tritonhf.deploy").joinpath("probe.py").read_text()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{spec.name}-probe", "labels": _labels(spec)},
        "data": {"probe.py": script},
    }


def inference_service(spec: DeploySpec) -> dict[str, Any]:
    """A KServe InferenceService on the kserve-tritonserver runtime, with our image and /dev/shm."""
    location = spec.check()
    storage_uri = f"s3://{location.bucket}/{location.prefix}".rstrip("/")
    annotations = {"serving.kserve.io/enable-prometheus-scraping": "true"}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": spec.name, "labels": _labels(spec), "annotations": annotations},
        "spec": {
            "predictor": {
                "minReplicas": spec.replicas,
                "maxReplicas": spec.max_replicas,
                # The Secret of this service account carries the S3 credentials (and, for an
                # S3-compatible endpoint, the serving.kserve.io/s3-endpoint annotation): NOTES.txt.
                "serviceAccountName": f"{spec.name}-s3",
                "model": {
                    "modelFormat": {"name": "triton"},
                    "protocolVersion": "v2",
                    "runtime": "kserve-tritonserver",
                    "storageUri": storage_uri,
                    "image": spec.image,
                    "args": ["--model-control-mode=poll", "--repository-poll-secs=30"],
                    "env": [{"name": "OMP_NUM_THREADS", "value": str(spec.cpus)}],
                    "resources": _resources(spec),
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                },
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm}}],
            }
        },
    }


def dockerfile(spec: DeploySpec) -> str:
    return (
        f"# The serving image: NVIDIA's Triton {TRITON_IMAGE.split(':')[1]} (Triton 2.51, the version tritonhf\n"
        "# serves with locally) plus the exact Python packages the repository's models import\n"
        "# (`tritonhf gallery requirements`). The models carry their own code: no tritonhf here.\n"
        f"FROM {TRITON_IMAGE}\n"
        "COPY requirements.txt /opt/tritonhf/requirements.txt\n"
        "RUN python3 -m pip install --no-cache-dir -r /opt/tritonhf/requirements.txt\n"
    )


def notes(spec: DeploySpec, kserve: bool) -> str:
    location = spec.check()
    endpoint = location.endpoint
    lines = [
        f"# {spec.name}: from {location.url}",
        "# 1. The serving image (Dockerfile and requirements.txt beside this file):",
        f"docker build -t {spec.image} . && docker push {spec.image}",
        "# 2. S3 credentials (typed here, never written to a file by tritonhf):",
        f"kubectl create secret generic {spec.s3_secret} --from-literal=AWS_ACCESS_KEY_ID=... "
        "--from-literal=AWS_SECRET_ACCESS_KEY=...",
    ]
    if kserve:
        lines += [
            f"kubectl create serviceaccount {spec.name}-s3",
            f'kubectl patch serviceaccount {spec.name}-s3 -p \'{{"secrets": [{{"name": "{spec.s3_secret}"}}]}}\'',
        ]
        if endpoint:
            host = endpoint.split("://", 1)[1]
            https = "1" if endpoint.startswith("https") else "0"
            lines.append(
                f"kubectl annotate secret {spec.s3_secret} serving.kserve.io/s3-endpoint={host} "
                f"serving.kserve.io/s3-usehttps={https}"
            )
        lines += ["# 3. Apply:", "kubectl apply -f inferenceservice.yaml"]
    else:
        lines += [
            "# 3. The key that closes Triton's admin APIs inside the cluster:",
            f"kubectl create secret generic {spec.admin_secret} --from-literal=key=$(openssl rand -hex 32)",
            "# 4. Apply (prometheus-adapter.yaml goes to prometheus-adapter's namespace, merged into its config):",
            "kubectl apply -f probe.yaml -f deployment.yaml -f service.yaml -f pdb.yaml -f hpa.yaml",
        ]
        if spec.gateway:
            lines += gateway.notes(spec)
    return "\n".join(lines) + "\n"


def write(spec: DeploySpec, out: Path, kserve: bool = False) -> list[Path]:
    """Write the manifests (or the InferenceService), the Dockerfile and requirements.txt into ``out``."""
    spec.check()
    out.mkdir(parents=True, exist_ok=True)
    documents: dict[str, dict[str, Any]] = (
        {"inferenceservice.yaml": inference_service(spec)}
        if kserve
        else {
            "deployment.yaml": deployment(spec),
            "service.yaml": service(spec),
            "hpa.yaml": autoscaler(spec),
            "prometheus-adapter.yaml": adapter_rules(spec),
            "pdb.yaml": disruption_budget(spec),
            "probe.yaml": probe_config_map(spec),
            **(
                {
                    "gateway-deployment.yaml": gateway.deployment(spec),
                    "gateway-service.yaml": gateway.service(spec),
                    "gateway-hpa.yaml": gateway.autoscaler(spec),
                }
                if spec.gateway
                else {}
            ),
        }
    )
    written = []
    for name, document in documents.items():
        path = out / name
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        written.append(path)
    for name, text in (
        ("Dockerfile", dockerfile(spec)),
        ("requirements.txt", "\n".join(spec.requirements) + "\n"),
        ("NOTES.txt", notes(spec, kserve)),
        *((("Dockerfile.gateway", gateway.dockerfile()),) if spec.gateway and not kserve else ()),
    ):
        (out / name).write_text(text)
        written.append(out / name)
    return written
