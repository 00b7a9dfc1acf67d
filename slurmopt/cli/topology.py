"""``slurmopt topology``: show the fabric the daemon will place jobs on, and check it."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.wiring import config_option, fabric_option, resolve
from slurmopt.errors import UsageError, one_line
from slurmopt.fabric import Fabric
from slurmopt.hostlist import HostlistError, expand, fold

#: Version of the ``topology show --json`` and ``topology check --json`` documents.
SCHEMA_VERSION = 1


def _uplink(fabric: Fabric, switch: str, up: str) -> dict[str, Any]:
    edge = fabric.graph.edges[switch, up]
    return {
        "switch": up,
        "bandwidth_gbps": float(edge.get("bandwidth_gbps", 0.0)),
        "oversubscription": float(edge.get("oversubscription", 1.0)),
    }


def _tiers(fabric: Fabric) -> list[dict[str, Any]]:
    """Every level's switches with the nodes beneath them and their uplinks."""
    tiers = []
    for level, names in fabric.levels().items():
        switches = []
        for sw in names:
            beneath = fabric.nodes_beneath(sw)
            link_speed = fabric.graph.nodes[sw].get("link_speed")
            switches.append(
                {
                    "switch": sw,
                    "nodes": fold(beneath),
                    "node_count": len(beneath),
                    "uplinks": [_uplink(fabric, sw, up) for up in fabric.uplinks(sw)],
                    "link_speed": link_speed,
                }
            )
        tiers.append({"level": level, "switches": switches})
    return tiers


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
        "schema_version": SCHEMA_VERSION,
        "source": fabric.source,
        "name": fabric.name,
        "nodes": len(fabric.compute_nodes),
        "switches": len(fabric.switches),
        "switches_per_level": {str(level): len(sws) for level, sws in fabric.levels().items()},
        "leaves": leaves,
        "off_leaf_nodes": {node: fabric.attachment_of(node) for node in off_leaf},
        "tiers": _tiers(fabric),
        "domains": [
            {"domain": name, "nodes": fold(nodes), "node_count": len(nodes)}
            for name, nodes in fabric.domains().items()
        ],
        "warnings": list(fabric.warnings),
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
    """Print the fabric: where it came from, and every switch of every tier.

    The fabric is --fabric, else the config's fabric, else discovered from
    Slurm (through the config's backend); "source" names which.
    """
    fabric = resolve(ctx, config_path, {"fabric": fabric_file}).fabric()
    summary = fabric_summary(fabric)
    for warning in summary["warnings"]:
        click.echo(f"slurmopt: warning: {one_line(warning)}", err=True)
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
        ["switch", "level", "nodes", "count", "uplinks", "uplink Gb/s", "oversub"],
        [
            [
                sw["switch"],
                tier["level"],
                sw["nodes"] or "-",
                sw["node_count"],
                fold(up["switch"] for up in sw["uplinks"]) or "-",
                _spread(up["bandwidth_gbps"] for up in sw["uplinks"]),
                _spread(up["oversubscription"] for up in sw["uplinks"]),
            ]
            for tier in summary["tiers"]
            for sw in tier["switches"]
        ],
        right_align=lambda col: col in ("level", "count", "uplink Gb/s", "oversub"),
    )
    if summary["domains"]:
        print_table(
            None,
            ["domain", "nodes", "count"],
            [[d["domain"], d["nodes"], d["node_count"]] for d in summary["domains"]],
            right_align=lambda col: col == "count",
        )


def _spread(values: Iterable[float]) -> str:
    """One value, or the lowest and highest when uplinks differ; ``-`` for none."""
    seen = sorted(set(values))
    if not seen:
        return "-"
    return _gbps(seen[0]) if len(seen) == 1 else f"{_gbps(seen[0])}-{_gbps(seen[-1])}"


@topology.command()
@fabric_option
@config_option
@click.option(
    "--nodes",
    "node_list",
    metavar="HOSTLIST",
    help="The cluster's nodes (default: the nodes Slurm reports).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def check(
    ctx: click.Context,
    fabric_file: str | None,
    config_path: str | None,
    node_list: str | None,
    as_json: bool,
) -> None:
    """Load the fabric against the cluster's nodes and list what is doubtful in it.

    Exit 0 when nothing is, 1 when there are warnings (Slurm would carry
    on, but the model may not be what was meant), 65 for a description
    Slurm would refuse.
    """
    from slurmopt.fabric.discover import load_fabric

    wiring = resolve(ctx, config_path, {"fabric": fabric_file})
    if node_list is not None:
        try:
            names = expand(node_list)
        except HostlistError as exc:
            raise UsageError(f"--nodes: {exc}") from None
    else:
        names = list(wiring.client().snapshot().nodes)
    if wiring.config.fabric:
        fabric = load_fabric(fabric_file=wiring.config.fabric, nodes=names)
    else:
        fabric = load_fabric(client=wiring.client(), nodes=names)
    if as_json:
        emit_json(
            {
                "schema_version": SCHEMA_VERSION,
                "source": fabric.source,
                "cluster_nodes": len(names),
                "fabric_nodes": len(fabric.compute_nodes),
                "warnings": list(fabric.warnings),
            }
        )
    else:
        click.echo(f"source: {fabric.source}")
        click.echo(f"nodes: {len(names)} in the cluster, {len(fabric.compute_nodes)} in the fabric")
        for warning in fabric.warnings:
            click.echo(f"warning: {one_line(warning)}")
        click.echo(f"{len(fabric.warnings)} warning(s)" if fabric.warnings else "no problems found")
    if fabric.warnings:
        sys.exit(1)
