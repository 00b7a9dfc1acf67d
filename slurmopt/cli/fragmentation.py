"""``slurmopt fragmentation``: how much free GPU capacity a new job could really use."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.wiring import Wiring, config_option, db_option, fabric_option, resolve
from slurmopt.errors import UsageError
from slurmopt.policy.fragmentation import (
    QUEUE_SOURCE,
    FragmentationReport,
    JobSizeDistribution,
    fragmentation_report,
    parse_job_sizes,
    scope_nodes,
)

if TYPE_CHECKING:
    from slurmopt.store import FragmentationSample

#: ``--since`` when ``--history`` is given without it.
DEFAULT_HISTORY_SINCE = "1h"

HISTORY_SCHEMA_VERSION = 1

_HISTORY_COLUMNS = (
    "time",
    "free GPUs",
    "stranded GPUs",
    "fragmentation index",
    "largest job (nodes)",
    "FGD share",
)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}

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


def parse_time_bound(text: str, now: float, option: str) -> float:
    """Epoch seconds for ``--since``/``--until``: a duration ago, an ISO 8601 time, or ``@EPOCH``.

    Durations (``90s``, ``30m``, ``1h30m``, ``2d``, ``1w``) count back from
    ``now``; an ISO time without a UTC offset is local time, as ``date`` reads it.
    """
    value = text.strip().lower()
    if value == "now":
        return now
    if value.startswith("@"):
        try:
            return float(value[1:])
        except ValueError:
            pass
    elif value and _DURATION_PART.sub("", value) == "":
        return now - sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(value))
    else:
        try:
            return datetime.fromisoformat(text.strip()).astimezone().timestamp()
        except ValueError:
            pass
    raise UsageError(
        f"{option}: cannot read {text!r}: give a duration ago (30m, 1h, 2d), "
        "an ISO 8601 time (2025-06-01T12:00, 2025-06-01T12:00Z) or @EPOCH"
    )


def _sample_json(sample: FragmentationSample) -> dict[str, Any]:
    return {
        "at": sample.at,
        "partition": sample.partition,
        "total_gpus": sample.total_gpus,
        "allocated_gpus": sample.allocated_gpus,
        "unavailable_gpus": sample.unavailable_gpus,
        "free_gpus": sample.free_gpus,
        "stranded_gpus": sample.stranded_gpus,
        "fragmentation_index": sample.fragmentation_index,
        "largest_job_nodes": sample.largest_job_nodes,
        "largest_single_leaf_job_nodes": sample.largest_single_leaf_job_nodes,
        "fgd_unusable_share": sample.fgd_unusable_share,
    }


def _history(
    wiring: Wiring,
    partition: str | None,
    since_text: str | None,
    until_text: str | None,
    as_json: bool,
) -> None:
    """The stored samples between two times, from the store alone (Slurm is never asked)."""
    from sqlalchemy.exc import DatabaseError

    from slurmopt.explain import format_time
    from slurmopt.store import StoreError

    now = time.time()
    since = parse_time_bound(since_text or DEFAULT_HISTORY_SINCE, now, "--since")
    until = None if until_text is None else parse_time_bound(until_text, now, "--until")
    if until is not None and until <= since:
        raise UsageError(f"--since {format_time(since)} is not before --until {format_time(until)}")
    store = wiring.read_store()
    try:
        samples = store.fragmentation_history(since, until, partition=partition)
    except DatabaseError as exc:
        raise StoreError(f"cannot read {store.describe()}: {exc.orig}") from None
    finally:
        store.close()
    if as_json:
        emit_json(
            {
                "schema_version": HISTORY_SCHEMA_VERSION,
                "partition": partition,
                "since": since,
                "until": until,
                "samples": [_sample_json(s) for s in samples],
            }
        )
        return
    scope = f"partition {partition}" if partition else "all partitions"
    span = f"{format_time(since)} to {'now' if until is None else format_time(until)}"
    if not samples:
        click.echo(f"no fragmentation samples for {scope} from {span} (one is stored per pass)")
        return
    rows = [
        (
            format_time(s.at),
            s.free_gpus,
            s.stranded_gpus,
            f"{s.fragmentation_index:.3f}",
            s.largest_job_nodes,
            "n/a" if s.fgd_unusable_share is None else f"{s.fgd_unusable_share:.1%}",
        )
        for s in samples
    ]
    print_table(
        f"GPU fragmentation history ({scope}), {span}: {len(samples)} sample(s)",
        _HISTORY_COLUMNS,
        rows,
        right_align=lambda col: col != "time",
    )


def _tier_name(level: int) -> str:
    return {0: "0 (leaves)", 1: "1 (above leaves)"}.get(level, str(level))


def _print_tiers(report: FragmentationReport, verbose: bool) -> None:
    """One row per tier with its best switch; with ``verbose``, one row per switch too."""
    if not report.tiers:
        return
    rows = []
    for tier in report.tiers:
        best = tier.best
        rows.append(
            (
                _tier_name(tier.level),
                len(tier.switches),
                best.free_nodes if best else 0,
                best.free_node_gpus if best else 0,
                best.name if best and best.free_nodes else "-",
            )
        )
    click.echo("")
    print_table(
        "Largest whole-node job within one switch, per tier",
        ("level", "switches", "largest job (nodes)", "its GPUs", "switch"),
        rows,
        right_align=lambda col: col not in ("level", "switch"),
    )
    if not verbose:
        return
    click.echo("")
    print_table(
        "Per switch",
        ("level", "switch", "nodes", "free GPUs", "fully free nodes", "largest gang GPUs"),
        [
            (t.level, s.name, s.nodes, s.free_gpus, s.free_nodes, s.free_node_gpus)
            for t in report.tiers
            for s in t.switches
        ],
        right_align=lambda col: col != "switch",
    )


def _print_report(report: FragmentationReport, verbose: bool = False) -> None:
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
    _print_tiers(report, verbose)
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
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema v2).")
@click.option(
    "--verbose", "-v", is_flag=True, help="Also list every switch of every tier (JSON always does)."
)
@fabric_option
@click.option(
    "--job-sizes",
    default=QUEUE_SOURCE,
    show_default=True,
    metavar="queue|FILE",
    help="Job sizes for the FGD measure: the current queue, or a CSV/JSON/YAML file "
    "of nodes,gpus_per_node,weight.",
)
@click.option(
    "--history",
    is_flag=True,
    help="Show the samples the daemon stored over time instead of measuring now "
    "(reads only the store).",
)
@click.option(
    "--since",
    default=None,
    metavar="DURATION|TIME",
    help=f"With --history: from this long ago (30m, 1h, 2d) or this ISO 8601 time "
    f"(default: {DEFAULT_HISTORY_SINCE}).",
)
@click.option(
    "--until",
    default=None,
    metavar="DURATION|TIME",
    help="With --history: up to (not including) this time (default: no limit).",
)
@db_option
@config_option
@click.pass_context
def fragmentation(
    ctx: click.Context,
    partition: str | None,
    as_json: bool,
    verbose: bool,
    fabric_file: str | None,
    job_sizes: str,
    history: bool,
    since: str | None,
    until: str | None,
    db: str | None,
    config_path: str | None,
) -> None:
    """Free, stranded and unusable GPUs, per leaf switch, per tier and for the whole scope.

    Slurm, the fabric and (with --history) the store come from the config
    (--config); --fabric and --db override it.  The report names the fabric.
    """
    source = click.core.ParameterSource.COMMANDLINE
    if history:
        for name in ("fabric_file", "job_sizes"):
            if ctx.get_parameter_source(name) is source:
                flag = "--fabric" if name == "fabric_file" else "--job-sizes"
                raise UsageError(f"{flag} measures the cluster now; it does not apply to --history")
        _history(resolve(ctx, config_path, {"db": db}), partition, since, until, as_json)
        return
    for name, flag in (("since", "--since"), ("until", "--until"), ("db", "--db")):
        if ctx.params[name] is not None:
            raise UsageError(f"{flag} needs --history")
    distribution = _read_job_sizes(job_sizes)
    wiring = resolve(ctx, config_path, {"fabric": fabric_file})
    snapshot = wiring.client().snapshot()
    scope_nodes(snapshot, partition)  # an unknown partition fails before fabric discovery
    fabric = wiring.fabric(snapshot)
    report = fragmentation_report(snapshot, fabric, partition=partition, job_sizes=distribution)
    if as_json:
        emit_json(report.to_json())
    else:
        _print_report(report, verbose)
