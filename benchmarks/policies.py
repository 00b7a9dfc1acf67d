"""The standard policy comparison: slurmopt against Slurm's schedulers on real traces.

Replays windows of three public traces (Philly, one Microsoft ITP cluster,
Tiresias) at offered loads 0.8, 1.0 and 1.2 under ``slurm-fifo``,
``slurm-backfill-tree`` and ``slurmopt``, with the communication penalty on
and again off (the topology bound: with the penalty off placement costs
nothing, so the gap between the two runs is what badly placed gangs cost),
measures the levers one at a time (``LEVERS``: variants of slurmopt; and
preemption on a synthetic workload, since no public trace marks jobs
preemptible),
then fills the cluster of the openb trace in arrival-fill mode (best-fit
against slurmopt, next to the FGD paper's published figures).  Writes
``docs/benchmarks.md`` and its plots; the document is generated, never
edited by hand.

Cluster size rule (per trace, from its window): leaves of 8 nodes of 8 GPUs;
enough nodes for the window's native average GPU demand (so load 1.0 is the
trace's own arrival rate give or take) and for 4 copies of its largest job,
at least 2 leaves when the window has multi-node jobs, rounded up to whole
leaves.

    nice -n 10 python benchmarks/policies.py              # full run, writes the doc
    python benchmarks/policies.py --limit-scale 0.1 --out /tmp/b   # a quick look
    python benchmarks/policies.py --traces DIR            # traces elsewhere
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "traces"
DEFAULT_OUT = REPO / "docs"
LOADS = (0.8, 1.0, 1.2)
POLICIES = ("slurm-fifo", "slurm-backfill-tree", "slurmopt")
#: The policies run again with the penalty off (the bound needs only the two contenders).
BOUND_POLICIES = ("slurm-backfill-tree", "slurmopt")
#: Levers measured one at a time (variants of slurmopt, penalty on), beside the default.
LEVERS = (
    ("slurmopt:compact_wait_share=none", "gangs wait for one leaf however long"),
    ("slurmopt:compact_wait_share=0.5", "gangs wait for one leaf up to half their time limit"),
    (
        "slurmopt:compact_wait_share=0.1",
        "gangs wait for one leaf at most a tenth of their time limit, about what spreading costs",
    ),
    (
        "slurmopt:reserve_one_leaf=off",
        "a gang that cannot start now is reserved at the earliest time on any leaves, as "
        "Slurm's backfill reserves",
    ),
    ("slurmopt:align_ends=off", "no end-time alignment of one-node jobs"),
    ("slurmopt:runtime=history", "run times estimated from ended jobs alike"),
    ("slurmopt:runtime=oracle", "true run times (the bound of any prediction)"),
)
#: Checkpoint-acknowledged preemption needs jobs marked preemptible, which no public trace has:
#: a seeded synthetic workload with half of them preemptible, on a fixed fabric.
PREEMPT_TRACE = "jobs=2000,preemptible=0.5,seed=7"
PREEMPT_FABRIC = "fat-tree:64:8"
PREEMPT_POLICIES = ("slurm-backfill-tree", "slurmopt:preempt=off", "slurmopt")
PREEMPT_METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_queue_delay_not_preemptible_s",
    "preemptions",
    "preemption_lost_gpu_h",
    "gpu_allocation_ratio_when_queued",
)
#: Elastic starts need jobs marked elastic, which no public trace has either: the same
#: workload with half the multi-node jobs elastic (from half their nodes to all).
ELASTIC_TRACE = "jobs=2000,elastic=0.5,seed=7"
ELASTIC_POLICIES = ("slurm-backfill-tree", "slurmopt:elastic=off", "slurmopt")
ELASTIC_METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_wait_multinode_s",
    "elastic_smaller_starts",
    "gpu_allocation_ratio_when_queued",
    "avg_stranded_gpus",
    "avg_stranded_gpus_floor",
)
LEVER_METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_stranded_gpus",
    "avg_stranded_gpus_when_queued",
    "gpu_allocation_ratio_when_queued",
    "avg_wait_multinode_s",
    "avg_jct_multinode_s",
)
GPUS_PER_NODE = 8
NODES_PER_LEAF = 8
#: The cluster holds at least this many copies of the window's largest job.
LARGEST_JOB_COPIES = 4
FILL_SEEDS = (42,)
FILL_POLICIES = ("best-fit", "slurmopt")
#: Per-metric targets for slurmopt / slurm-backfill-tree (docs: the issue's goals).
METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_slowdown",
    "gpu_allocation_ratio",
    "gpu_allocation_ratio_when_queued",
    "avg_stranded_gpus",
    "avg_stranded_gpus_when_queued",
    "avg_stranded_gpus_usable_when_queued",
    "avg_wait_multinode_s",
    "avg_jct_multinode_s",
    "avg_leaves_spanned_multinode",
)
#: Shown beside the targets in the across-windows table, as geometric means only.
ACROSS_EXTRA = ("avg_stranded_gpus_usable_when_queued",)
#: metric -> (comparison, bound): slurmopt/backfill must be <= or >= bound to count as better.
TARGETS: dict[str, tuple[str, float]] = {
    "avg_jct_s": ("<=", 1.02),
    "p95_queue_delay_s": ("<=", 1.02),
    "avg_slowdown": ("<=", 1.02),
    "gpu_allocation_ratio_when_queued": (">", 1.0),
    "avg_stranded_gpus": ("<=", 0.5),
    "avg_wait_multinode_s": ("<", 1.0),
    "avg_leaves_spanned_multinode": ("<=", 1.0),
}
#: Ratios this close to 1 are ties, not shortfalls with a cause.
TIE = 0.005
#: Below this p95 queueing delay under backfill (s) the load is too low for jobs to queue.
NO_QUEUE_S = 60.0


@dataclass(frozen=True)
class TraceSpec:
    """One window of a trace: its label, reader format, file, and which jobs by submit."""

    label: str
    fmt: str
    relpath: str
    limit_jobs: int | None
    skip_jobs: int = 0
    #: The trace the window is from (windows of one trace are summed up together).
    family: str = ""

    @property
    def trace(self) -> str:
        return self.family or self.label

    def window_text(self, limit: int | None) -> str:
        if limit is None:
            return "whole file"
        first = self.skip_jobs + 1
        return f"jobs {first:,}-{self.skip_jobs + limit:,} by submit"


def _windows(
    label: str, fmt: str, relpath: str, size: int, skips: Sequence[int]
) -> list[TraceSpec]:
    """Windows of ``size`` jobs after skipping each of ``skips``; the first keeps the bare label."""
    return [
        TraceSpec(
            label if not skip else f"{label} #{skip // size + 1}", fmt, relpath, size, skip, label
        )
        for skip in skips
    ]


#: A single window is one draw of a chaotic system: placement changes cascade, and a policy
#: can look better or worse by 5-10% on one window for no reason it would keep on another.
#: Three windows per trace far apart (levers run on the first only).
TRACES = (
    *_windows("philly", "philly-sia", "philly-sia/philly.csv", 2000, (0, 20000, 40000)),
    *_windows("itp-cluster04", "itp", "itp-microsoft/cluster04.csv", 2000, (0, 4000, 8000)),
    TraceSpec("tiresias", "tiresias", "tiresias/60_job.csv", None),
)
OPENB_PODS = "openb-alibaba-gpu-v2023/openb_pod_list_default.csv"
OPENB_NODES = "openb-alibaba-gpu-v2023/openb_node_list_gpu_node.csv"
FGD_RESULTS = "fgd-results/analysis_allo_discrete.csv"
OPENB_WORKLOAD = "openb_pod_list_default"


class MissingTraces(SystemExit):
    """The traces directory or one of its files is not there (one line, exit 66)."""

    def __init__(self, what: str) -> None:
        print(f"policies.py: {what} (use --traces DIR)", file=sys.stderr)
        super().__init__(66)


def check_traces(root: Path, relpaths: Iterable[str]) -> None:
    """Fail with one line before any run when a trace file is missing."""
    if not root.is_dir():
        raise MissingTraces(f"no traces directory at {root}")
    for rel in relpaths:
        if not (root / rel).is_file():
            raise MissingTraces(f"missing trace file {root / rel}")


@functools.lru_cache(maxsize=16)
def load_window(path: str, fmt: str, limit_jobs: int | None, skip_jobs: int = 0) -> Any:
    """The trace window, read once per process (workers replay it many times)."""
    from slurmopt.sim import read_trace

    return read_trace(path, fmt, GPUS_PER_NODE, limit_jobs, skip_jobs)


def size_cluster(trace: Any) -> tuple[int, float]:
    """Nodes of the fabric for ``trace`` by the module's rule, and its native average demand."""
    jobs = trace.jobs
    span = jobs[-1].submit_s - jobs[0].submit_s
    demand = trace.work_gpu_s() / span if span > 0 else float(sum(j.gpus for j in jobs))
    largest = max(j.nodes for j in jobs)
    nodes = max(math.ceil(demand / GPUS_PER_NODE), LARGEST_JOB_COPIES * largest)
    if largest > 1:
        nodes = max(nodes, 2 * NODES_PER_LEAF)
    return NODES_PER_LEAF * math.ceil(nodes / NODES_PER_LEAF), demand


