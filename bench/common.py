"""What the benches share: the sample texts every encoder path is measured on, and where an installed package
lives (the weights packages' folders). A leaf: the bench scripts import it, it imports none of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TEXTS = [
    "This movie is absolutely wonderful",
    "The plot was boring and the acting was terrible",
    "I loved every minute of it",
    "What a waste of two hours",
    "The soundtrack is beautiful and the photography stunning",
    "Alice met Bob in Paris to talk about the new office",
    "Stock markets fell sharply today after the central bank raised rates",
    "A kitten sleeps on a warm rug by the fire",
]


def package_folder(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name} is not installed: run `make setup`.")
    return Path(next(iter(spec.submodule_search_locations)))
