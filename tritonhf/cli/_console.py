"""Shared CLI plumbing: one console, a progress reporter, and error-to-message translation."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from tritonhf.errors import TritonHFError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

P = ParamSpec("P")
R = TypeVar("R")


def friendly_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Print a tritonhf error as its message (no traceback) and exit with status 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except TritonHFError as exc:
            err_console.print(f"[bold red]error:[/] {exc.message}", soft_wrap=True)
            raise typer.Exit(1) from exc
        except ValueError as exc:  # option values checked by library code
            err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
            raise typer.Exit(2) from exc

    return wrapper


class RichProgress:
    """Shows each step as a line and its advance as a bar (bytes)."""

    def __init__(self) -> None:
        self._bar: Progress | None = None
        self._task: Any = None

    def step(self, message: str) -> None:
        self.close()
        console.print(f"[cyan]•[/] {message}")

    def advance(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = Progress(
                TextColumn("  "), BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=console, transient=True
            )
            self._bar.start()
            self._task = self._bar.add_task("", total=total)
        self._bar.update(self._task, completed=done, total=total)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def table(*columns: str, title: str | None = None) -> Table:
    result = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        result.add_column(column)
    return result