def after_last_arrival(trace: Any, arrival_scale: float) -> float:
    """Share of the window's work that would still run after its last arrival (started on arrival).

    The heavy tail of a short window: a few multi-week jobs can bring most
    of its work, and that part runs after the arrivals stop whatever the
    load, so it shows how much of a replay is a drain rather than a queue.
    """
    jobs = trace.jobs
    last = jobs[-1].submit_s * arrival_scale
    work = trace.work_gpu_s()
    late = sum(j.gpus * max(0.0, j.submit_s * arrival_scale + j.duration_s - last) for j in jobs)
    return late / work if work > 0 else 0.0


def fabric_spec(nodes: int) -> str:
    return f"fat-tree:{nodes}:{NODES_PER_LEAF}"


@dataclass(frozen=True)
class Case:
    """One replay: a trace window at one load, one penalty setting, one policy."""

    label: str
    path: str
    fmt: str
    limit_jobs: int | None
    fabric: str
    load: float
    penalty: bool
    policy: str
    skip_jobs: int = 0


def run_case(case: Case, series: bool = False) -> dict[str, Any]:
    """Replay one case; the policy's metrics plus what the load scaling did."""
    from slurmopt.errors import SlurmoptError
    from slurmopt.sim import CommModel, scale_load, simulate
    from slurmopt.sim.fabrics import parse_fabric_spec

    out: dict[str, Any] = {
        "label": case.label,
        "load": case.load,
        "penalty": case.penalty,
        "policy": case.policy,
        "metrics": {},
    }
    trace = load_window(case.path, case.fmt, case.limit_jobs, case.skip_jobs)
    fabric = parse_fabric_spec(case.fabric)
    total = len(fabric.compute_nodes) * GPUS_PER_NODE
    try:
        scaled, out["arrival_scale"] = scale_load(trace, total, case.load)
    except SlurmoptError as exc:  # a load the window cannot offer: reported, not fatal
        out["error"] = str(exc)
        return out
    result = simulate(scaled, fabric, case.policy, CommModel(case.penalty), GPUS_PER_NODE)
    out["metrics"] = dict(result.metrics)
    # Each multi-node job's wait, so the comparison can pair the same gang under both policies.
    if case.policy in BOUND_POLICIES and case.fmt != "synthetic":
        out["gang_waits"] = {
            str(o.job.job_id): round(o.start - o.job.submit_s)
            for o in result.outcomes
            if o.job.nodes > 1 and o.start is not None
        }
    if series:
        out["series"] = result.series
    return out


def _run_case_with_series(case: Case) -> dict[str, Any]:
    return run_case(case, series=True)


@dataclass(frozen=True)
class FillCase:
    """One arrival-fill run of openb."""

    pods: str
    nodes: str
    policy: str
    seed: int


def run_fill(case: FillCase) -> dict[str, Any]:
    """Fill openb's cluster under one policy and seed; allocation at 130% and the curve."""
    from slurmopt.sim.fabrics import parse_fabric_spec
    from slurmopt.sim.fill import fill, read_node_list, read_pods

    specs = read_node_list(case.nodes)
    fabric = parse_fabric_spec(f"fat-tree:{len(specs)}:32")
    widest = max(s.gpus for s in specs)
    pods, _ = read_pods(case.pods, "openb", min(GPUS_PER_NODE, widest))
    result = fill(pods, fabric, specs, case.policy, case.seed)
    return {
        "policy": case.policy,
        "seed": case.seed,
        "gpus": sum(s.gpus for s in specs),
        "allocation_pct": result.allocation_at_max,
        "rejected_gpu_pods": result.rejected_gpu_pods,
        "wall_s": round(result.wall_s, 1),
        "curve": list(result.curve),
    }


