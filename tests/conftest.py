"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from harness import tiny_models  # the repository root is on pytest's pythonpath (pyproject.toml)
from tritonhf.bootstrap import Workspace, bootstrap


@pytest.fixture(scope="session")
def installed_server(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A workspace with a real Triton server installed once per session (wheel cached by pip)."""
    workspace = Workspace(tmp_path_factory.mktemp("server") / "workspace")
    bootstrap(workspace)
    return workspace


@pytest.fixture
def workspace(installed_server: Workspace, tmp_path: Path) -> Workspace:
    """A fresh workspace sharing the session's server install, with an empty repository."""
    fresh = Workspace(tmp_path / "workspace")
    fresh.root.mkdir()
    (fresh.root / "triton_server").symlink_to(installed_server.server_dir)
    (fresh.root / "stub_env").symlink_to(installed_server.stub_env_dir)
    fresh.create_folders()
    return fresh


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny local models, built once per session: classifier, multilabel, ner, encoder, generator."""
    root = tmp_path_factory.mktemp("tiny-models")
    builders = {
        "classifier": tiny_models.build_classifier,
        "multilabel": lambda folder: tiny_models.build_classifier(folder, multi_label=True),
        "ner": tiny_models.build_ner,
        "encoder": tiny_models.build_encoder,
        # CLS pooling with a tokenizer saved to pad on the left: the template must pad on the right.
        "encoder-cls": lambda folder: tiny_models.build_encoder(
            folder, pooling="cls", normalize=False, padding_side="left"
        ),
        "generator": tiny_models.build_generator,
        "llama": tiny_models.build_llama_generator,
        "cross-encoder": tiny_models.build_cross_encoder,
        "qa": tiny_models.build_question_answering,
        "masked-lm": tiny_models.build_masked_lm,
        "seq2seq": tiny_models.build_seq2seq,
        "image-classifier": tiny_models.build_image_classifier,
        "clip": tiny_models.build_clip,
        "whisper": tiny_models.build_whisper,
        "wav2vec2": tiny_models.build_wav2vec2_ctc,
        "siglip": tiny_models.build_siglip,
    }
    built = {}
    for name, build in builders.items():
        (root / name).mkdir()
        built[name] = build(root / name)
    return built


# The modules whose tests use the shared gallery server (``served``, tests/integration/conftest.py,
# every template in one tritonserver: minutes to load). ``make test``'s parallel phase runs them all
# on one worker, which starts that server once; collection fails if a test elsewhere uses it.
SERVED_MODULES = frozenset(
    f"tests/integration/{name}.py"
    for name in (
        "test_bad_input",
        "test_batch_invariance",
        "test_bench",
        "test_examples_served",
        "test_gallery_sdk",
        "test_new_tasks_served",
        "test_sdk_live",
    )
)


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scheduling by module (``--dist loadscope``: a worker builds its own session and
    module fixtures, so each module's are built once), with every module of ``SERVED_MODULES`` in one
    unit. Overriding ``_split_scope`` is how xdist's own ``loadfile`` mode extends this class."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return "served" if module in SERVED_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleScheduling:
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the shared gallery server outside ``SERVED_MODULES`` would start a second one."""
    strays = sorted(
        {
            module
            for item in items
            if "served" in getattr(item, "fixturenames", ())
            and (module := item.nodeid.split("::", 1)[0]) not in SERVED_MODULES
        }
    )
    if strays:
        raise pytest.UsageError(
            f"{', '.join(strays)} use the `served` fixture: add them to SERVED_MODULES (tests/conftest.py)."
        )
