"""``slurmopt config show``: every effective setting, where it came from, and which file was read.

So an operator can tell why a daemon is (or is not) enforcing, or which
store and fabric a command will use, without reading code: the search path
is the one every command follows (``docs/config.md``).
"""

from __future__ import annotations

from typing import Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.wiring import config_option
from slurmopt.config import load_config, search_config_file


def config_report(config_path: str | None) -> dict[str, Any]:
    """The ``--json`` document: the file found, the places tried, each value with its source."""
    search = search_config_file(config_path)
    config = load_config(config_path)
    values = config.as_dict()
    return {
        "file": None if search.found is None else str(search.found),
        "found_by": search.how,
        "searched": [
            {
                "how": how,
                "path": path,
                "found": search.found is not None and path == str(search.found),
            }
            for how, path in search.tried
        ],
        "values": {key: {"value": values[key], "source": config.sources[key]} for key in values},
    }


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(repr(v) if isinstance(v, str) else str(v) for v in value) + "]"
    return repr(value) if value == "" else str(value)


@click.group("config")
def config_group() -> None:
    """The configuration every command reads."""


@config_group.command("show")
@config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def show(config_path: str | None, as_json: bool) -> None:
    """Every effective value with its source (default, file:PATH, env:VAR, cli); the file read."""
    report = config_report(config_path)
    if as_json:
        emit_json(report)
        return
    found = report["file"]
    click.echo(f"config file: {found} ({report['found_by']})" if found else "config file: none")
    for tried in report["searched"]:
        mark = "found" if tried["found"] else "absent"
        click.echo(f"  searched {tried['how']}: {tried['path']} ({mark})")
    if not found:
        click.echo("  every value is a default or from the environment")
    print_table(
        None,
        ["key", "value", "source"],
        [(key, _text(v["value"]), v["source"]) for key, v in report["values"].items()],
    )


__all__ = ["config_group", "config_report"]
