"""Output helpers shared by every command: JSON for scripts, rich tables for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from slurmopt.errors import SlurmoptError


def emit_json(data: Any) -> None:
    """Print one JSON document on stdout; a NaN or infinity is an error, never invalid JSON.

    Values that can be undefined are None (null) where they are made, so a
    non-finite number here is a bug: it fails as one line rather than
    printing ``NaN``, which JSON parsers reject.
    """
    try:
        text = json.dumps(data, indent=2, sort_keys=False, default=str, allow_nan=False)
    except ValueError as exc:
        raise SlurmoptError(f"cannot print JSON: {exc}") from None
    click.echo(text)


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    right_align: Callable[[str], bool] = lambda col: False,
) -> None:
    """A rich table on a terminal, plain tab-free aligned text otherwise (stable for pipes)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for col in columns:
            table.add_column(col, justify="right" if right_align(col) else "left")
        for row in rows:
            table.add_row(*(str(c) for c in row))
        Console().print(table)
        return
    cells = [[str(c) for c in columns]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    if title:
        click.echo(title)
    for r in cells:
        click.echo(
            "  ".join(
                c.rjust(w) if right_align(columns[i]) else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
