"""Every `tritonhf ...` command line the README and docs/ show is one the CLI accepts.

Command lines are taken from code blocks (backslash continuations joined, comments and shell
pipes/redirections cut) and from inline code spans that are concrete commands (not synopses with
`|`, `[...]` or `...`). Each is parsed by the real typer app down to its subcommand, options
and arguments checked, and nothing is executed.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from tritonhf.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_SHELL_BREAKS = {"|", ">", ">>", "&&", "||", ";", "2>&1", "&"}


def _code_blocks(text: str) -> tuple[list[str], str]:
    """The fenced blocks' texts, and the prose with the blocks removed (fences read line by line)."""
    blocks: list[str] = []
    prose: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
        else:
            prose.append(line)
    return blocks, "\n".join(prose)


def _code_block_commands(blocks: list[str]) -> list[str]:
    commands = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ").removeprefix("!")
            if line.startswith("tritonhf "):
                commands.append(line)
    return commands


def _inline_commands(text: str) -> list[str]:
    spans = re.findall(r"`(tritonhf [^`]+)`", text)
    return [span for span in spans if not re.search(r"\\?\||\[|\.\.\.|…", span)]


def _argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    for index, word in enumerate(words):
        if word in _SHELL_BREAKS or word.startswith((">", "2>")):
            words = words[:index]
            break
    return words[1:]


def documented() -> list[tuple[str, str, bool]]:
    """(document, command line, whole): code blocks show whole command lines; an inline span may only
    name a command (`tritonhf gallery push`), so a missing argument is not held against it."""
    found = []
    for document in DOCUMENTS:
        blocks, prose = _code_blocks(document.read_text())
        found += [(document.name, command, True) for command in _code_block_commands(blocks)]
        found += [(document.name, command, False) for command in _inline_commands(prose)]
    return found


class Refused(Exception):
    """The CLI would refuse the command line (click's UsageError, whichever click typer carries)."""


def parse(argv: list[str]) -> None:
    """Resolve groups down to a command and let click check its parameters, without invoking it.

    typer carries its own copy of click (typer._click), so groups and errors are recognised by what
    they do and by name rather than by importing click's classes."""
    command = typer.main.get_command(app)
    try:
        context = command.make_context("tritonhf", list(argv))
        while hasattr(command, "resolve_command"):  # a group
            # the subcommand's name is kept apart from the rest ("protected" args; private since click 8.2)
            protected = getattr(context, "_protected_args", None) or getattr(context, "protected_args", None) or []
            args = [*protected, *context.args]
            if not args:
                return
            name, sub, rest = command.resolve_command(context, args)
            assert sub is not None and name is not None, f"no subcommand in {args}"
            command, context = sub, sub.make_context(name, rest, parent=context)
    except Exception as exc:
        names = {kind.__name__ for kind in type(exc).__mro__}
        if "Exit" in names:  # --help, --version
            return
        if "UsageError" in names:
            raise Refused(exc.format_message()) from exc  # type: ignore[attr-defined]
        raise


def test_there_are_documented_commands() -> None:
    assert len(documented()) >= 10, "the extraction found (almost) nothing: the test would prove nothing"


@pytest.mark.parametrize(("document", "command", "whole"), documented(), ids=lambda value: str(value)[:60])
def test_documented_command_parses(document: str, command: str, whole: bool) -> None:
    try:
        parse(_argv(command))
    except Refused as exc:
        if whole or not str(exc).startswith("Missing"):
            pytest.fail(f"{document}: `{command}` is refused by the CLI: {exc}")


def test_a_refused_command_is_caught() -> None:
    with pytest.raises(Refused, match="extra argument"):
        parse(_argv("tritonhf gallery push triton_workspace/model_repository s3://bucket/models"))
    with pytest.raises(Refused):
        parse(_argv("tritonhf gallery add text-generation --engine"))
    with pytest.raises(Refused):
        parse(_argv("tritonhf no-such-command"))