def published_curves(path: Path, workload: str, policies: Sequence[str]) -> dict[str, Any]:
    """Mean published allocation curve per policy (``fgd-results``), up to 130%."""
    out: dict[str, Any] = {}
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for policy in policies:
        chosen = [
            r for r in rows
            if r["workload"] == workload and r["sc_policy"].split("-", 1)[-1] == policy
        ]  # fmt: skip
        if not chosen:
            continue
        points = [k for k in chosen[0] if k.isdigit() and chosen[0][k] not in ("", None)]
        xs = sorted(int(k) for k in points if int(k) <= 130)
        out[policy] = [(x, sum(float(r[str(x)]) for r in chosen) / len(chosen)) for x in xs]
    return out


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """slurmopt / baseline; None when either is missing or the baseline is 0 and ours is not."""
    if ours is None or theirs is None:
        return None
    if theirs == 0:
        return 1.0 if ours == 0 else None
    return ours / theirs


def meets(metric: str, value: float | None) -> bool | None:
    """Whether a ratio meets the metric's target (None: no target or no ratio)."""
    if value is None or metric not in TARGETS:
        return None
    op, bound = TARGETS[metric]
    return {"<=": value <= bound, "<": value < bound, ">": value > bound}[op]


def shortfall_reason(
    metric: str,
    ours: Mapping[str, Any],
    base: Mapping[str, Any],
    gang: tuple[str, float, float] | None = None,
) -> str:
    """A short cause for a missed target, when the figures show one.

    ``gang`` is :func:`worst_gang` of the two runs, when their per-job waits are known.
    """
    if metric == "avg_stranded_gpus":
        if (base.get("avg_stranded_gpus") or 0) < 1:
            return "backfill strands under one GPU on average already"
        target = TARGETS["avg_stranded_gpus"][1] * base["avg_stranded_gpus"]
        floor = ours.get("avg_stranded_gpus_floor")
        if floor is not None and floor > target:
            return (
                f"below the packing floor: the target is {target:.2f} GPUs, and any packing of "
                f"the jobs slurmopt runs strands at least {floor:.2f} (it strands "
                f"{ours.get('avg_stranded_gpus', 0):.2f})"
            )
        idle = ours.get("stranded_share_queue_empty")
        if idle is not None and idle >= 0.5:
            usable = ratio(
                ours.get("avg_stranded_gpus_usable_when_queued"),
                base.get("avg_stranded_gpus_usable_when_queued"),
            )
            while_waiting = (
                ""
                if usable is None
                else (
                    f"; while jobs wait, the stranded GPUs a waiting job could use are "
                    f"{usable:.2f}x backfill's "
                    f"({_fmt(ours.get('avg_stranded_gpus_usable_when_queued'))} vs "
                    f"{_fmt(base.get('avg_stranded_gpus_usable_when_queued'))})"
                )
            )
            return (
                f"{idle:.0%} of slurmopt's stranded GPU-time "
                f"({_fmt_share(base.get('stranded_share_queue_empty'))} of backfill's) is with "
                f"nobody waiting: spare capacity no job is kept from, which only moving running "
                f"jobs would pack{while_waiting}"
            )
    if base.get("p95_queue_delay_s") is not None and base["p95_queue_delay_s"] < NO_QUEUE_S:
        return "load too low to queue (backfill's p95 delay under 1 min)"
    if metric in ("avg_wait_multinode_s", "avg_leaves_spanned_multinode"):
        if not base.get("multinode_jobs"):
            return "no multi-node jobs in the window"
        tied = ratio(ours.get(metric), base.get(metric))
        if tied is not None and abs(tied - 1) < TIE:
            return f"a tie (within {TIE:.1%}): these jobs start at nearly the same times under both"
        done = ratio(ours.get("avg_jct_multinode_s"), base.get("avg_jct_multinode_s"))
        if metric == "avg_wait_multinode_s" and done is not None and done < 1:
            return (
                f"gangs wait longer for compact placements but finish sooner (their mean "
                f"completion time x{done:.3f})"
            )
        if metric == "avg_wait_multinode_s":
            causes = []
            if (ours.get("avg_leaves_spanned_multinode") or 0) < (
                base.get("avg_leaves_spanned_multinode") or 0
            ):
                causes.append("gangs wait for one leaf instead of spreading (fewer leaves spanned)")
            causes.append(_one_gang_carries(ours, base, gang))
            if any(causes):
                return "; ".join(c for c in causes if c)
    if metric == "avg_stranded_gpus":
        queued = ratio(
            ours.get("avg_stranded_gpus_when_queued"), base.get("avg_stranded_gpus_when_queued")
        )
        if queued is not None and queued <= TARGETS["avg_stranded_gpus"][1]:
            return (
                f"while jobs wait slurmopt strands {queued:.2f}x; the rest is free GPUs on "
                "partly used nodes with nobody waiting for them"
            )
        if (ours.get("avg_leaves_spanned_multinode") or 0) < (
            base.get("avg_leaves_spanned_multinode") or 0
        ):
            return (
                "consistent with partly used nodes held for one-leaf gang reservations "
                "(fewer leaves spanned)"
            )
    if metric == "gpu_allocation_ratio_when_queued":
        if base.get("gpu_allocation_ratio_when_queued") is None:
            return "no job ever waited under backfill"
        idle = idle_split(ours, base)
        tied = ratio(ours.get(metric), base.get(metric))
        if tied is not None and abs(tied - 1) < TIE:
            return f"a tie (within {TIE:.1%}){idle}"
        if idle:
            return idle.lstrip("; ")
    if ours.get("never_started") or base.get("never_started"):
        return "jobs left pending at the end of the window (overload)"
    return "no single cause visible in these figures"


def worst_gang(
    ours: Mapping[str, float] | None, base: Mapping[str, float] | None
) -> tuple[str, float, float] | None:
    """The multi-node job that waited longest beyond its wait under backfill: (id, ours, base)."""
    if not ours or not base:
        return None
    common = [j for j in ours if j in base]
    if not common:
        return None
    job = max(common, key=lambda j: (ours[j] - base[j], j))
    return job, ours[job], base[job]


