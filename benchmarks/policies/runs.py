"""Running one case: a trace window on a sized cluster under one policy (or one fill)."""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.policies.settings import (
    BOUND_POLICIES,
    GPUS_PER_NODE,
    LARGEST_JOB_COPIES,
    NODES_PER_LEAF,
)


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


def case_inputs(case: Case) -> tuple[Any, Any, int]:
    """A case's trace window, its fabric, and the fabric's GPUs (what its load is scaled to)."""
    from slurmopt.sim.fabrics import parse_fabric_spec

    trace = load_window(case.path, case.fmt, case.limit_jobs, case.skip_jobs)
    fabric = parse_fabric_spec(case.fabric)
    return trace, fabric, len(fabric.compute_nodes) * GPUS_PER_NODE


def run_case(case: Case, series: bool = False) -> dict[str, Any]:
    """Replay one case; the policy's metrics plus what the load scaling did."""
    from slurmopt.errors import SlurmoptError
    from slurmopt.sim import CommModel, scale_load, simulate

    out: dict[str, Any] = {
        "label": case.label,
        "load": case.load,
        "penalty": case.penalty,
        "policy": case.policy,
        "metrics": {},
    }
    trace, fabric, total = case_inputs(case)
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
