"""``slurmopt simulate``: replay a job trace on a modelled fabric under several policies."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric
from slurmopt.sim import POLICIES, CommModel, read_trace, scale_load, simulate
from slurmopt.sim.comm import DEFAULT_SHARES, parse_shares
from slurmopt.sim.fabrics import SPEC_HELP, parse_fabric_spec
from slurmopt.sim.fill import (
    DEFAULT_MAX_ARRIVED,
    FILL_POLICIES,
    FillResult,
    NodeSpec,
    fill,
    read_node_list,
    read_pods,
)
from slurmopt.sim.schedulers import OPT_IN_POLICIES, parse_variant
from slurmopt.sim.slurm_baseline import BF_INTERVAL_S, BF_MAX_JOB_TEST, BF_WINDOW_S
from slurmopt.sim.traces import FORMATS

DEFAULT_FABRIC = "fat-tree:128:16"
#: Nodes per leaf of the fabric built over a --node-list.
NODE_LIST_LEAF = 32

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
    ("stranded_share_queue_empty", "  share of that time with nobody waiting"),
    ("avg_stranded_gpus_when_queued", "avg stranded GPUs while jobs wait"),
    ("avg_stranded_gpus_usable_when_queued", "  of those, a waiting job could use"),
    ("avg_stranded_gpus_floor", "stranded-GPU floor (perfect packing)"),
    ("avg_fgd_unusable_share", "avg FGD unusable share"),
    ("multinode_jobs", "multi-node jobs"),
    ("avg_wait_multinode_s", "avg wait, multi-node (s)"),
    ("avg_leaves_spanned_multinode", "avg leaves spanned, multi-node"),
    ("avg_tier_multinode", "avg tier spanned, multi-node (0 leaf, 1 pod)"),
    ("multinode_above_best_tier", "multi-node jobs above their best tier"),
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


def _check_policies(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """Known names, or ``slurmopt:KEY=VALUE,...`` variants whose keys and values parse."""
    known = set(POLICIES) | set(OPT_IN_POLICIES) | set(FILL_POLICIES)
    for name in value:
        if name in known:
            continue
        if name.startswith("slurmopt:"):
            try:
                parse_variant(name)
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from None
            continue
        raise click.BadParameter(f"{name!r} is not one of {', '.join(sorted(known))}")
    if len(set(value)) != len(value):
        raise click.BadParameter("a policy is named twice")
    return value


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
    help="philly-sia, itp, tiresias, openb, sacct (-P text), sacct-json, csv, or synthetic "
    "(then --trace is the generator's KEY=VALUE,... spec, e.g. 'jobs=2000,mix=1:0.5/8:0.3/"
    "32:0.2,duration_s=3600,seed=7'; --load defaults to 1.0).",
)
@click.option(
    "--mode",
    type=click.Choice(["replay", "fill"]),
    default="replay",
    show_default=True,
    help="replay: jobs arrive and end on a clock; fill: jobs arrive and never leave "
    "(the FGD paper's allocation-vs-arrived-load experiment).",
)
@click.option(
    "--fabric",
    "fabric_spec",
    help=SPEC_HELP + f" (default {DEFAULT_FABRIC}; in fill mode with --node-list, "
    "fat-tree:NODES:32 over the listed nodes).",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    callback=_check_policies,
    help="A policy to run; repeat for several (default: all of the mode's): "
    f"{', '.join(sorted(set(POLICIES) | set(FILL_POLICIES)))}; best-fit is fill mode only; "
    f"{', '.join(OPT_IN_POLICIES)} (the daemon's whole loop) runs only when named. "
    "A variant of slurmopt changes planner knobs: 'slurmopt:compact_wait_share=none,"
    "align_ends=off,runtime=history' (docs/simulator.md).",
)
@click.option(
    "--node-list",
    type=click.Path(dir_okay=False, path_type=Path),
    help="fill: the cluster's nodes (sn,cpu_milli,memory_mib,gpu,model, openb's node list).",
)
@click.option(
    "--seed",
    "seeds",
    type=int,
    multiple=True,
    help="fill: arrival-order seed; repeat for several (default 42).",
)
@click.option(
    "--max-arrived",
    type=click.FloatRange(min=0.01, max=10),
    default=DEFAULT_MAX_ARRIVED,
    show_default=True,
    help="fill: stop when the GPUs asked for reach this share of capacity.",
)
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write a PNG plot.")
@click.option("--load", type=float, help="Scale inter-arrival times so offered load is this.")
@click.option("--limit-jobs", type=click.IntRange(min=1), help="Only the first N jobs by submit.")
@click.option(
    "--skip-jobs",
    type=click.IntRange(min=0),
    default=0,
    help="Drop the first N jobs by submit first (a later window, with --limit-jobs).",
)
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
@click.option(
    "--daemon-interval",
    type=float,
    default=0.0,
    help="slurmopt: the daemon's cycle, seconds; its planner runs only at multiples of it "
    "(default 0: at every event).",
)
@click.option(
    "--pin-latency",
    type=float,
    default=0.0,
    help="slurmopt: seconds from a cycle's decision to the job's start, the pin and release "
    "(default 0: at once).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of tables.")
@click.option("--series/--no-series", default=True, help="Include over_time samples in --json.")
def simulate_cmd(
    trace_path: Path,
    trace_format: str,
    mode: str,
    fabric_spec: str | None,
    policies: tuple[str, ...],
    node_list: Path | None,
    seeds: tuple[int, ...],
    max_arrived: float,
    plot: Path | None,
    load: float | None,
    limit_jobs: int | None,
    skip_jobs: int,
    gpus_per_node: int,
    penalty: str,
    comm_shares: str | None,
    level_penalty: float,
    leaf_penalty: float,
    bf_max_job_test: int,
    bf_window: float,
    bf_interval: float,
    daemon_interval: float,
    pin_latency: float,
    as_json: bool,
    series: bool,
) -> None:
    """Replay a job trace on a modelled cluster under each policy and compare the metrics."""
    for flag, value in (("--daemon-interval", daemon_interval), ("--pin-latency", pin_latency)):
        if not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{flag} must be a number of seconds >= 0, got {value}")
    try:
        shares = parse_shares(comm_shares) if comm_shares else DEFAULT_SHARES
    except ValueError as exc:
        raise UsageError(f"--comm-shares: {exc}") from None
    if load is not None and load <= 0:
        raise UsageError(f"--load must be positive, got {load}")
    comm = CommModel(penalty == "on", shares, level_penalty, leaf_penalty)
    if mode == "fill":
        _fill_mode(
            trace_path, trace_format, fabric_spec, policies, node_list, seeds or (42,),
            max_arrived, gpus_per_node, plot, as_json, series,
        )  # fmt: skip
        return
    replay = set(POLICIES) | set(OPT_IN_POLICIES)
    wrong = sorted(p for p in policies if p not in replay and not p.startswith("slurmopt:"))
    if wrong:
        raise UsageError(f"--policy {wrong[0]} runs in --mode fill only")
    if node_list is not None:
        raise UsageError("--node-list needs --mode fill")
    fabric_spec = fabric_spec or DEFAULT_FABRIC
    fabric = parse_fabric_spec(fabric_spec)
    trace = read_trace(trace_path, trace_format, gpus_per_node, limit_jobs, skip_jobs)
    if not trace.jobs:
        raise UsageError(f"{trace_path}: no GPU jobs to simulate")
    total_gpus = len(fabric.compute_nodes) * gpus_per_node
    native = trace.offered_load(total_gpus)
    factor = 1.0
    if load is None and trace_format == "synthetic":
        load = 1.0  # the generator's arrivals (one a second) mean nothing on their own
    if load is not None:
        trace, factor = scale_load(trace, total_gpus, load)
    names = policies or POLICIES
    results = {}
    for name in names:
        with _progress(f"{name}") as progress:
            results[name] = simulate(
                trace, fabric, name, comm, gpus_per_node, bf_max_job_test, bf_window * 60,
                bf_interval, progress, daemon_interval_s=daemon_interval,
                pin_latency_s=pin_latency,
            )  # fmt: skip
    if plot is not None:
        from slurmopt.sim.plots import plot_over_time

        title = f"{trace_path.name}: {len(trace.jobs)} jobs, {total_gpus} GPUs"
        if load is not None:
            title += f", load {load:g}"
        plot_over_time({n: r.series for n, r in results.items()}, plot, title)
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
        "daemon": {"interval_s": daemon_interval, "pin_latency_s": pin_latency},
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
        + (
            f"; slurmopt starts at the daemon's cycle ({daemon_interval:g} s) "
            f"+ {pin_latency:g} s pin latency"
            if daemon_interval or pin_latency
            else ""
        )
    )
    for note in trace.notes:
        click.echo(f"note: {note}")
    for name, result in results.items():
        rows = [(label, _fmt(result.metrics.get(key))) for key, label in _TABLE]
        click.echo("")
        print_table(name, ["metric", "value"], rows, right_align=lambda col: col == "value")


@contextlib.contextmanager
def _progress(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr when it is a terminal; None (no bar) otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(f"[bold]{label}", *columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            if done == total or done % 50 == 0:
                bar.update(task, completed=done, total=total)

        yield update


def _fill_cluster(
    fabric_spec: str | None, node_list: Path | None, gpus_per_node: int
) -> tuple[Fabric, list[NodeSpec], str]:
    """The fabric and its nodes' GPUs, CPU and memory for fill mode."""
    if node_list is None:
        spec = fabric_spec or DEFAULT_FABRIC
        fabric = parse_fabric_spec(spec)
        return fabric, [NodeSpec(gpus_per_node)] * len(fabric.compute_nodes), spec
    specs = read_node_list(node_list)
    spec = fabric_spec or f"fat-tree:{len(specs)}:{NODE_LIST_LEAF}"
    fabric = parse_fabric_spec(spec)
    if len(fabric.compute_nodes) != len(specs):
        raise UsageError(
            f"--fabric {spec} has {len(fabric.compute_nodes)} nodes, "
            f"--node-list {node_list} {len(specs)}"
        )
    return fabric, specs, spec


