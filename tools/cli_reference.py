"""Write docs/cli.md, the CLI reference, from the typer app itself (``--check``: fail when it is stale).

    python tools/cli_reference.py            # write docs/cli.md
    python tools/cli_reference.py --check    # make lint: the reference matches the CLI

The app is the only source: every command, argument, option, default and help text comes from
it, so the reference cannot drift from what ``tritonhf`` accepts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "cli.md"


def _commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf command with its path, groups first-level order kept (typer's vendored click)."""
    children = getattr(command, "commands", None)
    if children is None:
        yield path, command
        return
    for name, child in children.items():
        if not getattr(child, "hidden", False):
            yield from _commands(child, (*path, name))


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return f"`{param.opts[0] if param.default else param.secondary_opts[0]}`"
    if param.required:
        return "required"
    if param.default is None or param.default == () or callable(param.default):
        return ""
    return f"`{param.default}`"


def render() -> str:
    from tritonhf.cli.main import app

    root = typer.main.get_command(app)
    lines = [
        "# CLI reference",
        "",
        "Generated from the typer app by `tools/cli_reference.py` (`make lint` checks it is current); "
        "`--help` on any command says the same.",
        "",
    ]
    for path, command in _commands(root, ("tritonhf",)):
        arguments = [p for p in command.params if type(p).__name__.endswith("Argument")]
        usage = " ".join([*path, *(f"{p.name.upper()}{'...' if p.nargs == -1 else ''}" for p in arguments)])
        lines += [f"## `{' '.join(path)}`", "", _cell(command.help or "").split(". ")[0].rstrip(".") + ".", ""]
        lines += [f"Usage: `{usage} [OPTIONS]`", ""]  # a synopsis, not a command line to copy
        options = [p for p in command.params if p not in arguments and p.name != "help"]
        if arguments or options:
            lines += ["| argument / option | default | what it does |", "| --- | --- | --- |"]
            for param in arguments:
                what = _cell(getattr(param, "help", "") or "")
                lines.append(f"| `{param.name.upper()}` | {_default(param)} | {what} |")
            for param in options:
                names = " / ".join([*param.opts, *param.secondary_opts])
                lines.append(f"| `{names}` | {_default(param)} | {_cell(param.help or '')} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md is out of date")
    args = parser.parse_args(argv)
    wanted = render()
    if args.check:
        if not TARGET.is_file() or TARGET.read_text() != wanted:
            print("docs/cli.md does not match the CLI: run `python tools/cli_reference.py`.", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
