"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

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
def tiny() -> dict[str, Path]:
    """Tiny local models: classifier, multilabel, ner, encoder, generator ... (``tiny_models``)."""
    return tiny_models_cached()


def tiny_models_cached() -> dict[str, Path]:
    """The tiny models, built once per machine into ``~/.cache/tritonhf/tiny-models/KEY`` (``TRITONHF_TEST_CACHE``
    elsewhere) rather than once per pytest process (each xdist worker, each phase of ``make test``). KEY hashes
    harness/tiny_models.py and conformance.py and the versions of torch, transformers and tokenizers, which decide
    what is built; a manifest of every file's hash is checked on each use, so a model a test changed in place is
    built again, and a file lock lets one process build while the others wait."""
    root = Path(__file__).resolve().parent.parent
    source = (root / "harness" / "tiny_models.py").read_bytes() + (root / "harness" / "conformance.py").read_bytes()
    versions = ",".join(f"{name}={metadata.version(name)}" for name in ("torch", "transformers", "tokenizers"))
    key = hashlib.sha256(source + versions.encode()).hexdigest()[:16]
    base = Path(os.environ.get("TRITONHF_TEST_CACHE", Path.home() / ".cache" / "tritonhf")) / "tiny-models"
    base.mkdir(parents=True, exist_ok=True)
    cache = base / key
    with open(base / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        paths = cache / "paths.json"
        manifest = cache / "manifest.json"
        if not (paths.is_file() and manifest.is_file() and json.loads(manifest.read_text()) == _hashes(cache)):
            shutil.rmtree(cache, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=base))
            built = {name: str(path.relative_to(staging)) for name, path in _build_tiny(staging).items()}
            (staging / "paths.json").write_text(json.dumps(built))
            (staging / "manifest.json").write_text(json.dumps(_hashes(staging)))
            staging.rename(cache)
        return {name: cache / relative for name, relative in json.loads(paths.read_text()).items()}


def _hashes(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` (its manifest aside) -> its sha256."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "manifest.json"
    }


def _build_tiny(root: Path) -> dict[str, Path]:
    # Imported here, not at the top: torch and transformers' model classes take seconds to import, which every
    # pytest process (xdist's controller among them, which runs no test) would pay before its first test.
    from harness import conformance, tiny_models  # the repository root is on pytest's pythonpath (pyproject.toml)

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
        "thinker": tiny_models.build_thinker,
        "cross-encoder": tiny_models.build_cross_encoder,
        "qa": tiny_models.build_question_answering,
        "masked-lm": tiny_models.build_masked_lm,
        "seq2seq": tiny_models.build_seq2seq,
        "image-classifier": tiny_models.build_image_classifier,
        "clip": tiny_models.build_clip,
        "whisper": tiny_models.build_whisper,
        "wav2vec2": tiny_models.build_wav2vec2_ctc,
        "siglip": tiny_models.build_siglip,
        "qwen2-vl": tiny_models.build_qwen_vl,
        "qwen2.5-vl": lambda folder: tiny_models.build_qwen_vl(folder, "qwen2_5_vl"),
        # a sentence-transformers folder beyond mean/CLS: weighted-mean pooling that leaves its prompt out, a Dense
        # layer, and prompts with a default one (built by sentence-transformers itself)
        "st-prompts": lambda folder: conformance.build_sentence_transformer(
            folder,
            pooling="weightedmean",
            include_prompt=False,
            dense=16,
            prompts={"query": "query: ", "passage": "passage about "},
            default_prompt="query",
        ),
    }
    built = {}
    for name, build in builders.items():
        (root / name).mkdir()
        built[name] = build(root / name)
    return built


# The modules whose tests use the shared gallery server (``served``, or ``served_stack`` with its gateway:
# tests/integration/conftest.py, every template in one tritonserver: minutes to load). ``make test``'s
# parallel phase runs them all on one worker, which starts that server once; collection fails if a test
# elsewhere uses it.
SERVED_MODULES = frozenset(
    f"tests/integration/{name}.py"
    for name in (
        "test_bad_input",
        "test_batch_invariance",
        "test_bench",
        "test_examples_served",
        "test_fuzz",
        "test_gallery_sdk",
        "test_gateway",
        "test_inference_endpoints",
        "test_new_tasks_served",
        "test_page",
        "test_responses",
        "test_sdk_live",
        "test_structured",
    )
)


# The order in which the parallel phase hands units out: the costliest first (CPU and wall time of each
# module, every process it starts included, measured with a cgroup per worker), so that what runs last is
# short and both workers end together. xdist's own order, most tests first, left the costliest modules
# (a handful of tests each) to the end, one worker running them while the other had nothing left.
# Units not named here follow, in collection order.
COSTLIEST_FIRST = (
    "served",
    "tests/integration/test_invariant_options.py",
    "tests/integration/test_scale_out.py",
    "tests/integration/test_demo.py",
    "tests/integration/test_colab_like.py",
    "tests/integration/test_openvino_served.py",
    "tests/integration/test_image_chat.py",
    "tests/unit/test_audio.py",
    "tests/integration/test_server.py",
    "tests/integration/test_security.py",
    "tests/unit/test_templates.py",
    "tests/unit/test_bench_stats.py",
    "tests/unit/test_bootstrap.py",
    "tests/integration/test_onnx_native_served.py",
)


def unit_of(nodeid: str) -> str:
    """The unit a test is scheduled in: its module, or "served" for every module of ``SERVED_MODULES``."""
    module = nodeid.split("::", 1)[0]
    return "served" if module in SERVED_MODULES else module


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scheduling by module (``--dist loadscope``: a worker builds its own session and
    module fixtures, so each module's are built once), with every module of ``SERVED_MODULES`` in one
    unit. Overriding ``_split_scope`` is how xdist's own ``loadfile`` mode extends this class."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleScheduling:
    config.option.loadscopereorder = False  # units in collection order, which sorts them by COSTLIEST_FIRST
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Units in the order of ``COSTLIEST_FIRST`` (a stable sort: tests keep their order within a module); a test
    that uses the shared gallery server outside ``SERVED_MODULES`` would start a second one; an ``alone`` test
    must be where the Makefile finds it. Before ``-m`` deselects (a conftest's hook runs before the plugins')."""
    gone = [unit for unit in COSTLIEST_FIRST if unit != "served" and not (config.rootpath / unit).is_file()]
    if gone:
        raise pytest.UsageError(f"{', '.join(gone)} in COSTLIEST_FIRST (tests/conftest.py) no longer exist.")
    rank = {unit: index for index, unit in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(unit_of(item.nodeid), len(rank)))
    strays = sorted(
        {
            unit
            for item in items
            if "served_stack" in getattr(item, "fixturenames", ()) and (unit := unit_of(item.nodeid)) != "served"
        }
    )
    if strays:
        raise pytest.UsageError(
            f"{', '.join(strays)} use the shared server (`served`, `served_stack`): add them to SERVED_MODULES "
            "(tests/conftest.py)."
        )
    # make test's `alone` phase collects the modules that say "mark.alone" (Makefile, ALONE): one that marks its
    # tests otherwise would be left out of both phases
    alone = {str(item.path) for item in items if item.get_closest_marker("alone")}
    hidden = sorted(path for path in alone if "mark.alone" not in Path(path).read_text())
    if hidden:
        raise pytest.UsageError(f"{', '.join(hidden)} mark tests `alone` without the words mark.alone (Makefile).")
