"""The package's import graph has no circle: every module-level import of a tritonhf module, read with
``ast`` (those under ``if TYPE_CHECKING`` too: two modules that need each other's names are one concern, or need a
third), and no strongly connected component of two or more modules; nor with the imports inside functions counted.
The gallery's layering holds: no family imports another, the shared modules import none."""

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


PATHS = {_module(p): p for p in ROOT.rglob("*.py") if "templates" not in p.parts}  # templates import no tritonhf
FAMILIES_PACKAGE = "tritonhf.gallery.families"


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` of two modules or more."""
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
    return circles


def _every_import(path: Path, here: str) -> set[str]:
    """The package's modules ``here`` imports, wherever the import stands (in a function, under TYPE_CHECKING)."""
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*stem, base] if base else stem)
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in PATHS else base for alias in node.names}
    return {module for module in found if module in PATHS and module != here}


EVERY_IMPORT = {name: _every_import(path, name) for name, path in PATHS.items()}


def test_no_import_circle_between_modules() -> None:
    graph = {
        name: _top_level_imports(ast.parse(p.read_text()), name, p.name == "__init__.py", set(PATHS))
        & set(PATHS) - {name}
        for name, p in PATHS.items()
    }
    assert not _circles(graph), f"import circles: {_circles(graph)}"


def test_no_import_circle_counting_imports_in_functions() -> None:
    assert len(EVERY_IMPORT) > 100 and not _circles(EVERY_IMPORT), _circles(EVERY_IMPORT)


# ---------------------------------------------------------------------------- the gallery's layering (docs/guide.md,
# "How to add a family"): a family imports no other family nor the registry above them; the gallery's shared modules
# and the rest of the package import no family (add.py and the CLI ask the registry); every task has one family.


def _family(module: str) -> str | None:
    """The family a module belongs to (``tritonhf.gallery.families.NAME...``), None for any other module."""
    return module.split(".")[3] if module.startswith(FAMILIES_PACKAGE + ".") else None


def test_no_family_imports_another_family_or_the_registry() -> None:
    crossing = [
        f"{module} imports {imported}"
        for module, imports in EVERY_IMPORT.items()
        if (own := _family(module)) is not None
        for imported in imports
        if imported == FAMILIES_PACKAGE or _family(imported) not in (None, own)
    ]
    assert not crossing, crossing


def test_shared_modules_and_the_rest_of_the_package_import_no_family() -> None:
    reaching = [
        f"{module} imports {imported}"
        for module, imports in EVERY_IMPORT.items()
        if _family(module) is None and module != FAMILIES_PACKAGE
        for imported in imports
        if _family(imported) is not None
    ]
    assert not reaching, reaching
    shared = [m for m in EVERY_IMPORT if m.startswith("tritonhf.gallery.") and _family(m) is None]
    asking = [m for m in shared if FAMILIES_PACKAGE in EVERY_IMPORT[m]]
    assert asking == ["tritonhf.gallery.add"], "of the gallery, add.py alone asks the registry"


def test_the_layering_checks_see_a_crossing_import(tmp_path: Path) -> None:
    module = tmp_path / "crossing.py"
    module.write_text("from tritonhf.gallery.families.speech import engines\nimport tritonhf.gallery.sources\n")
    found = _every_import(module, "tritonhf.gallery.families.generation.crossing")
    assert found == {"tritonhf.gallery.families.speech.engines", "tritonhf.gallery.sources"}
    assert _family("tritonhf.gallery.families.speech.engines") == "speech"


def test_every_task_belongs_to_exactly_one_family() -> None:
    from tritonhf.gallery.families import FAMILIES
    from tritonhf.tasks import TASKS

    owners = {task: [family.__name__ for family in FAMILIES if task in family.tasks] for task in TASKS}
    assert all(len(found) == 1 for found in owners.values()), owners