def _fill_mode(
    trace_path: Path,
    trace_format: str,
    fabric_spec: str | None,
    policies: tuple[str, ...],
    node_list: Path | None,
    seeds: tuple[int, ...],
    max_arrived: float,
    gpus_per_node: int,
    plot: Path | None,
    as_json: bool,
    series: bool,
) -> None:
    """``--mode fill``: allocation against GPUs asked for, per policy and seed."""
    wrong = sorted(set(policies) - set(FILL_POLICIES))
    if wrong:
        raise UsageError(f"--policy {wrong[0]} does not run in --mode fill")
    fabric, specs, spec = _fill_cluster(fabric_spec, node_list, gpus_per_node)
    widest = max(s.gpus for s in specs)
    pods, notes = read_pods(trace_path, trace_format, min(gpus_per_node, widest))
    if not any(p.gpus_per_node for p in pods):
        raise UsageError(f"{trace_path}: no GPU jobs to simulate")
    names = policies or FILL_POLICIES
    runs: dict[str, list[FillResult]] = {}
    for name in names:
        runs[name] = []
        for seed in seeds:
            with _progress(f"{name} seed {seed}") as progress:
                runs[name].append(fill(pods, fabric, specs, name, seed, max_arrived, progress))
    total = sum(s.gpus for s in specs)
    doc: dict[str, Any] = {
        "mode": "fill",
        "trace": {
            "path": str(trace_path),
            "format": trace_format,
            "jobs": len(pods),
            "notes": notes,
        },
        "fabric": {
            "spec": spec,
            "nodes": len(specs),
            "gpus": total,
            "leaves": len(fabric.leaves()),
        },
        "max_arrived_pct": round(max_arrived * 100),
        "seeds": list(seeds),
        "policies": {
            name: {
                "mean_gpu_allocation_pct": round(sum(r.allocation_at_max for r in rs) / len(rs), 2),
                "runs": [r.to_json(series) for r in rs],
            }
            for name, rs in runs.items()
        },
    }
    if plot is not None:
        from slurmopt.sim.plots import plot_fill

        curves = {name: _mean_curve([r.curve for r in rs]) for name, rs in runs.items()}
        plot_fill(curves, plot, f"{trace_path.name} on {total} GPUs, {len(seeds)} seed(s)")
    if as_json:
        emit_json(doc)
        return
    click.echo(
        f"fill: {trace_path} ({trace_format}), {len(pods)} tasks, drawn until "
        f"{doc['max_arrived_pct']}% of {total} GPUs is asked for; fabric {spec}; "
        f"seeds {', '.join(map(str, seeds))}"
    )
    for note in notes:
        click.echo(f"note: {note}")
    rows = [
        (
            name,
            f"{entry['mean_gpu_allocation_pct']:.2f}",
            _fmt(sum(r["rejected_gpu_pods"] for r in entry["runs"]) / len(entry["runs"])),
        )
        for name, entry in doc["policies"].items()
    ]
    click.echo("")
    print_table(
        f"GPU allocation at {doc['max_arrived_pct']}% asked for (mean over seeds)",
        ["policy", "allocated %", "GPU tasks turned away"],
        rows,
        right_align=lambda col: col != "policy",
    )


def _mean_curve(curves: list[tuple[tuple[int, float], ...]]) -> list[tuple[int, float]]:
    length = min(len(c) for c in curves)
    return [(curves[0][i][0], sum(c[i][1] for c in curves) / len(curves)) for i in range(length)]