def _one_gang_carries(
    ours: Mapping[str, Any], base: Mapping[str, Any], gang: tuple[str, float, float] | None
) -> str:
    """Whether one gang's extra wait makes most of the difference in the mean gang wait."""
    n = base.get("multinode_jobs") or 0
    mean_o, mean_b = ours.get("avg_wait_multinode_s"), base.get("avg_wait_multinode_s")
    if gang is None or not n or mean_o is None or mean_b is None or mean_o <= mean_b:
        return ""
    job, wait_o, wait_b = gang
    if wait_o - wait_b < 0.5 * n * (mean_o - mean_b):
        return ""
    return (
        f"one gang makes most of the difference: job {job} waited {_fmt(wait_o)} s against "
        f"{_fmt(wait_b)} s under backfill ({n} multi-node jobs)"
    )


def idle_split(ours: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """While jobs wait: idle GPUs under each policy, stranded ones and whole free nodes' ones."""
    idle_o, idle_b = (m.get("avg_idle_gpus_when_queued") for m in (ours, base))
    st_o, st_b = (m.get("avg_stranded_gpus_when_queued") for m in (ours, base))
    if None in (idle_o, idle_b, st_o, st_b):
        return ""
    return (
        f"; while jobs wait slurmopt leaves {_fmt(idle_o)} GPUs idle against {_fmt(idle_b)}: "
        f"{_fmt(st_o)} vs {_fmt(st_b)} stranded on partly used nodes, "
        f"{_fmt(idle_o - st_o)} vs {_fmt(idle_b - st_b)} on whole free nodes (kept for a "
        f"reservation, or too few for the jobs that wait)"
    )


def by_case(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, float, bool, str], Any]:
    """Each run's metrics by (trace, load, penalty, policy)."""
    return {(r["label"], r["load"], r["penalty"], r["policy"]): r["metrics"] for r in rows}


def compare(rows: Sequence[Mapping[str, Any]], penalty: bool = True) -> list[dict[str, Any]]:
    """Per (trace, load): slurmopt / slurm-backfill-tree for every metric, and what fell short."""
    index = by_case(rows)
    waits = {(r["label"], r["load"], r["penalty"], r["policy"]): r.get("gang_waits") for r in rows}
    out = []
    keys = sorted({(r["label"], r["load"]) for r in rows if r["penalty"] == penalty})
    order = {label: i for i, label in enumerate(dict.fromkeys(r["label"] for r in rows))}
    for label, load in sorted(keys, key=lambda k: (order[k[0]], k[1])):
        ours = index.get((label, load, penalty, "slurmopt"))
        base = index.get((label, load, penalty, "slurm-backfill-tree"))
        if not ours or not base:
            continue
        ratios = {m: ratio(ours.get(m), base.get(m)) for m in METRICS}
        gang = worst_gang(
            waits.get((label, load, penalty, "slurmopt")),
            waits.get((label, load, penalty, "slurm-backfill-tree")),
        )
        missed = {
            m: shortfall_reason(m, ours, base, gang)
            for m in TARGETS
            if meets(m, ratios[m]) is False
        }
        if not base.get("multinode_jobs"):
            missed["multi-node metrics"] = "n/a, no multi-node jobs in the window"
        out.append({"label": label, "load": load, "ratios": ratios, "missed": missed})
    return out


