"""The examples run: the RAG example end to end offline, and its rerank step against a cross-encoder."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tritonhf import Client, Server
from tritonhf.bootstrap.layout import Workspace

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DOCUMENTS = """# Cooking
Pasta cooks in a large pot of salted, boiling water for about ten minutes, until it is al dente.

# Gardening
Tomato plants need full sun, deep watering twice a week and a stake to climb.

# Astronomy
Saturn is the sixth planet from the Sun and has the most spectacular ring system.

# Sailing
To tack, turn the bow of the boat through the wind so that the sails fill on the other side.
"""


def _rag() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rag_example", EXAMPLES / "rag.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_rag_example_offline(make_workspace: Callable[[str], Workspace], tmp_path: Path) -> None:
    workspace = make_workspace("rag")
    documents = tmp_path / "notes.md"
    documents.write_text(DOCUMENTS)
    question = "How long should I boil pasta?"
    command = [sys.executable, str(EXAMPLES / "rag.py"), question, "--workspace", str(workspace.root)]
    result = subprocess.run(
        [*command, "--documents", str(documents), "--top-k", "2", "--max-tokens", "40"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    best = re.search(r"the best:\n\s+([0-9.]+)\s+(\w+)\n\s+([0-9.]+)\s+(\w+)", out)
    assert best and best.group(2) == "Cooking" and float(best.group(1)) > float(best.group(3)), out
    assert "No reranker" in out and "Reranked" not in out  # honest: no random reranker pretends to help
    answer = out.split("Answer: ", 1)[1].split("\nSource:", 1)[0]
    assert len(re.findall(r"[A-Za-z]{3,}", answer)) >= 5, f"the answer should be words: {answer!r}"
    assert "Source: [1] notes.md, section 'Cooking'" in out
    assert not workspace.state_file.exists()  # the server was stopped


def test_rag_rerank_step_follows_the_cross_encoder(served: Server) -> None:
    rag = _rag()
    corpus = rag.passages(DOCUMENTS)
    assert [p.section for p in corpus] == ["Cooking", "Gardening", "Astronomy", "Sailing"]
    question = "Which planet has rings?"
    with Client(served.grpc_url) as client:
        retrieved = rag.retrieve(client, question, corpus, rag.Models(embed="embed", chat="writer"), 4)
        reranked = rag.retrieve(client, question, corpus, rag.Models(embed="embed", rerank="reranker"), 2)
        scores = {r.document: r.score for r in client.rerank(question, [p.text for p in corpus], model="reranker")}
    assert sorted(retrieved) == [0, 1, 2, 3]
    expected = sorted(range(4), key=lambda i: -scores[corpus[i].text])[:2]
    assert reranked == expected


def test_rag_passages_of_the_guide() -> None:
    rag = _rag()
    corpus = rag.passages((EXAMPLES.parent / "docs" / "guide.md").read_text())
    assert len(corpus) >= 10 and all(p.section and p.text for p in corpus)
    # A passage holds whole paragraphs and stays near the limit (only a single long paragraph exceeds it).
    assert all(len(p.text.split()) <= rag.PASSAGE_WORDS or "\n\n" not in p.text for p in corpus)
