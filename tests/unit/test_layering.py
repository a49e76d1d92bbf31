"""The gallery's layering, and the whole package's imports: the shape docs/guide.md ("Where things live") describes.

- a family (``tritonhf/gallery/families/NAME/``) imports no other family, nor the registry above them;
- the gallery's shared modules (everything in ``tritonhf/gallery/`` outside ``families/``) import no family;
- ``add.py`` reaches the families only through the registry (``tritonhf.gallery.families``);
- nothing outside the gallery reaches into a family;
- no import circle anywhere in the package (imports inside functions and under TYPE_CHECKING counted too);
- every task belongs to exactly one family.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tritonhf
from tritonhf.gallery.families import FAMILIES
from tritonhf.tasks import TASKS

PACKAGE = Path(tritonhf.__file__).parent
FAMILIES_PACKAGE = "tritonhf.gallery.families"


def _modules() -> dict[str, Path]:
    """Every module of the package but the templates (plain files copied into a repository, importing no tritonhf)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        if "templates" in relative.parts:
            continue
        parts = list(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The package's modules ``name`` imports, wherever the import stands: ``from a.b import c`` is ``a.b.c`` when that
    is a module, else ``a.b``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*stem, base] if base else stem)
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names}
    return {module for module in found if module in MODULES and module != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _family(module: str) -> str | None:
    """The family a module belongs to (``tritonhf.gallery.families.NAME...``), None for any other module."""
    if not module.startswith(FAMILIES_PACKAGE + "."):
        return None
    return module.split(".")[3]


def test_no_family_imports_another_family_or_the_registry() -> None:
    crossing = [
        f"{module} imports {imported}"
        for module, imports in GRAPH.items()
        if (own := _family(module)) is not None
        for imported in imports
        if imported == FAMILIES_PACKAGE or _family(imported) not in (None, own)
    ]
    assert not crossing, crossing


def test_shared_modules_and_the_rest_of_the_package_import_no_family() -> None:
    """add.py and the CLI reach the families through the registry, and nothing reaches into a family's folder."""
    reaching = [
        f"{module} imports {imported}"
        for module, imports in GRAPH.items()
        if _family(module) is None and module != FAMILIES_PACKAGE
        for imported in imports
        if _family(imported) is not None
    ]
    assert not reaching, reaching
    shared = [m for m in GRAPH if m.startswith("tritonhf.gallery.") and _family(m) is None and m != FAMILIES_PACKAGE]
    assert shared and not [m for m in shared if FAMILIES_PACKAGE in GRAPH[m] and m != "tritonhf.gallery.add"]
    assert FAMILIES_PACKAGE in GRAPH["tritonhf.gallery.add"], "add.py asks the registry"


def test_the_package_has_no_import_circle() -> None:
    """Tarjan's strongly connected components of the import graph: every one a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in GRAPH[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    assert len(GRAPH) > 100 and not circles, circles


def test_the_checks_see_a_crossing_import(tmp_path: Path) -> None:
    """The helpers above find what they look for: a family module importing another family's module."""
    module = tmp_path / "crossing.py"
    module.write_text("from tritonhf.gallery.families.speech import engines\nimport tritonhf.gallery.sources\n")
    imports = _imports("tritonhf.gallery.families.generation.crossing", module)
    assert imports == {"tritonhf.gallery.families.speech.engines", "tritonhf.gallery.sources"}
    assert _family("tritonhf.gallery.families.speech.engines") == "speech"


def test_every_task_belongs_to_exactly_one_family() -> None:
    owners = {task: [family.__name__ for family in FAMILIES if task in family.tasks] for task in TASKS}
    assert all(len(found) == 1 for found in owners.values()), owners
    assert set().union(*(family.tasks for family in FAMILIES)) == set(TASKS)