def across_windows(
    comparison: Sequence[Mapping[str, Any]], traces: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per trace and load, over its windows: each target metric's geometric-mean ratio and
    in how many windows the target was met."""
    family = {t["label"]: t.get("trace", t["label"]) for t in traces}
    groups: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    for c in comparison:
        groups.setdefault((family.get(c["label"], c["label"]), c["load"]), []).append(c)
    out = []
    for (trace, load), rows in groups.items():
        cells: dict[str, tuple[float | None, int, int]] = {}
        for m in (*TARGETS, *ACROSS_EXTRA):
            values = [r["ratios"][m] for r in rows if r["ratios"].get(m) is not None]
            cells[m] = (_geomean(values), sum(bool(meets(m, v)) for v in values), len(values))
        out.append({"trace": trace, "load": load, "windows": len(rows), "cells": cells})
    return out


def _across_table(summary: Sequence[Mapping[str, Any]]) -> list[str]:
    metrics = [*TARGETS, *ACROSS_EXTRA]
    lines = [
        "| trace | load | windows | " + " | ".join(f"`{m}`" for m in metrics) + " |",
        "|" + "---|" * (len(metrics) + 3),
    ]
    for row in summary:
        cells = []
        for m in metrics:
            mean, met, n = row["cells"].get(m, (None, 0, 0))
            if not n:
                cells.append("-")
            else:
                cells.append(f"{_fmt(mean)} ({met}/{n})" if m in TARGETS else _fmt(mean))
        lines.append(
            f"| {row['trace']} | {row['load']:g} | {row['windows']} | " + " | ".join(cells) + " |"
        )
    return lines


#: How a shortfall's cause reads in the summary: the opening words of shortfall_reason's text.
CAUSE_KINDS = (
    ("a tie", "a tie (within 0.5%)"),
    ("load too low", "load too low to queue"),
    ("below the packing floor", "target below the packing floor"),
    ("no multi-node jobs", "no multi-node jobs"),
    ("one gang makes", "one gang's wait"),
    ("gangs wait for one leaf", "gangs wait for one leaf"),
    ("gangs wait longer", "gangs wait longer but finish sooner"),
    ("while jobs wait slurmopt leaves", "more GPUs idle while jobs wait (split in the table)"),
    ("while jobs wait slurmopt strands", "stranding while jobs wait is low"),
    ("consistent with", "consistent with partly used nodes held for gang reservations"),
    ("backfill strands under one", "backfill strands under one GPU"),
    ("jobs left pending", "overload"),
    ("no job ever waited", "no job waited"),
)


def cause_kind(reason: str) -> str:
    """A short name for a shortfall's cause, for the summary."""
    for opening, kind in CAUSE_KINDS:
        if reason.startswith(opening):
            return kind
    if "stranded GPU-time" in reason and "nobody waiting" in reason:
        return "most stranding with nobody waiting"
    return "no single cause visible"


def _summary(comparison: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each target: in how many (window, load) cells slurmopt meets it, and why it misses."""
    lines = [
        "## Summary",
        "",
        "Each target over every (window, load) cell with the penalty on; the causes of the "
        "misses are those named in the tables below.",
        "",
        "| target | met | missed, by cause (cells) |",
        "|---|---|---|",
    ]
    for metric, (op, bound) in TARGETS.items():
        cells = [c for c in comparison if c["ratios"].get(metric) is not None]
        met = sum(bool(meets(metric, c["ratios"][metric])) for c in cells)
        kinds: dict[str, int] = {}
        for c in cells:
            reason = c["missed"].get(metric)
            if reason is not None:
                kind = cause_kind(reason)
                kinds[kind] = kinds.get(kind, 0) + 1
        causes = "; ".join(f"{k} ({n})" for k, n in sorted(kinds.items(), key=lambda x: -x[1]))
        lines.append(f"| `{metric}` {op} {bound:g} | {met} of {len(cells)} | {causes or '-'} |")
    return lines


def _fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _metric_table(rows: Sequence[Mapping[str, Any]], label: str, penalty: bool) -> list[str]:
    head = "| load | policy | " + " | ".join(f"`{m}`" for m in METRICS) + " |"
    lines = [head, "|" + "---|" * (len(METRICS) + 2)]
    for r in rows:
        if r["label"] != label or r["penalty"] != penalty:
            continue
        cells = " | ".join(_fmt(r["metrics"].get(m)) for m in METRICS)
        lines.append(f"| {r['load']:g} | `{r['policy']}` | {cells} |")
    return lines


def _ratio_table(comparison: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| trace | load | "
        + " | ".join(f"`{m}`" for m in METRICS)
        + " | where slurmopt is not better |",
        "|" + "---|" * (len(METRICS) + 3),
    ]
    for c in comparison:
        cells = []
        for m in METRICS:
            text = _fmt(c["ratios"][m])
            cells.append(f"**{text}**" if meets(m, c["ratios"][m]) is False else text)
        missed = "; ".join(f"`{m}`: {why}" for m, why in c["missed"].items()) or "none"
        lines.append(f"| {c['label']} | {c['load']:g} | " + " | ".join(cells) + f" | {missed} |")
    return lines


def _bound_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """JCT with the penalty on and off: the share of the penalty each policy pays."""
    index = by_case(rows)
    lines = [
        "| trace | load | policy | avg JCT, penalty on (s) | off (s) | penalty cost | "
        "avg stretch, multi-node |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, load, penalty, policy in index:
        if penalty or (label, load, True, policy) not in index:
            continue
        on, off = index[(label, load, True, policy)], index[(label, load, False, policy)]
        cost = ratio(on.get("avg_jct_s"), off.get("avg_jct_s"))
        cost_text = "-" if cost is None else f"{100 * (cost - 1):+.1f}%"
        lines.append(
            f"| {label} | {load:g} | `{policy}` | {_fmt(on.get('avg_jct_s'))} | "
            f"{_fmt(off.get('avg_jct_s'))} | {cost_text} | "
            f"{_fmt(on.get('avg_stretch_multinode'))} |"
        )
    return lines


def lever_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per trace, load and slurmopt variant (default first): ratios to slurm-backfill-tree."""
    index = {(r["label"], r["load"], r["policy"]): r["metrics"] for r in rows if r["penalty"]}
    names = ["slurmopt", *(name for name, _ in LEVERS)]
    out = []
    for label, load, policy in index:
        if policy != "slurm-backfill-tree":
            continue
        base = index[(label, load, policy)]
        for name in names:
            ours = index.get((label, load, name))
            if ours:
                ratios = {m: ratio(ours.get(m), base.get(m)) for m in LEVER_METRICS}
                out.append({"label": label, "load": load, "policy": name, "ratios": ratios})
    return out


def _table(keys: Sequence[str], metrics: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table: the ``keys`` columns, then one column per metric name in backticks."""
    lines = [
        "| " + " | ".join([*keys, *(f"`{m}`" for m in metrics)]) + " |",
        "|" + "---|" * (len(keys) + len(metrics)),
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there is none)."""
    positive = [v for v in values if v is not None and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in positive)) if positive else None


def _lever_table(
    levers: Sequence[Mapping[str, Any]], traces: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Per trace, load and variant: each ratio's geometric mean over the trace's windows."""
    family = {t["label"]: t.get("trace", t["label"]) for t in traces}
    groups: dict[tuple[str, float, str], list[Mapping[str, Any]]] = {}
    for r in levers:
        key = (family.get(r["label"], r["label"]), r["load"], r["policy"])
        groups.setdefault(key, []).append(r)
    rows = [
        [
            trace,
            f"{load:g}",
            str(len(group)),
            f"`{policy}`",
            *(_fmt(_geomean(r["ratios"][m] for r in group)) for m in LEVER_METRICS),
        ]
        for (trace, load, policy), group in groups.items()
    ]
    return _table(("trace", "load", "windows", "policy"), LEVER_METRICS, rows)


def lever_summary(levers: Sequence[Mapping[str, Any]]) -> list[str]:
    """How often each lever beats the default slurmopt, over the cells where both ran.

    Lower is better for every metric but allocation while jobs queue.
    """
    default = {(r["label"], r["load"]): r["ratios"] for r in levers if r["policy"] == "slurmopt"}
    lines = []
    for name, what in LEVERS:
        better: list[str] = []
        worse: list[str] = []
        for r in levers:
            base = default.get((r["label"], r["load"]))
            if r["policy"] != name or base is None:
                continue
            for m in LEVER_METRICS:
                a, b = r["ratios"][m], base[m]
                if a is None or b is None or abs(a - b) <= 0.02 * abs(b):
                    continue
                higher_is_better = m == "gpu_allocation_ratio_when_queued"
                (better if (a > b) == higher_is_better else worse).append(m)
        lines.append(
            f"- `{name}` ({what}): better than the default in {len(better)} and worse in "
            f"{len(worse)} (trace, load, metric) cells by more than 2%."
        )
    return lines


def _floor_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Stranded GPUs beside the packing floor, and when they are stranded, penalty on."""
    index = by_case(rows)
    lines = [
        "| trace | load | backfill: stranded | its floor | slurmopt: stranded | its floor | "
        "target (half of backfill's) | target above slurmopt's floor | "
        "stranded GPU-time with nobody waiting: backfill / slurmopt | "
        "while jobs wait, stranded GPUs a waiting job could use: backfill / slurmopt |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cases = [(label, load) for label, load, on, policy in index if on and policy == "slurmopt"]
    for label, load in cases:
        base = index.get((label, load, True, "slurm-backfill-tree"))
        ours = index[(label, load, True, "slurmopt")]
        if not base or base.get("avg_stranded_gpus") is None:
            continue
        target = TARGETS["avg_stranded_gpus"][1] * base["avg_stranded_gpus"]
        floor = ours.get("avg_stranded_gpus_floor")
        reachable = "-" if floor is None else ("yes" if target >= floor else "no")
        usable = "avg_stranded_gpus_usable_when_queued"
        lines.append(
            f"| {label} | {load:g} | {_fmt(base['avg_stranded_gpus'])} | "
            f"{_fmt(base.get('avg_stranded_gpus_floor'))} | {_fmt(ours.get('avg_stranded_gpus'))} "
            f"| {_fmt(floor)} | {_fmt(target)} | {reachable} | "
            f"{_fmt_share(base.get('stranded_share_queue_empty'))} / "
            f"{_fmt_share(ours.get('stranded_share_queue_empty'))} | "
            f"{_fmt(base.get(usable))} / {_fmt(ours.get(usable))} |"
        )
    return lines


def _synthetic_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[str]:
    """One synthetic study's runs: a row per load and policy, raw figures."""
    cells = [
        [f"{r['load']:g}", f"`{r['policy']}`", *(_fmt(r["metrics"].get(m)) for m in metrics)]
        for r in rows
    ]
    return _table(("load", "policy"), metrics, cells)


def render(doc: Mapping[str, Any]) -> str:
    """The Markdown of ``docs/benchmarks.md`` from the run's results."""
    out = [
        "# Benchmarks: slurmopt against Slurm's schedulers",
        "",
        "<!-- Generated by benchmarks/policies.py; do not edit by hand: rerun it. -->",
        "",
        f"Generated {doc['date']} on {doc['machine']} by:",
        "",
        "```",
        doc["command"],
        "```",
        "",
        f"Whole run: {doc['wall_s']:.0f} s wall. Simulator and metrics: `docs/simulator.md`.",
        "",
        *_summary(doc["comparison"]),
        "",
        "## Setup",
        "",
        "- Policies: `slurm-fifo` (Slurm `sched/builtin`), `slurm-backfill-tree` (Slurm "
        "`sched/backfill` + `topology/tree`, default `bf_*` settings) and `slurmopt` (the "
        "daemon's `plan()`). Ratios below are slurmopt / slurm-backfill-tree.",
        "- Loads 0.8, 1.0, 1.2: offered load as `--load` defines it (arrival times scaled, "
        "durations kept). At 1.2 the queue grows for the whole window by construction.",
        "- Communication penalty on (the simulator's default model); the contenders are run "
        "again with it off, the topology bound.",
        "- Gangs: a job of more than 8 GPUs becomes whole 8-GPU nodes (no trace records nodes).",
        f"- Cluster size rule: leaves of {NODES_PER_LEAF} nodes of {GPUS_PER_NODE} GPUs; enough "
        "nodes for the window's native average GPU demand (so load 1.0 is near the trace's own "
        f"arrival rate) and for {LARGEST_JOB_COPIES} copies of its largest job, at least 2 leaves "
        "when the window has multi-node jobs, rounded up to whole leaves.",
        "",
        "| trace | file | window | jobs | multi-node jobs | native demand (GPUs) | fabric | GPUs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in doc["traces"]:
        window = t["window"]
        out.append(
            f"| {t['label']} | `{t['file']}` | {window} | {t['jobs']:,} | {t['multinode']} | "
            f"{t['demand']:,.0f} | `{t['fabric']}` | {t['gpus']:,} |"
        )
    errors = sorted({f"{r['label']} at load {r['load']:g}: {r['error']}" for r in doc["rows"]
                     if "error" in r})  # fmt: skip
    if errors:
        out += ["", "Not run (the window cannot offer that load on its cluster):", ""]
        out += [f"- {e}" for e in errors]
    out += [
        "",
        "What each load means for each window: the arrival scale `--load` chose (the offered "
        "load is the window's whole work, GPUs x duration, over capacity x the arrival window), "
        "the arrival window it gives, and the share of the work that would still run after the "
        "last arrival if every job started on arrival: that part is a drain at any load.",
        "",
        "| trace | load | arrival scale | arrival window (h) | work after the last arrival |",
        "|---|---|---|---|---|",
    ]
    for w in doc.get("windows", []):
        out.append(
            f"| {w['label']} | {w['load']:g} | {_fmt(w['arrival_scale'])} | "
            f"{_fmt(w['window_h'])} | {w['after_last_arrival']:.0%} |"
        )
    out += [
        "",
        "## slurmopt / slurm-backfill-tree (penalty on)",
        "",
        "Targets: `avg_jct_s`, `p95_queue_delay_s` and `avg_slowdown` ratio <= 1.02; "
        "`avg_stranded_gpus` <= 0.5; `avg_wait_multinode_s` below 1; "
        "`gpu_allocation_ratio_when_queued` (allocation while jobs queue) above 1; "
        "`avg_leaves_spanned_multinode` at most 1. A missed target is in bold and named in the "
        "last column with the cause the figures show. `gpu_allocation_ratio` over the whole run "
        "is shown without a target: with the same jobs it differs only through the makespan.",
        "",
        *_ratio_table(doc["comparison"]),
        "",
        "### Over each trace's windows",
        "",
        "The geometric mean of each ratio over a trace's windows, and in how many windows the "
        "target was met (a ratio of 0, when slurmopt's figure is 0, counts as met and is left "
        "out of the mean):",
        "",
        *_across_table(across_windows(doc["comparison"], doc["traces"])),
        "",
        "### Stranded GPUs: the packing floor, and when they are stranded",
        "",
        "The floor (`avg_stranded_gpus_floor`, docs/simulator.md) is what a perfect repacking "
        "of the jobs running at each instant would strand: jobs smaller than a node need whole "
        "nodes between them, so `-S mod 8` GPUs stay free beside `S` GPUs of such jobs. No "
        "placement gets below it without changing which jobs run (elastic jobs growing into the "
        "gaps, migration). Where the target is under slurmopt's floor, only that could meet it.",
        "",
        "The last two columns say when the GPUs are stranded. With nobody waiting "
        "(`stranded_share_queue_empty`) a stranded GPU is spare capacity no job is kept from; "
        "placement fills such gaps with the jobs that arrive, and the rest only moving a running "
        "job could pack. "
        "While jobs wait, `avg_stranded_gpus_usable_when_queued` counts the stranded GPUs on "
        "nodes with room for the smallest per-node ask of a waiting job: capacity a waiting job "
        "could use by size but does not get (a reservation holds the node, or the job needs "
        "more nodes); the other stranded GPUs are too few on their node for any job that waits.",
        "",
        *_floor_table(doc["rows"]),
        "",
        "## The same with the penalty off (the topology bound)",
        "",
        *_ratio_table(doc["comparison_off"]),
        "",
        "What the penalty costs each policy (avg JCT on / off - 1; 0% means placement cost "
        "nothing, the bound reached):",
        "",
        *_bound_table(doc["rows"]),
        "",
        "## Levers, one at a time (penalty on)",
        "",
        "Variants of `slurmopt` (`--policy 'slurmopt:KEY=VALUE'`, docs/simulator.md), each "
        "against slurm-backfill-tree in the same run, on every window; the table gives each "
        "ratio's geometric mean over a trace's windows, the default `slurmopt` row first. The "
        "counts below are over single (window, load, metric) cells.",
        "",
        *lever_summary(doc["levers"]),
        "",
        *_lever_table(doc["levers"], doc["traces"]),
        "",
        "## Preemption (synthetic workload)",
        "",
        "No public trace marks jobs preemptible, so this lever runs on a seeded synthetic "
        f"workload (`--trace-format synthetic --trace '{PREEMPT_TRACE}'`: the generator's "
        "default job-size mix and lognormal run times, half the jobs preemptible) on "
        f"`{PREEMPT_FABRIC}`, penalty on. `slurmopt` preempts as the daemon does (signal, "
        "checkpoint acknowledged after 60 s, requeue, 120 s restart, only when it pays); "
        "`slurmopt:preempt=off` is the same planner without it.",
        "",
        *_synthetic_table(doc.get("preempt_rows", []), PREEMPT_METRICS),
        "",
        "## Elastic jobs (synthetic workload)",
        "",
        "No public trace marks jobs elastic either: the same generator with half the multi-node "
        f"jobs elastic (`--trace '{ELASTIC_TRACE}'`: each runs on half its nodes up to all, its "
        f"time limit the budget at half), on `{PREEMPT_FABRIC}`, penalty on. `slurmopt` starts an "
        "elastic job that cannot get all its nodes on fewer when that finishes sooner "
        "(docs/planner.md); the simulator runs it `nodes asked / nodes given` times longer. "
        "`slurmopt:elastic=off` is the same planner starting every job whole, as the baseline "
        "does.",
        "",
        *_synthetic_table(doc.get("elastic_rows", []), ELASTIC_METRICS),
        "",
        "## All figures",
        "",
    ]
    for t in doc["traces"]:
        for penalty in (True, False):
            out += [f"### {t['label']}, penalty {'on' if penalty else 'off'}", ""]
            out += _metric_table(doc["rows"], t["label"], penalty) + [""]
    plot = doc.get("plot")
    if plot:
        out += [
            "## Over time",
            "",
            f"{plot['what']}: GPU allocation and pending jobs over time.",
            "",
            f"![allocation and queue over time]({plot['file']})",
            "",
        ]
    fill = doc.get("fill")
    if fill:
        out += [
            "## openb in arrival-fill mode",
            "",
            f"`--mode fill` on openb's default pod list and node list ({fill['gpus']:,} GPUs), "
            f"seed(s) {', '.join(map(str, fill['seeds']))}, tasks drawn until 130% of the GPUs "
            "is asked for; GPU allocation at 130%. Published figures: mean of 10 seeds from "
            "`fgd-results`.",
            "",
            "| policy | GPU allocation at 130% | GPU tasks turned away | wall (s) |",
            "|---|---|---|---|",
        ]
        for name, value in fill["published"].items():
            out.append(f"| published {name} | {value:.2f}% | - | - |")
        for r in fill["runs"]:
            out.append(
                f"| `{r['policy']}` (seed {r['seed']}) | {r['allocation_pct']:.2f}% | "
                f"{r['rejected_gpu_pods']:,} | {r['wall_s']:.0f} |"
            )
        out += ["", fill["verdict"], ""]
        if fill.get("plot"):
            out += [f"![allocation against GPUs asked for]({fill['plot']})", ""]
    return "\n".join(out).rstrip() + "\n"


def _fill_verdict(runs: Sequence[Mapping[str, Any]], published: Mapping[str, float]) -> str:
    by = {r["policy"]: r["allocation_pct"] for r in runs}
    ours, best = by.get("slurmopt"), by.get("best-fit")
    if ours is None or best is None:
        return ""
    text = f"slurmopt minus best-fit: {ours - best:+.2f} points"
    if "FGD" in published:
        text += f"; slurmopt minus published FGD: {ours - published['FGD']:+.2f} points"
    if ours <= best:
        text += (
            ". slurmopt is NOT better here: fill mode's share approximation (the planner sees "
            "whole GPUs only, a device with a share on it counts as taken, and shares are packed "
            "without regard to FGD) fragments more than best fit on a trace where a large part "
            "of the GPU pods ask for a fraction of a GPU."
        )
    else:
        text += "."
    return text


def _command() -> str:
    niceness = os.nice(0)
    prefix = f"nice -n {niceness} " if niceness > 0 else ""
    return (prefix + "python benchmarks/policies.py " + shlex.join(sys.argv[1:])).rstrip()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="traces directory")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where benchmarks.md goes")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument(
        "--limit-scale", type=float, default=1.0, help="multiply every window by this"
    )
    parser.add_argument("--no-fill", action="store_true", help="skip the openb fill runs")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only write benchmarks.md again from a run's policies.json",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        doc = json.loads(args.render.read_text())
        # Ratios and their causes are derived from the runs: derive them again, so the page
        # says what the current rules make of the same figures.
        doc["comparison"] = compare(doc["rows"], penalty=True)
        doc["comparison_off"] = compare(doc["rows"], penalty=False)
        _write_doc(args.out, doc)
        return
    root = args.traces.resolve()
    needed = [t.relpath for t in TRACES]
    if not args.no_fill:
        needed += [OPENB_PODS, OPENB_NODES, FGD_RESULTS]
    check_traces(root, needed)
    started = time.perf_counter()
    traces, cases = [], []
    for spec in TRACES:
        limit = None if spec.limit_jobs is None else max(1, int(spec.limit_jobs * args.limit_scale))
        path = str(root / spec.relpath)
        window = load_window(path, spec.fmt, limit, spec.skip_jobs)
        nodes, demand = size_cluster(window)
        fabric = fabric_spec(nodes)
        multinode = sum(j.nodes > 1 for j in window.jobs)
        traces.append(
            {
                "label": spec.label,
                "file": spec.relpath,
                "limit_jobs": limit,
                "skip_jobs": spec.skip_jobs,
                "window": spec.window_text(limit),
                "trace": spec.trace,
                "jobs": len(window.jobs),
                "multinode": multinode,
                "demand": demand,
                "fabric": fabric,
                "gpus": nodes * GPUS_PER_NODE,
            }
        )
        for load in LOADS:
            for penalty in (True, False):
                if not penalty and not multinode:
                    continue  # nothing to stretch: the bound equals the run with the penalty
                names: Sequence[str] = BOUND_POLICIES
                if penalty:
                    names = [*POLICIES, *(name for name, _ in LEVERS)]
                for policy in names:
                    cases.append(
                        Case(
                            spec.label,
                            path,
                            spec.fmt,
                            limit,
                            fabric,
                            load,
                            penalty,
                            policy,
                            spec.skip_jobs,
                        )
                    )
    preempt_cases, elastic_cases = (
        [
            Case("synthetic", spec, "synthetic", None, PREEMPT_FABRIC, load, True, policy)
            for load in LOADS
            for policy in policies
        ]
        for spec, policies in ((PREEMPT_TRACE, PREEMPT_POLICIES), (ELASTIC_TRACE, ELASTIC_POLICIES))
    )
    plotted = [
        c
        for c in cases
        if c.label == TRACES[0].label and c.load == 1.0 and c.penalty and c.policy in POLICIES
    ]
    fills = [
        FillCase(str(root / OPENB_PODS), str(root / OPENB_NODES), p, s)
        for p in FILL_POLICIES
        for s in FILL_SEEDS
    ] if not args.no_fill else []  # fmt: skip
    rows: list[dict[str, Any]] = []
    fill_runs: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        fill_futures = [pool.submit(run_fill, f) for f in fills]  # longest first
        preempt_futures = [pool.submit(run_case, c) for c in preempt_cases]
        elastic_futures = [pool.submit(run_case, c) for c in elastic_cases]
        futures = [
            pool.submit(_run_case_with_series if c in plotted else run_case, c) for c in cases
        ]
        for case, future in zip(cases, futures, strict=True):
            row = future.result()
            rows.append(row)
            m = row["metrics"]
            if "error" in row:
                print(f"{case.label:>14} load {case.load:<3g} {case.policy}: {row['error']}")
                continue
            print(
                f"{case.label:>14} load {case.load:<3g} penalty {'on ' if case.penalty else 'off'} "
                f"{case.policy:<20} avg JCT {m['avg_jct_s']} s, p95 wait "
                f"{m['p95_queue_delay_s']} s, {m['wall_s']:.1f} s",
                flush=True,
            )
        fill_runs = [f.result() for f in fill_futures]
        preempt_rows = [f.result() for f in preempt_futures]
        elastic_rows = [f.result() for f in elastic_futures]
    args.out.mkdir(parents=True, exist_ok=True)
    plots = args.out / "benchmarks"
    plots.mkdir(exist_ok=True)
    from slurmopt.sim.plots import plot_fill, plot_over_time

    series = {r["policy"]: r.pop("series") for r in rows if "series" in r}
    plot_doc = None
    if series:
        trace = traces[0]
        title = f"{trace['label']}: {trace['jobs']:,} jobs, {trace['gpus']} GPUs, load 1.0"
        plot_over_time(series, plots / "over-time.png", title)
        plot_doc = {
            "file": "benchmarks/over-time.png",
            "what": f"{trace['label']} at load 1.0, penalty on, every policy",
        }
    fill_doc = None
    if fill_runs:
        from slurmopt.sim.fill import published_allocation

        fgd = root / FGD_RESULTS
        published = {
            name: published_allocation(fgd, OPENB_WORKLOAD, name, 130)
            for name in ("BestFit", "FGD")
        }
        curves = {f"{r['policy']} (seed {r['seed']})": r["curve"] for r in fill_runs}
        plot_fill(
            curves,
            plots / "openb-fill.png",
            f"openb on {fill_runs[0]['gpus']:,} GPUs",
            published_curves(fgd, OPENB_WORKLOAD, ("BestFit", "FGD")),
        )
        for r in fill_runs:
            r.pop("curve")
        fill_doc = {
            "gpus": fill_runs[0]["gpus"],
            "seeds": list(FILL_SEEDS),
            "runs": fill_runs,
            "published": published,
            "verdict": _fill_verdict(fill_runs, published),
            "plot": "benchmarks/openb-fill.png",
        }
    windows = []
    for t in traces:
        spec = next(s for s in TRACES if s.label == t["label"])
        window = load_window(str(root / spec.relpath), spec.fmt, t["limit_jobs"], spec.skip_jobs)
        for load in LOADS:
            scales = [
                r["arrival_scale"]
                for r in rows
                if r["label"] == t["label"] and r["load"] == load and "error" not in r
            ]
            if not scales:
                continue
            scale = scales[0]
            span_h = (window.jobs[-1].submit_s - window.jobs[0].submit_s) * scale / 3600
            windows.append(
                {
                    "label": t["label"],
                    "load": load,
                    "arrival_scale": scale,
                    "window_h": span_h,
                    "after_last_arrival": after_last_arrival(window, scale),
                }
            )
    doc: dict[str, Any] = {
        "windows": windows,
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.node() or 'unknown host'}, nproc {os.cpu_count()}, "
        f"Python {platform.python_version()}",
        "command": _command(),
        "wall_s": time.perf_counter() - started,
        "traces": traces,
        "rows": rows,
        "comparison": compare(rows, penalty=True),
        "comparison_off": compare(rows, penalty=False),
        "levers": lever_rows(rows),
        "preempt_rows": preempt_rows,
        "elastic_rows": elastic_rows,
        "plot": plot_doc,
        "fill": fill_doc,
    }
    results = plots / "policies.json"
    results.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"wrote {results}")
    _write_doc(args.out, doc)


def _write_doc(out: Path, doc: Mapping[str, Any]) -> None:
    target = out / "benchmarks.md"
    target.write_text(render(doc))
    print(f"wrote {target} ({doc['wall_s']:.0f} s)")
    for c in doc["comparison"]:
        print(c["label"], c["load"], {m: _fmt(v) for m, v in c["ratios"].items()})


if __name__ == "__main__":
    main()
