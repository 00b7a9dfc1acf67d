"""Seeded synthetic clusters for the benchmarks: one job mix, one way to fill nodes.

Running jobs are placed the way a busy scheduler's choices look (random
probing for single-node jobs, a scan for whole free nodes for gangs); a job
that finds no room stays pending.  About 1% of nodes are drained.
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition

#: The repository root: where ``python -m benchmarks.X`` finds the package.
ROOT = Path(__file__).resolve().parents[1]
GPUS_PER_NODE = 8
NODES_PER_LEAF = 16
LEAVES_PER_POD = 16
NOW = 1_700_000_000.0

# (weight, nodes, gpus per node): mostly single-node 1-8 GPU jobs, some whole-node gangs.
JOB_MIX = [
    (0.22, 1, 1),
    (0.17, 1, 2),
    (0.21, 1, 4),
    (0.25, 1, 8),
    (0.08, 2, 8),
    (0.04, 4, 8),
    (0.02, 8, 8),
    (0.01, 16, 8),
]
LIMITS_S = [1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600]


def child_json(module: str, *args: str) -> dict[str, Any]:
    """Run ``python -m benchmarks.MODULE ARGS`` from the repository root; its JSON on stdout.

    Each measurement runs in a fresh process, so one's memory and caches never
    flatter the next.
    """
    argv = [sys.executable, "-m", f"benchmarks.{module}", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _place(
    rng: random.Random, node_names: list[str], free: dict[str, int], nodes: int, per_node: int
) -> list[str]:
    if nodes == 1:
        for _ in range(32):
            name = rng.choice(node_names)
            if free[name] >= per_node:
                return [name]
        return []
    placed: list[str] = []
    start = rng.randrange(len(node_names))
    for i in range(len(node_names)):
        name = node_names[(start + i) % len(node_names)]
        if free[name] == GPUS_PER_NODE:
            placed.append(name)
            if len(placed) == nodes:
                return placed
    return []


def synthetic_snapshot(
    node_names: list[str], num_running: int, num_pending: int = 0, seed: int = 0
) -> ClusterSnapshot:
    """``num_running`` jobs tried on the nodes (those without room stay pending), then
    ``num_pending`` more pending jobs, all with finite time limits, in partition ``gpu``."""
    rng = random.Random(seed)
    free = dict.fromkeys(node_names, GPUS_PER_NODE)
    drained = set(rng.sample(node_names, max(1, len(node_names) // 100)))
    for name in drained:
        free[name] = 0
    weights = [w for w, _, _ in JOB_MIX]
    shapes = [(n, d) for _, n, d in JOB_MIX]
    jobs = []
    for job_id in range(1, num_running + num_pending + 1):
        nodes, per_node = rng.choices(shapes, weights)[0]
        limit = rng.choice(LIMITS_S)
        placed = _place(rng, node_names, free, nodes, per_node) if job_id <= num_running else []
        for name in placed:
            free[name] -= per_node
        common = dict(
            job_id=job_id,
            partition="gpu",
            node_count=nodes,
            gpus_per_node=per_node,
            time_limit_s=limit,
            priority=rng.randint(1, 100_000),
            submit_time=NOW - rng.uniform(0, 86400),
        )
        if placed:
            jobs.append(
                Job(
                    state=JobState.RUNNING,
                    nodes=tuple(placed),
                    start_time=NOW - rng.uniform(0, limit),
                    **common,  # type: ignore[arg-type]
                )
            )
        else:
            jobs.append(Job(state=JobState.PENDING, reason="Priority", **common))  # type: ignore[arg-type]
    nodes_out = []
    for name in node_names:
        alloc = 0 if name in drained else GPUS_PER_NODE - free[name]
        if alloc == 0:
            state = NodeState.IDLE
        elif alloc == GPUS_PER_NODE:
            state = NodeState.ALLOCATED
        else:
            state = NodeState.MIXED
        nodes_out.append(
            Node(
                name=name,
                state=state,
                flags=frozenset({"DRAIN"}) if name in drained else frozenset(),
                partitions=("gpu",),
                gpus_total=GPUS_PER_NODE,
                gpus_alloc=alloc,
                cpus=128,
                alloc_cpus=alloc * 16,
            )
        )
    return ClusterSnapshot.build(
        NOW, nodes_out, jobs, [Partition("gpu", tuple(node_names), default=True)]
    )


def next_cycle(
    snapshot: ClusterSnapshot,
    starts: Iterable[tuple[int, Sequence[str]]],
    rng: random.Random,
    *,
    step_s: float = 30.0,
    ends: int = 4,
    arrivals: int = 5,
) -> ClusterSnapshot:
    """The cluster one planning cycle later: ``starts`` made, then ``ends`` running jobs gone
    and ``arrivals`` new pending jobs of the same mix, ``step_s`` seconds on.

    What a planning loop sees between two passes, so a benchmark can time the second.
    """
    now = snapshot.taken_at + step_s
    started = snapshot.with_started(starts, snapshot.taken_at)
    nodes = dict(started.nodes)
    jobs = dict(started.jobs)
    running = sorted(j.job_id for j in jobs.values() if j.is_active)
    for job_id in rng.sample(running, min(ends, len(running))):
        job = jobs.pop(job_id)
        for name in job.nodes:
            node = nodes[name]
            alloc = max(0, node.gpus_alloc - job.gpus_per_node)
            state = NodeState.IDLE if alloc == 0 else NodeState.MIXED
            nodes[name] = replace(node, gpus_alloc=alloc, alloc_cpus=alloc * 16, state=state)
    weights = [w for w, _, _ in JOB_MIX]
    shapes = [(n, d) for _, n, d in JOB_MIX]
    next_id = max(jobs, default=0) + 1
    for job_id in range(next_id, next_id + arrivals):
        count, per_node = rng.choices(shapes, weights)[0]
        jobs[job_id] = Job(
            job_id=job_id,
            state=JobState.PENDING,
            reason="Priority",
            partition="gpu",
            node_count=count,
            gpus_per_node=per_node,
            time_limit_s=rng.choice(LIMITS_S),
            priority=rng.randint(1, 100_000),
            submit_time=now,
        )
    return replace(started, taken_at=now, nodes=nodes, jobs=jobs)
