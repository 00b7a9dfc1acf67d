"""``slurmopt topology``: show the fabric the daemon will place jobs on."""

from __future__ import annotations

from typing import Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.wiring import config_option, fabric_option, resolve
from slurmopt.fabric import Fabric
from slurmopt.hostlist import fold


def fabric_summary(fabric: Fabric) -> dict[str, Any]:
    """Everything ``topology show`` prints, as plain data (the ``--json`` document)."""
    leaves = []
    for leaf in fabric.leaves():
        uplinks = fabric.uplinks(leaf)
        nodes = fabric.nodes_under(leaf)
        leaves.append(
            {
                "switch": leaf,
                "nodes": fold(nodes),
                "node_count": len(nodes),
                "uplinks": uplinks,
                "slowest_uplink_gbps": min(
                    (fabric.link_gbps(leaf, up) for up in uplinks), default=None
                ),
            }
        )
    off_leaf = fabric.off_leaf_nodes()
    return {
        "source": fabric.source,
        "name": fabric.name,
        "nodes": len(fabric.compute_nodes),
        "switches": len(fabric.switches),
        "switches_per_level": {str(level): len(sws) for level, sws in fabric.levels().items()},
        "leaves": leaves,
        "off_leaf_nodes": {node: fabric.attachment_of(node) for node in off_leaf},
    }


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


@click.group()
def topology() -> None:
    """Inspect the network fabric model."""


@topology.command()
@fabric_option
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def show(
    ctx: click.Context, fabric_file: str | None, config_path: str | None, as_json: bool
) -> None:
    """Print the fabric: where it came from, switches per level, and every leaf.

    The fabric is --fabric, else the config's fabric, else discovered from
    Slurm (through the config's backend); "source" names which.
    """
    fabric = resolve(ctx, config_path, {"fabric": fabric_file}).fabric()
    summary = fabric_summary(fabric)
    if as_json:
        emit_json(summary)
        return
    levels = ", ".join(
        f"level {level}: {count}" for level, count in summary["switches_per_level"].items()
    )
    click.echo(f"source: {summary['source']}")
    click.echo(f"nodes: {summary['nodes']}  switches: {summary['switches']} ({levels})")
    if summary["off_leaf_nodes"]:
        attached = ", ".join(f"{n} on {sw}" for n, sw in summary["off_leaf_nodes"].items())
        click.echo(f"nodes under no leaf: {attached}")
    print_table(
        None,
        ["switch", "nodes", "count", "uplinks", "slowest uplink Gb/s"],
        [
            [
                leaf["switch"],
                leaf["nodes"],
                leaf["node_count"],
                fold(leaf["uplinks"]) or "-",
                _gbps(leaf["slowest_uplink_gbps"]),
            ]
            for leaf in summary["leaves"]
        ],
        right_align=lambda col: col in ("count", "slowest uplink Gb/s"),
    )
