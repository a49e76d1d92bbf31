"""Repository operations without a server: add, names, params, validate, remove, the CLI."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonhf.cli.main import app
from tritonhf.errors import InvalidNameError, ModelExistsError, ModelSourceError, UnknownTaskError
from tritonhf.gallery import AddRequest, add_model, list_models, parse_config, remove_model, validate_repository
from tritonhf.gallery.add import parse_params
from tritonhf.gallery.naming import check_name
from tritonhf.gallery.sources import _built_once
from tritonhf.tasks import TASKS

runner = CliRunner()


@pytest.fixture
def repo(tmp_path: Path, tiny: dict[str, Path]) -> Path:
    repository = tmp_path / "repo"
    add_model(AddRequest(task="text-classification", source=str(tiny["classifier"]), repository=repository, name="clf"))
    return repository


def test_added_model_is_self_contained_and_valid(repo: Path) -> None:
    model = repo / "clf"
    assert (model / "1" / "model.py").is_file() and (model / "1" / "tritonhf_runtime" / "__init__.py").is_file()
    # An encoder task is served from ONNX by default (the export matched PyTorch): no PyTorch weights kept.
    assert (model / "1" / "weights" / "model.onnx").is_file()
    assert not (model / "1" / "weights" / "model.safetensors").exists()
    assert (model / "1" / "weights" / "tokenizer.json").is_file()
    text = (model / "config.pbtxt").read_text()
    # ONNX Runtime or OpenVINO on the same file, whichever measured faster on this machine (both checked).
    assert re.search(r"# Backend: (onnx|openvino) \(.*within 0\.001 of PyTorch", text), text
    config = parse_config(text)
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["tritonhf.task"] == "text-classification"
    assert params["tritonhf.weights"] == "weights"
    assert "tritonhf.version" in params
    assert validate_repository(repo) == []
    assert [entry.name for entry in list_models(repo)] == ["clf"]


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "-x", "naïve", "a b", "", "x" * 200])
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidNameError, match="not allowed"):
        check_name(name)


def test_names_cannot_escape_the_repository(tmp_path: Path, tiny: dict[str, Path]) -> None:
    with pytest.raises(InvalidNameError):
        add_model(AddRequest(task="ner", source=str(tiny["ner"]), repository=tmp_path / "r", name="../../etc"))
    assert not (tmp_path / "etc").exists()


def test_params_are_data_never_code(tmp_path: Path, tiny: dict[str, Path]) -> None:
    nasty = 'x" } parameters { key: "y'
    params = parse_params([f"note={nasty}"])
    folder = add_model(
        AddRequest(task="embeddings", source=str(tiny["encoder"]), repository=tmp_path / "r", name="e", params=params)
    )
    config = parse_config((folder / "config.pbtxt").read_text())
    assert config.parameters["note"].string_value == nasty
    assert "y" not in config.parameters
    assert (folder / "1" / "model.py").read_text() == (
        Path(__file__).parents[2] / "tritonhf/gallery/templates/feature_extraction/model.py"
    ).read_text()
    with pytest.raises(InvalidNameError):
        parse_params(["no-equals-sign"])
    with pytest.raises(InvalidNameError):
        parse_params(["tritonhf.task=evil"])


def test_existing_name_unknown_task_and_bad_source(repo: Path, tiny: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ModelExistsError, match="already exists"):
        add_model(AddRequest(task="ner", source=str(tiny["ner"]), repository=repo, name="clf"))
    with pytest.raises(UnknownTaskError, match="text-classification"):
        add_model(AddRequest(task="summarize", source=str(tiny["ner"]), repository=repo))
    with pytest.raises(ModelSourceError, match=r"no config\.json"):
        add_model(AddRequest(task="ner", source=str(tmp_path), repository=repo, name="x"))


def test_pickle_only_weights_need_explicit_permission(tmp_path: Path, tiny: dict[str, Path]) -> None:
    source = tmp_path / "pickled"
    shutil.copytree(tiny["classifier"], source)
    (source / "model.safetensors").unlink()
    (source / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ModelSourceError, match="--allow-pickle"):
        add_model(AddRequest(task="text-classification", source=str(source), repository=tmp_path / "r"))
    assert not (tmp_path / "r" / "pickled").exists(), "a failed add leaves nothing behind"
    assert not list((tmp_path).glob(".pickled.partial-*"))


def test_a_cache_folder_built_by_two_processes_at_once_comes_out_whole_for_both(tmp_path: Path) -> None:
    """Two ``gallery add`` of the same GGUF at once (two users, two test workers) build the same cache
    folder; each builds in its own staging folder, and the one that finishes second keeps the first's."""
    target = tmp_path / "cache" / "model-0123"
    both_building = threading.Barrier(2, timeout=10)
    results: list[Path | BaseException] = []

    def build(staging: Path) -> None:
        (staging / "weights.bin").write_bytes(b"w" * 1000)
        both_building.wait()  # neither has finished while the other builds
        (staging / "config.json").write_text("{}")

    def add() -> None:
        try:
            results.append(_built_once(target, "build the test folder", build))
        except BaseException as exc:  # reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=add) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [target, target]
    assert sorted(item.name for item in target.iterdir()) == ["config.json", "weights.bin"]
    assert [item.name for item in target.parent.iterdir()] == [target.name], "no staging folder left"

    def broken(staging: Path) -> None:
        (staging / "half").write_text("x")
        raise ValueError("not a GGUF file")

    with pytest.raises(ModelSourceError, match="Could not read the other: not a GGUF file"):
        _built_once(tmp_path / "cache" / "other", "read the other", broken)
    assert [item.name for item in target.parent.iterdir()] == [target.name], "a failed build leaves nothing"


