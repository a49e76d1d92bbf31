"""The package's import graph has no circle: every module-level import of a tritonhf module, read with
``ast`` (those under ``if TYPE_CHECKING`` too: two modules that need each other's names are one concern, or need a
third; imports inside functions are not edges), and no strongly connected component of two or more modules."""

from __future__ import annotations

import ast
from pathlib import Path

import tritonhf

ROOT = Path(tritonhf.__file__).resolve().parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module, here: str, package: bool, modules: set[str]) -> set[str]:
    """The modules a module imports when it is imported. ``from package import module`` is an edge to that module
    (Python runs the package's ``__init__`` first, but a partly run one serves: no circle a reader trips on)."""
    found: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.If):
            statements += [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            statements += [*node.body, *node.orelse, *node.finalbody]
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                anchor = here.split(".") if package else here.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            found |= submodules if len(submodules) == len(node.names) else {base, *submodules}
    return {name for name in found if name.startswith("tritonhf")}


def test_no_import_circle_between_modules() -> None:
    paths = {_module(p): p for p in ROOT.rglob("*.py") if "templates" not in p.parts}
    graph = {
        name: _top_level_imports(ast.parse(p.read_text()), name, p.name == "__init__.py", set(paths))
        & set(paths) - {name}
        for name, p in paths.items()
    }
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_the_gateway_imports_nothing_of_bootstrap_or_gallery() -> None:
    """What the gateway needs of the workspace it is given as arguments (bootstrap/gateway.py), and of a model's
    config it reads through a small helper of its own layer's (``_files.config_parameters``): every import, at
    module level or inside a function, of a tritonhf.serve module."""
    found = []
    for path in sorted((ROOT / "serve").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [
                f"{path.name}: {name}" for name in names if name.startswith(("tritonhf.bootstrap", "tritonhf.gallery"))
            ]
    assert not found, found


def test_no_import_circle_between_bench_scripts() -> None:
    """bench/ scripts import each other by name (the folder is on their path): no two of them import each other,
    directly or around a longer circle (imports inside functions count: they run when the bench does)."""
    bench = ROOT.parent / "bench"
    scripts = {path.stem: path for path in bench.glob("*.py")}
    graph = {
        name: {
            (node.module or "").split(".")[0]
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in scripts
        }
        | {
            alias.name.split(".")[0]
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name.split(".")[0] in scripts
        }
        for name, path in scripts.items()
    }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})) for nxt in graph[start])

    circles = sorted(name for name in graph if reaches(name, name, {name}))
    assert not circles, f"bench scripts in an import circle: {circles}"
