"""Leaving one machine, offline: S3 URLs, pinned requirements, manifests validated against real schemas."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tritonhf.bootstrap.diagnose import diagnose
from tritonhf.bootstrap.environment import StubEnvironment
from tritonhf.deploy.kubernetes import write
from tritonhf.deploy.requirements import needed_packages, serving_requirements
from tritonhf.deploy.spec import DeploySpec
from tritonhf.deploy.storage import S3Location
from tritonhf.errors import DeployError, StorageError
from tritonhf.gallery import AddRequest, add_model

# KServe's InferenceService schema and Triton runtime, copied from ../shared/kubernetes (see its README)
KSERVE = Path(__file__).parents[1] / "data" / "kserve"


def test_s3_urls_in_the_forms_triton_reads() -> None:
    local = S3Location.parse("s3://http://127.0.0.1:9000/models/team/repo")
    assert (local.endpoint, local.bucket, local.prefix) == ("http://127.0.0.1:9000", "models", "team/repo")
    assert local.url == "s3://http://127.0.0.1:9000/models/team/repo" and local.key("a/b") == "team/repo/a/b"
    aws = S3Location.parse("s3://my-bucket/repo/")
    assert (aws.endpoint, aws.bucket, aws.prefix, aws.url) == (None, "my-bucket", "repo", "s3://my-bucket/repo")
    for bad in ("s3://127.0.0.1:9000/models/repo", "s3://http://host/models/repo", "s3://Upper/repo", "gs://x/y",
                "s3://bucket/has space"):  # fmt: skip
        with pytest.raises(StorageError):
            S3Location.parse(bad)


def _repository(tmp_path: Path, tiny: dict[str, Path]) -> Path:
    repo = tmp_path / "repo"
    add_model(AddRequest("text-classification", str(tiny["classifier"]), repo, name="clf"))
    add_model(AddRequest("text-generation", str(tiny["generator"]), repo, name="gen", engine="transformers"))
    add_model(AddRequest("feature-extraction", str(tiny["encoder"]), repo, name="emb", backend="onnx"))
    return repo


def test_image_models_need_pillow_and_text_models_do_not(tmp_path: Path, tiny: dict[str, Path]) -> None:
    text = tmp_path / "text"
    add_model(AddRequest("text-classification", str(tiny["classifier"]), text, name="clf"))
    assert "pillow" not in needed_packages(text)
    for task, source in (("image-classification", "image-classifier"), ("clip", "clip")):
        images = tmp_path / task
        add_model(AddRequest(task, str(tiny[source]), images, name="m"))
        assert "pillow" in needed_packages(images), task
    assert not {"soundfile", "soxr"} & set(needed_packages(text))


@pytest.mark.slow  # seconds of CPU: `make test` runs it, `make test-fast` leaves it out
def test_speech_models_need_libsndfile_and_soxr(tmp_path: Path, tiny: dict[str, Path]) -> None:
    add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "speech", name="asr", backend="pytorch"))
    needed = needed_packages(tmp_path / "speech")
    assert {"soundfile", "soxr"} <= set(needed) and "pillow" not in needed and "ctranslate2" not in needed
    add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "speech", name="ct2", backend="ctranslate2"))
    assert "ctranslate2" in needed_packages(tmp_path / "speech")
    assert "openvino" not in needed_packages(tmp_path / "speech")  # float32: CTranslate2's own encoder
    int8 = add_model(AddRequest("whisper", str(tiny["whisper"]), tmp_path / "speech", name="ct2-int8",
                                backend="ctranslate2", quantize="int8"))  # fmt: skip
    kept = 'key: "tritonhf.encoder"' in (int8 / "config.pbtxt").read_text()
    assert ("openvino" in needed_packages(tmp_path / "speech")) == kept, "its encoder on OpenVINO needs openvino"


@pytest.mark.integration  # bootstraps a real server (the stub environment): not in make test-fast
def test_serving_requirements_are_pinned_and_name_no_tritonhf(
    tmp_path: Path, tiny: dict[str, Path], installed_server: object
) -> None:
    repo = _repository(tmp_path, tiny)
    assert set(needed_packages(repo)) >= {"torch", "transformers", "numpy", "onnxruntime", "jinja2"}
    lines = serving_requirements(repo, StubEnvironment.for_workspace(installed_server))  # type: ignore[arg-type]
    assert all("==" in line and "+" not in line for line in lines)
    assert not any(line.startswith("tritonhf") for line in lines)
    numpy = next(line for line in lines if line.startswith("numpy=="))
    assert int(numpy.split("==")[1].split(".")[0]) < 2, "the stub's numpy, not the user's"
    with pytest.raises(DeployError, match="no model"):
        needed_packages(tmp_path / "empty")


def test_kubernetes_manifests_validate_strictly(tmp_path: Path) -> None:
    spec = DeploySpec("s3://http://minio.storage:9000/models/repo", replicas=2, gpus=1, requirements=("torch==2.13.0",))
    written = write(spec, tmp_path)
    manifests = [path for path in written if path.suffix == ".yaml"]
    assert {p.name for p in manifests} >= {"deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml", "probe.yaml"}
    validator = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    result = subprocess.run([validator, "--strict", *map(str, manifests)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    deployment = yaml.safe_load((tmp_path / "deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--model-repository=s3://http://minio.storage:9000/models/repo" in container["args"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    readiness = container["readinessProbe"]
    assert "exec" in readiness and "probe.py" in " ".join(readiness["exec"]["command"])
    assert all("value" not in e or "AWS_SECRET" not in e["name"] for e in container["env"]), "credentials by reference"
    hpa = yaml.safe_load((tmp_path / "hpa.yaml").read_text())
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "tritonhf_queue_us_per_request"
    rules = yaml.safe_load(yaml.safe_load((tmp_path / "prometheus-adapter.yaml").read_text())["data"]["config.yaml"])
    query = rules["rules"][0]["metricsQuery"]
    assert "nv_inference_queue_duration_us" in query and "nv_inference_request_success" in query
    assert (tmp_path / "Dockerfile").read_text().startswith("# The serving image")
    assert "FROM nvcr.io/nvidia/tritonserver:24.10-py3" in (tmp_path / "Dockerfile").read_text()
    assert (tmp_path / "requirements.txt").read_text() == "torch==2.13.0\n"


def test_the_gateway_has_its_own_deployment_service_and_autoscaler(tmp_path: Path) -> None:
    spec = DeploySpec("s3://models/repo", name="serve", gateway_image="registry/gw:1", gateway_replicas=3)
    written = {path.name: path for path in write(spec, tmp_path)}
    manifests = [written[name] for name in ("gateway-deployment.yaml", "gateway-service.yaml", "gateway-hpa.yaml")]
    validator = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    result = subprocess.run([validator, "--strict", *map(str, manifests)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    deployment = yaml.safe_load(manifests[0].read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry/gw:1" and deployment["spec"]["replicas"] == 3
    command = [*container["command"], *container["args"]]
    assert command[:2] == ["tritonhf", "openai"] and "grpc://serve:8001" in command
    assert "--api-key-file" in command and not any("key=" in part for part in command), "the key is a mounted file"
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == "tritonhf-gateway" and volume["secret"]["defaultMode"] == 0o400
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "tritonhf-admin"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health" and "tcpSocket" in container["livenessProbe"]
    from typer.testing import CliRunner

    from tritonhf.cli.main import app

    parsed = CliRunner().invoke(app, ["openai", "--help"])  # every flag the manifest passes exists
    flags = [part for part in command[2:] if part.startswith("--")]
    assert all(flag in parsed.output for flag in flags), flags
    hpa = yaml.safe_load(manifests[2].read_text())
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "serve-gateway"
    assert "Dockerfile.gateway" in written and "tritonhf[serve]" in written["Dockerfile.gateway"].read_text()
    notes = written["NOTES.txt"].read_text()
    assert "kubectl create secret generic tritonhf-gateway" in notes and "gateway-deployment.yaml" in notes
    server = yaml.safe_load(written["deployment.yaml"].read_text())["spec"]["template"]["spec"]["containers"][0]
    assert any("tritonhf-key=$(TRITONHF_ADMIN_KEY)" in arg for arg in server["args"]), "the SDK's header"
    plain = {path.name for path in write(DeploySpec("s3://models/repo", gateway=False), tmp_path / "none")}
    assert not any(name.startswith("gateway") or name == "Dockerfile.gateway" for name in plain)


def test_kserve_inference_service_validates_against_kserve_schema(tmp_path: Path) -> None:
    spec = DeploySpec("s3://http://minio.storage:9000/models/repo", image="registry/serving:1")
    (path,) = [p for p in write(spec, tmp_path, kserve=True) if p.suffix == ".yaml"]
    document = yaml.safe_load(path.read_text())
    schema = json.loads(gzip.decompress((KSERVE / "inferenceservice-v1beta1.schema.json.gz").read_bytes()))
    jsonschema.Draft7Validator(schema).validate(document)
    model = document["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "triton"} and model["protocolVersion"] == "v2"
    assert model["storageUri"] == "s3://models/repo" and model["image"] == "registry/serving:1"
    runtime = yaml.safe_load((KSERVE / "kserve-tritonserver-runtime.yaml").read_text())
    assert model["runtime"] == runtime["metadata"]["name"]
    assert "serving.kserve.io/s3-endpoint=minio.storage:9000" in (tmp_path / "NOTES.txt").read_text()


def test_s3_failures_in_the_server_log_are_diagnosed() -> None:
    lines = [
        "error: creating server: Internal - Unable to create S3 filesystem client. Check account credentials. "
        "Exception: '' Message: 'No response body.'",
        "error: creating server: Invalid argument - repository path is not a valid directory",
    ]
    causes = [d.cause for d in diagnose(lines)]
    assert any("S3 repository" in c for c in causes) and any("does not exist" in c for c in causes)
