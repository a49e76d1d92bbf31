"""``--backend onnx`` on a server with Triton's native onnxruntime backend: NAME + NAME__onnx.

The template tokenizes and post-processes; the forward pass is the part, called through
BLS. Here BLS calls are answered by onnxruntime on the part's model.onnx (the stand-in for
the C++ backend, which the wheel's server lacks); tests/integration serves the same for real.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import fake_pb_utils as pb
import numpy as np
import pytest
import torch
from onnx_part_standin import run_onnx
from template_harness import answers, instantiate
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer
from typer.testing import CliRunner

from tritonhf.cli.main import app
from tritonhf.errors import GalleryError
from tritonhf.gallery import AddRequest, add_model, list_models, remove_model, validate_repository
from tritonhf.gallery.config import parameters_of, parse_config

texts = pb.texts
runner = CliRunner()


@pytest.fixture(autouse=True)
def no_bls_models() -> Iterator[None]:
    pb.bls_models.clear()
    yield
    pb.bls_models.clear()


def _add(repo: Path, task: str, source: Path, name: str, **extra: object) -> Path:
    request = AddRequest(task=task, source=str(source), repository=repo, name=name, backend="onnx", **extra)  # type: ignore[arg-type]
    return add_model(request)


def _serve_part(folder: Path) -> None:
    """Answer BLS calls to ``folder``'s part, as Triton's onnxruntime backend would."""
    part = folder.parent / (folder.name + "__onnx")
    output = parse_config((part / "config.pbtxt").read_text()).output[0].name
    pb.bls_models[part.name] = run_onnx(part / "1" / "model.onnx", output)


def test_native_layout_two_models_that_triton_can_read(tmp_path: Path, tiny: dict[str, Path]) -> None:
    folder = _add(tmp_path / "repo", "feature-extraction", tiny["encoder"], "emb", onnx_runtime="native")
    part = folder.parent / "emb__onnx"
    assert (part / "1" / "model.onnx").is_file()
    weights = folder / "1" / "weights"
    assert not (weights / "model.onnx").exists() and not list(weights.glob("*.safetensors"))
    assert (weights / "tokenizer.json").is_file()

    config = parse_config((part / "config.pbtxt").read_text())
    assert (config.backend, config.max_batch_size) == ("onnxruntime", 0)
    names = list(AutoTokenizer.from_pretrained(tiny["encoder"])(["x"]).keys())
    assert [tensor.name for tensor in config.input] == names
    assert all(list(tensor.dims) == [-1, -1] for tensor in config.input)
    hidden = AutoModel.from_pretrained(tiny["encoder"]).config.hidden_size
    assert config.output[0].name == "last_hidden_state" and list(config.output[0].dims) == [-1, -1, hidden]
    assert set(config.model_warmup[0].inputs) == set(names)

    params = parameters_of(parse_config((folder / "config.pbtxt").read_text()))
    assert params["tritonhf.onnx_model"] == "emb__onnx" and params["tritonhf.onnx_inputs"] == ",".join(names)
    assert [entry.name for entry in list_models(folder.parent)] == ["emb"]  # the part is listed with its model
    assert validate_repository(folder.parent) == []


def test_native_embeddings_and_classification_match_pytorch(tmp_path: Path, tiny: dict[str, Path]) -> None:
    repo = tmp_path / "repo"
    embed = _add(repo, "feature-extraction", tiny["encoder"], "emb", onnx_runtime="native")
    classify = _add(repo, "text-classification", tiny["classifier"], "cls", onnx_runtime="native")
    # initialize must not call the part (it may still be loading): no BLS answers yet.
    embed_model, classify_model = instantiate(embed), instantiate(classify)
    _serve_part(embed)
    _serve_part(classify)

    batch = ["the cat", "a dog and a cat lives in london"]
    first = pb.InferenceRequest(TEXT=texts(batch[0]), NORMALIZE=np.array([[False]]))
    second = pb.InferenceRequest(TEXT=texts(batch[1]), NORMALIZE=np.array([[False]]))
    got = [response.output("EMBEDDING") for response in answers(embed_model, [first, second])]
    tokenizer = AutoTokenizer.from_pretrained(tiny["encoder"])
    encoded = tokenizer(batch, padding=True, return_tensors="pt")
    with torch.inference_mode():
        tokens = AutoModel.from_pretrained(tiny["encoder"]).eval()(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    expected = ((tokens * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(np.concatenate(got), expected, atol=1e-3)

    (answer,) = answers(classify_model, [pb.InferenceRequest(TEXT=texts(*batch), TOP_K=np.array([[2], [2]]))])
    reference = AutoModelForSequenceClassification.from_pretrained(tiny["classifier"]).eval()
    with torch.inference_mode():
        logits = reference(
            **AutoTokenizer.from_pretrained(tiny["classifier"])(batch, padding=True, return_tensors="pt")
        )
    probabilities = torch.softmax(logits.logits, -1).numpy()
    np.testing.assert_allclose(answer.output("SCORES"), -np.sort(-probabilities)[:, :2], atol=1e-3)


def test_a_failing_part_fails_the_batch_with_its_name(tmp_path: Path, tiny: dict[str, Path]) -> None:
    model = instantiate(
        _add(tmp_path / "repo", "text-classification", tiny["classifier"], "cls", onnx_runtime="native")
    )
    first, second = answers(model, [pb.InferenceRequest(TEXT=texts("hello")), pb.InferenceRequest(TEXT=texts("hi"))])
    for response in (first, second):  # every request of the batch gets the model's error (INTERNAL), naming the part
        assert response.error() is not None and response.error().code == pb.TritonError.INTERNAL
        assert "ONNX part 'cls__onnx' failed: Request for unknown model" in response.error().message()


def test_auto_is_native_only_where_the_server_has_the_backend(tmp_path: Path, tiny: dict[str, Path]) -> None:
    workspace = tmp_path / "workspace"
    repo = workspace / "model_repository"
    _add(repo, "feature-extraction", tiny["encoder"], "plain")  # onnx_runtime="auto", no onnxruntime backend
    assert not (repo / "plain__onnx").exists() and (repo / "plain" / "1" / "weights" / "model.onnx").is_file()
    (workspace / "triton_server" / "backends" / "onnxruntime").mkdir(parents=True)
    _add(repo, "feature-extraction", tiny["encoder"], "native")
    assert (repo / "native__onnx" / "1" / "model.onnx").is_file()
    _add(repo, "feature-extraction", tiny["encoder"], "forced", onnx_runtime="python")
    assert not (repo / "forced__onnx").exists()


def test_remove_takes_the_part_along_and_validate_sees_a_missing_one(tmp_path: Path, tiny: dict[str, Path]) -> None:
    repo = tmp_path / "repo"
    _add(repo, "feature-extraction", tiny["encoder"], "emb", onnx_runtime="native")
    with pytest.raises(GalleryError, match="ONNX part of model 'emb'"):
        remove_model(repo, "emb__onnx")
    (repo / "emb__onnx" / "1" / "model.onnx").unlink()
    assert [p.message for p in validate_repository(repo)] == ["1/model.onnx is missing"]
    remove_model(repo, "emb")
    assert sorted(p.name for p in repo.iterdir()) == []

    _add(repo, "feature-extraction", tiny["encoder"], "emb", onnx_runtime="native")
    shutil.rmtree(repo / "emb__onnx")
    assert [p.message for p in validate_repository(repo)] == ["its ONNX part 'emb__onnx' is missing"]


def test_bad_onnx_runtime_and_taken_part_name(tmp_path: Path, tiny: dict[str, Path]) -> None:
    repo = tmp_path / "repo"
    with pytest.raises(GalleryError, match="--onnx-runtime must be one of auto, native, python"):
        _add(repo, "feature-extraction", tiny["encoder"], "emb", onnx_runtime="cuda")
    (repo / "emb__onnx").mkdir(parents=True)
    with pytest.raises(GalleryError, match="'emb__onnx' already exists"):
        _add(repo, "feature-extraction", tiny["encoder"], "emb", onnx_runtime="native")
    assert not (repo / "emb").exists()


def test_cli_add_list_remove_native(tmp_path: Path, tiny: dict[str, Path]) -> None:
    repo = tmp_path / "repo"
    source = str(tiny["encoder"])
    add = ["gallery", "add", "feature-extraction", "--model", source, "-r", str(repo), "--backend", "onnx"]
    added = runner.invoke(app, [*add, "--name", "emb", "--onnx-runtime", "native"], terminal_width=200)
    assert added.exit_code == 0, added.output
    assert "model emb__onnx" in added.output and "onnxruntime backend" in added.output
    assert runner.invoke(app, ["gallery", "validate", "--repository", str(repo)]).exit_code == 0
    removed = runner.invoke(app, ["gallery", "remove", "emb", "-r", str(repo)])
    assert removed.exit_code == 0, removed.output
    assert list(repo.iterdir()) == []
    refused = runner.invoke(app, [*add, "--onnx-runtime", "tensorrt"])
    assert refused.exit_code != 0 and "--onnx-runtime must be one of" in refused.output