def test_hub_without_network_says_so_and_suggests_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError, match="local folder"):
        add_model(AddRequest(task="ner", source="dslim/bert-base-NER", repository=tmp_path / "r"))


def _problems(repo: Path) -> str:
    return "\n".join(str(p) for p in validate_repository(repo))


def test_validate_catches_each_kind_of_mistake(repo: Path) -> None:
    config = repo / "clf" / "config.pbtxt"
    original = config.read_text()
    config.write_text(original.replace("max_batch_size", "max_batch_sise"))
    assert "max_batch_sise" in _problems(repo) and "clf" in _problems(repo)
    config.write_text(original.replace('name: "LABEL"', 'name: "TOP_LABEL"'))
    assert "'LABEL' of the text-classification template is missing" in _problems(repo)
    config.write_text(original)
    (repo / "clf" / "1" / "model.py").unlink()
    assert "model.py is missing" in _problems(repo)
    shutil.rmtree(repo / "clf" / "1")
    assert "no version folder" in _problems(repo)
    shutil.copytree(repo / "clf", repo / "bad name!")
    assert "bad name!" in _problems(repo)


def test_remove(repo: Path) -> None:
    remove_model(repo, "clf")
    assert not (repo / "clf").exists()


def test_cli_gallery(repo: Path, tiny: dict[str, Path]) -> None:
    listed = runner.invoke(app, ["gallery", "list"], terminal_width=200)
    assert listed.exit_code == 0
    for task in TASKS:
        assert task in listed.output
    shown = runner.invoke(app, ["gallery", "show", "ner"])
    assert shown.exit_code == 0 and "TritonPythonModel" in shown.output and "ENTITIES" in shown.output
    added = runner.invoke(
        app, ["gallery", "add", "zero-shot", "--model", str(tiny["encoder"]), "-r", str(repo), "--labels", "a,b"]
    )
    assert added.exit_code == 0, added.output
    assert runner.invoke(app, ["gallery", "validate", "--repository", str(repo)]).exit_code == 0
    bad = runner.invoke(app, ["gallery", "add", "ner", "--model", str(tiny["ner"]), "-r", str(repo), "--name", "../x"])
    assert bad.exit_code == 1 and "not allowed" in bad.output
    assert runner.invoke(app, ["gallery", "remove", "encoder", "-r", str(repo)]).exit_code == 0


def test_remote_code_is_off_unless_asked(repo: Path, tiny: dict[str, Path]) -> None:
    def flag(folder: Path) -> str:
        return parse_config((folder / "config.pbtxt").read_text()).parameters["tritonhf.trust_remote_code"].string_value

    assert flag(repo / "clf") == "false"
    trusted = add_model(
        AddRequest(task="ner", source=str(tiny["ner"]), repository=repo, name="trusted", trust_remote_code=True)
    )
    assert flag(trusted) == "true"


def test_pytorch_when_asked_or_when_onnx_cannot_serve_the_task(tmp_path: Path, tiny: dict[str, Path]) -> None:
    chosen = add_model(AddRequest("text-classification", str(tiny["classifier"]), tmp_path / "r", backend="pytorch"))
    assert (chosen / "1" / "weights" / "model.safetensors").is_file()
    assert "# Backend: pytorch (--backend pytorch)." in (chosen / "config.pbtxt").read_text()
    generator = add_model(AddRequest("text-generation", str(tiny["generator"]), tmp_path / "r", engine="transformers"))
    assert (
        "# Backend: pytorch (the transformers engine: --engine transformers)."
        in (generator / "config.pbtxt").read_text()
    )


