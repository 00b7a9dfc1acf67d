"""``slurmopt fragmentation``: how much free GPU capacity a new job could really use."""

from __future__ import annotations

from pathlib import Path

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.errors import UsageError
from slurmopt.policy.fragmentation import (
    QUEUE_SOURCE,
    FragmentationReport,
    JobSizeDistribution,
    fragmentation_report,
    parse_job_sizes,
    scope_nodes,
)

_COLUMNS = (
    "switch",
    "nodes",
    "free GPUs",
    "fully free nodes",
    "partly used nodes",
    "stranded GPUs",
    "unavailable nodes",
)


def _read_job_sizes(value: str) -> JobSizeDistribution | None:
    """None for ``queue`` (the report then uses the snapshot's queue), else the file's sizes."""
    if value == QUEUE_SOURCE:
        return None
    try:
        text = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot read job sizes {value}: {reason}") from None
    return parse_job_sizes(text, value)


def _print_report(report: FragmentationReport) -> None:
    rows = [
        (
            s.name,
            s.nodes,
            s.free_gpus,
            s.free_nodes,
            s.partly_used_nodes,
            s.stranded_gpus,
            s.unavailable_nodes,
        )
        for s in report.switches
    ]
    scope = f"partition {report.partition}" if report.partition else "all partitions"
    print_table(
        f"GPU fragmentation per leaf switch ({scope})",
        _COLUMNS,
        rows,
        right_align=lambda col: col != "switch",
    )
    now = report.largest_job_now
    fgd = (
        "n/a (no job sizes)"
        if report.fgd_unusable_share is None
        else f"{report.fgd_unusable_share:.1%} (job sizes from {report.job_sizes.source})"
    )
    lines = [
        f"GPUs: {report.total_gpus} total, {report.allocated_gpus} allocated, "
        f"{report.free_gpus} free, {report.unavailable_gpus} idle on unavailable nodes",
        f"nodes: {report.nodes} in scope, {report.fully_free_nodes} fully free, "
        f"{report.partly_used_nodes} partly used, {report.busy_nodes} busy, "
        f"{report.unavailable_nodes} unavailable",
        f"stranded GPUs: {report.stranded_gpus} "
        f"(fragmentation index {report.fragmentation_index:.3f})",
        f"largest job that could start now: {now.whole_nodes} whole nodes "
        f"({now.whole_nodes_on_one_leaf} on one leaf"
        + (f", {now.leaf}" if now.leaf else "")
        + f"), or {now.gpus_on_one_node} GPUs on one node",
        f"free GPUs a typical job could not use (FGD): {fgd}",
        f"fabric: {report.fabric_source or 'unnamed'}",
    ]
    click.echo("")
    for line in lines + [f"note: {n}" for n in report.notes]:
        click.echo(line)


@click.command()
@click.option("--partition", "-p", default=None, help="Only this partition's nodes (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema v1).")
@click.option(
    "--fabric",
    "fabric_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Fabric description file (default: discovered from Slurm).",
)
@click.option(
    "--job-sizes",
    default=QUEUE_SOURCE,
    show_default=True,
    metavar="queue|FILE",
    help="Job sizes for the FGD measure: the current queue, or a CSV/JSON/YAML file "
    "of nodes,gpus_per_node,weight.",
)
@click.pass_context
def fragmentation(
    ctx: click.Context,
    partition: str | None,
    as_json: bool,
    fabric_file: str | None,
    job_sizes: str,
) -> None:
    """Free, stranded and unusable GPUs, per leaf switch and for the whole scope."""
    from slurmopt.fabric.discover import load_fabric
    from slurmopt.slurm import connect

    distribution = _read_job_sizes(job_sizes)
    obj = ctx.find_root().obj or {}
    client = connect(obj.get("backend", "cli"))
    snapshot = client.snapshot()
    scope_nodes(snapshot, partition)  # an unknown partition fails before fabric discovery
    fabric = load_fabric(client=client, fabric_file=fabric_file, nodes=list(snapshot.nodes))
    report = fragmentation_report(snapshot, fabric, partition=partition, job_sizes=distribution)
    if as_json:
        emit_json(report.to_json())
    else:
        _print_report(report)
