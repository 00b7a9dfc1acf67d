"""``slurmopt simulate``: replay a job trace on a modelled fabric under several policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.errors import UsageError
from slurmopt.sim import POLICIES, CommModel, read_trace, scale_load, simulate
from slurmopt.sim.comm import DEFAULT_SHARES, parse_shares
from slurmopt.sim.fabrics import SPEC_HELP, parse_fabric_spec
from slurmopt.sim.schedulers import BF_INTERVAL_S, BF_MAX_JOB_TEST, BF_WINDOW_S
from slurmopt.sim.traces import FORMATS

#: Metrics printed in the table, in order, with their labels.
_TABLE = (
    ("jobs", "jobs"),
    ("finished", "finished"),
    ("never_started", "never started"),
    ("timed_out", "timed out (stretched past limit)"),
    ("avg_jct_s", "avg JCT (s)"),
    ("median_jct_s", "median JCT (s)"),
    ("p95_jct_s", "p95 JCT (s)"),
    ("avg_queue_delay_s", "avg queueing delay (s)"),
    ("median_queue_delay_s", "median queueing delay (s)"),
    ("p95_queue_delay_s", "p95 queueing delay (s)"),
    ("avg_slowdown", "avg bounded slowdown"),
    ("gpu_allocation_ratio", "GPU allocation ratio"),
    ("gpu_allocation_ratio_when_queued", "GPU allocation ratio while jobs wait"),
    ("avg_stranded_gpus", "avg stranded GPUs"),
    ("avg_fgd_unusable_share", "avg FGD unusable share"),
    ("multinode_jobs", "multi-node jobs"),
    ("avg_wait_multinode_s", "avg wait, multi-node (s)"),
    ("avg_leaves_spanned_multinode", "avg leaves spanned, multi-node"),
    ("avg_stretch_multinode", "avg run-time stretch, multi-node"),
    ("makespan_s", "makespan (s)"),
    ("scheduler_passes", "scheduler passes"),
    ("events_per_s", "events per second"),
)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 10 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


@click.command()
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The trace file.",
)
@click.option(
    "--trace-format",
    required=True,
    type=click.Choice(FORMATS),
    help="philly-sia, itp, tiresias, openb, sacct (-P text), sacct-json, or csv.",
)
@click.option(
    "--fabric", "fabric_spec", default="fat-tree:128:16", show_default=True, help=SPEC_HELP + "."
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Choice(POLICIES),
    help="A policy to run; repeat for several (default: all).",
)
@click.option("--load", type=float, help="Scale inter-arrival times so offered load is this.")
@click.option("--limit-jobs", type=click.IntRange(min=1), help="Only the first N jobs by submit.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--penalty",
    type=click.Choice(["on", "off"]),
    default="on",
    show_default=True,
    help="Stretch run times of badly placed multi-node jobs (docs/simulator.md).",
)
@click.option(
    "--comm-shares",
    help="Communication share by job size, MIN_GPUS:SHARE,... (default "
    + ",".join(f"{g}:{s:g}" for g, s in DEFAULT_SHARES)
    + ").",
)
@click.option("--level-penalty", type=float, default=0.5, show_default=True)
@click.option("--leaf-penalty", type=float, default=0.1, show_default=True)
@click.option(
    "--bf-max-job-test",
    type=click.IntRange(min=1),
    default=BF_MAX_JOB_TEST,
    show_default=True,
    help="slurm-backfill-tree: jobs tested per backfill pass.",
)
@click.option(
    "--bf-window",
    type=click.FloatRange(min=1),
    default=BF_WINDOW_S / 60,
    show_default=True,
    help="slurm-backfill-tree: reservation window, minutes.",
)
@click.option(
    "--bf-interval",
    type=click.FloatRange(min=0),
    default=BF_INTERVAL_S,
    show_default=True,
    help="slurm-backfill-tree: seconds between backfill passes.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of tables.")
@click.option("--series/--no-series", default=True, help="Include over_time samples in --json.")
def simulate_cmd(
    trace_path: Path,
    trace_format: str,
    fabric_spec: str,
    policies: tuple[str, ...],
    load: float | None,
    limit_jobs: int | None,
    gpus_per_node: int,
    penalty: str,
    comm_shares: str | None,
    level_penalty: float,
    leaf_penalty: float,
    bf_max_job_test: int,
    bf_window: float,
    bf_interval: float,
    as_json: bool,
    series: bool,
) -> None:
    """Replay a job trace on a modelled cluster under each policy and compare the metrics."""
    try:
        shares = parse_shares(comm_shares) if comm_shares else DEFAULT_SHARES
    except ValueError as exc:
        raise UsageError(f"--comm-shares: {exc}") from None
    if load is not None and load <= 0:
        raise UsageError(f"--load must be positive, got {load}")
    comm = CommModel(penalty == "on", shares, level_penalty, leaf_penalty)
    fabric = parse_fabric_spec(fabric_spec)
    trace = read_trace(trace_path, trace_format, gpus_per_node, limit_jobs)
    if not trace.jobs:
        raise UsageError(f"{trace_path}: no GPU jobs to simulate")
    total_gpus = len(fabric.compute_nodes) * gpus_per_node
    native = trace.offered_load(total_gpus)
    factor = 1.0
    if load is not None:
        trace, factor = scale_load(trace, total_gpus, load)
    names = policies or POLICIES
    results = {
        name: simulate(
            trace, fabric, name, comm, gpus_per_node, bf_max_job_test, bf_window * 60, bf_interval
        )
        for name in names
    }
    header: dict[str, Any] = {
        "trace": {
            "path": str(trace_path),
            "format": trace_format,
            "jobs": len(trace.jobs),
            "gpus_per_node": gpus_per_node,
            "notes": list(trace.notes),
        },
        "fabric": {
            "spec": fabric_spec,
            "source": fabric.source,
            "nodes": len(fabric.compute_nodes),
            "gpus": total_gpus,
            "leaves": len(fabric.leaves()),
        },
        "load": {
            "requested": load,
            "native": None if native is None else round(native, 4),
            "offered": round(load if load is not None else native or 0.0, 4),
            "arrival_scale": round(factor, 6),
        },
        "penalty": comm.to_json(),
        "slurm": {
            "bf_max_job_test": bf_max_job_test,
            "bf_window_min": bf_window,
            "bf_interval_s": bf_interval,
        },
    }
    if as_json:
        emit_json({**header, "policies": {n: r.to_json(series) for n, r in results.items()}})
        return
    click.echo(
        f"trace {trace_path} ({trace_format}): {len(trace.jobs)} jobs; "
        f"fabric {fabric.source}: {len(fabric.compute_nodes)} nodes, {total_gpus} GPUs; "
        f"offered load {header['load']['offered']:.3f}"
        + (f" (native {native:.3f}, arrivals x{factor:.4g})" if load is not None and native else "")
        + f"; comm penalty {penalty}"
    )
    for note in trace.notes:
        click.echo(f"note: {note}")
    for name, result in results.items():
        rows = [(label, _fmt(result.metrics.get(key))) for key, label in _TABLE]
        click.echo("")
        print_table(name, ["metric", "value"], rows, right_align=lambda col: col == "value")