def test_triton_queues_four_full_batches_by_default_then_refuses(tmp_path: Path) -> None:
    from tritonhf.gallery.config import ModelOptions, build_config

    classify, generate = TASKS["text-classification"], TASKS["text-generation"]
    default = build_config(classify, "m", ModelOptions(max_batch_size=32))
    assert default.dynamic_batching.default_queue_policy.max_queue_size == 4 * 32
    five = build_config(classify, "m", ModelOptions(max_queue_size=5))
    assert five.dynamic_batching.default_queue_policy.max_queue_size == 5
    assert not build_config(classify, "m", ModelOptions(max_queue_size=0)).dynamic_batching.HasField(
        "default_queue_policy"
    ), "0: no bound"
    assert not build_config(generate, "m", ModelOptions()).dynamic_batching.HasField("default_queue_policy"), (
        "decoupled templates bound their own queue (max_waiting)"
    )


def test_a_converted_model_keeps_none_of_its_source_weights(tmp_path: Path, tiny: dict[str, Path]) -> None:
    """Pickled weights (--allow-pickle) go as safetensors do once the model is served from model.onnx."""
    import shutil

    import torch
    from safetensors.torch import load_file

    pickled = tmp_path / "pickled"
    shutil.copytree(tiny["classifier"], pickled)
    for tensors in pickled.glob("*.safetensors"):
        torch.save(load_file(tensors), pickled / "pytorch_model.bin")
        tensors.unlink()
    added = add_model(
        AddRequest("text-classification", str(pickled), tmp_path / "r", backend="onnx", allow_pickle=True,
                   onnx_runtime="python")
    )  # fmt: skip
    weights = added / "1" / "weights"
    assert (weights / "model.onnx").is_file()
    assert not [p.name for p in weights.iterdir() if p.suffix in (".bin", ".safetensors", ".pt", ".pth")]


def test_a_new_family_is_a_class_and_one_line_in_the_registry(
    tmp_path: Path, tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof of the layout (docs/guide.md, "How to add a family"): a ``Family`` subclass naming its task and one
    line in ``FAMILIES``; ``gallery add`` runs its one pass through it (its own check, its parameters, its choice,
    its notes; the defaults resolve and vendor the source) and the template serves the model it added."""
    import fake_pb_utils as pb
    from template_harness import answers, instantiate

    from tritonhf.errors import GalleryError
    from tritonhf.gallery import families
    from tritonhf.gallery.family import Family
    from tritonhf.gallery.listing import parameters_of_folder
    from tritonhf.gallery.request import Choice

    asked: list[str] = []

    class Toy(Family):
        tasks = ("text-classification",)

        def check(self) -> None:
            asked.append("check")
            if self.request.backend != "auto":
                raise GalleryError("the toy family takes no --backend")

        def parameters(self, folder: Path) -> dict[str, str]:
            return {"toy.folder": folder.name}

        def choose(self, resolved: object, staging: object, params: dict[str, str], progress: object) -> Choice:
            asked.append("choose")
            return Choice("pytorch", "the toy family serves it as it is", {"toy.chosen": "yes"}, False, "the toy")

        def notes(self, params: object) -> list[str]:
            return ["Toy: one class and one line."]

    monkeypatch.setattr(families, "FAMILIES", (Toy, *families.FAMILIES))  # the one line
    folder = add_model(AddRequest("text-classification", str(tiny["classifier"]), tmp_path / "repo", name="toy"))
    params = parameters_of_folder(folder)
    assert asked == ["check", "choose"] and params["toy.chosen"] == "yes" and params["toy.folder"] == "classifier"
    assert params["tritonhf.backend_reason"] == "the toy family serves it as it is"
    assert "# Toy: one class and one line." in (folder / "config.pbtxt").read_text()
    assert "tritonhf.reference_check" in params, "the pass asked the model's library and compared, as for any family"
    (answer,) = answers(instantiate(folder), [pb.InferenceRequest(TEXT=pb.texts("a fine movie"))])
    assert not answer.has_error() and answer.output("LABEL")[0]
    with pytest.raises(GalleryError, match="the toy family takes no --backend"):
        add_model(AddRequest("text-classification", str(tiny["classifier"]), tmp_path / "repo", backend="onnx"))
