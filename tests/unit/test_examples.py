"""The examples stay true: the notebook is valid and every command it runs exists with its options."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path
from typing import Any

import nbformat
import typer

from tritonhf.cli.main import app

EXAMPLES = Path(__file__).parents[2] / "examples"


def _tritonhf_lines(notebook: nbformat.NotebookNode) -> list[list[str]]:
    lines = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            if line.startswith("!tritonhf "):
                lines.append(shlex.split(line[1:])[1:])
    return lines


def _command(words: list[str]) -> tuple[Any, list[str]]:
    """The command a CLI line names (typer's groups are not click.Group subclasses) and its arguments."""
    command: Any = typer.main.get_command(app)
    rest = list(words)
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    return command, rest


def test_notebook_is_valid_and_its_commands_exist() -> None:
    notebook = nbformat.read(EXAMPLES / "colab_quickstart.ipynb", as_version=4)
    nbformat.validate(notebook)
    lines = _tritonhf_lines(notebook)
    assert {line[0] for line in lines} >= {"bootstrap", "gallery", "up", "down"}
    for words in lines:
        command, rest = _command(words)
        assert not hasattr(command, "commands"), f"{words}: not a command"
        options = {opt for param in command.params for opt in param.opts}
        for word in rest:
            if word.startswith("--"):
                assert word.split("=")[0] in options, f"`tritonhf {' '.join(words)}`: no option {word}"
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code" and not c.source.startswith("!"))
    ast.parse(code)
    shell = [line for c in notebook.cells if c.cell_type == "code" for line in c.source.splitlines() if line[:1] == "!"]
    installs = [line for line in shell if line.startswith("!pip install")]
    assert installs == ['!pip install -q "git+{REPO_URL}"'], "installs tritonhf from the repository URL variable"
    assert "REPO_URL = " in code, "the repository URL is set once, in a variable"
    assert not any("numpy<2" in line.replace(" ", "") for line in shell), "the notebook must not downgrade numpy"


def test_example_app_parses() -> None:
    ast.parse((EXAMPLES / "multi_model_app.py").read_text())
