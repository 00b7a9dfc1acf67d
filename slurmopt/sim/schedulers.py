"""The schedulers a simulation can run: slurmopt's planner and two Slurm baselines.

* ``slurmopt``: :func:`slurmopt.policy.plan.plan` with its default
  :class:`~slurmopt.policy.plan.Policy`, called on a snapshot of the
  simulated cluster at every scheduling event, exactly as the daemon calls
  it on Slurm's.
* ``slurm-fifo``: Slurm's ``sched/builtin``: strict priority order, each
  job on the first nodes by index with enough free GPUs, and the first job
  that does not fit stops the pass (no backfill).
* ``slurm-backfill-tree``: Slurm's ``sched/backfill`` with
  ``topology/tree``.  At every event the main scheduler starts jobs in
  priority order until one does not fit; every ``bf_interval`` seconds (when
  something changed) the backfill pass walks up to ``bf_max_job_test``
  jobs: each starts now if it fits without touching the nodes held for
  the jobs before it, else it holds SPECIFIC nodes from the earliest time
  they free up, if that is within ``bf_window``.  Nodes are chosen as
  ``topology/tree`` does: one leaf if possible (the leaf with the fewest
  usable nodes that suffice), else the lowest-level switch whose subtree
  holds the job (best fit), filled leaf by leaf (a leaf that holds the
  rest, the smallest such; else the fullest leaf).

The planner cannot express the two baselines (it has no strict-FIFO mode
and chooses nodes by fewest leaves and FGD, not by node index), so they are
thin placement functions over the planner's own
:class:`~slurmopt.policy.backfill.Timeline`, which keeps the same
free-GPUs-over-time bookkeeping and the same "holds for good" reservation
rule for both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from slurmopt.fabric import Fabric
from slurmopt.model import Job
from slurmopt.policy.backfill import INFINITY, Timeline
from slurmopt.policy.plan import PlannerCache, Policy, plan, priority_order
from slurmopt.sim.cluster import SimCluster

POLICIES = ("slurmopt", "slurm-fifo", "slurm-backfill-tree")

#: Slurm's defaults (slurm.conf SchedulerParameters): 500 jobs, 1 day, every 30 s.
BF_MAX_JOB_TEST = 500
BF_WINDOW_S = 86400
BF_INTERVAL_S = 30.0

StartList = list[tuple[int, tuple[str, ...]]]


class Scheduler(Protocol):
    """One scheduling policy driven by the simulator.

    ``schedule`` returns the jobs to start now and their nodes; it must not
    change the cluster (the engine applies the starts).  ``tick_s`` asks
    the engine for a periodic pass (``tick=True``) while something changed
    since the last one; None means event passes only.
    """

    name: str

    @property
    def tick_s(self) -> float | None: ...

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList: ...


@dataclass
class PlannerScheduler:
    """slurmopt's planner on a snapshot of the simulated cluster."""

    fabric: Fabric
    policy: Policy = field(default_factory=Policy)
    name: str = "slurmopt"
    tick_s: float | None = None
    #: Keeps what passes share (fabric layout, indexes, job sizes): same decisions, far cheaper.
    cache: PlannerCache = field(default_factory=PlannerCache)

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList:
        result = plan(cluster.snapshot(now), self.fabric, self.policy, now, cache=self.cache)
        return [(a.job_id, a.nodes) for a in result.actions]


class TreePlacement:
    """``topology/tree`` node choice over the fabric's leaves and the switches above them."""

    def __init__(self, fabric: Fabric, order: dict[str, int]) -> None:
        self.order = order
        self.group_of = {n: fabric.leaf_of(n) or n for n in order}
        self.upper: list[list[tuple[str, frozenset[str]]]] = []
        graph = fabric.graph
        for level, switches in fabric.levels().items():
            if level == 0:
                continue
            row = []
            for sw in switches:
                below: set[str] = set()
                stack = [sw]
                while stack:
                    u = stack.pop()
                    lu = graph.nodes[u].get("level", 0)
                    for v in graph.neighbors(u):
                        if v in fabric.switches and graph.nodes[v].get("level", 0) < lu:
                            if graph.nodes[v].get("level", 0) == 0:
                                below.add(v)
                            else:
                                stack.append(v)
                if below:
                    row.append((sw, frozenset(below)))
            if row:
                self.upper.append(row)

    def place(self, usable: Sequence[str], k: int) -> list[str] | None:
        """``k`` of the ``usable`` nodes (given in node order), or None if they are too few."""
        if len(usable) < k:
            return None
        by_leaf: dict[str, list[str]] = {}
        for name in usable:
            by_leaf.setdefault(self.group_of[name], []).append(name)
        fitting = [(len(v), leaf) for leaf, v in by_leaf.items() if len(v) >= k]
        if fitting:
            return by_leaf[min(fitting)[1]][:k]
        for row in self.upper:
            best: tuple[int, str, frozenset[str]] | None = None
            for sw, leaves in row:
                count = sum(len(by_leaf.get(leaf, ())) for leaf in leaves)
                if count >= k and (best is None or (count, sw) < best[:2]):
                    best = (count, sw, leaves)
            if best is not None:
                return self._fill({leaf: by_leaf[leaf] for leaf in best[2] if leaf in by_leaf}, k)
        return self._fill(by_leaf, k)

    @staticmethod
    def _fill(groups: dict[str, list[str]], k: int) -> list[str]:
        """Leaf by leaf: the smallest leaf that holds the rest, else the fullest leaf whole."""
        chosen: list[str] = []
        need = k
        remaining = dict(groups)
        while need > 0 and remaining:
            fit = [(len(v), leaf) for leaf, v in remaining.items() if len(v) >= need]
            if fit:
                chosen.extend(remaining[min(fit)[1]][:need])
                break
            leaf = min(remaining, key=lambda x: (-len(remaining[x]), x))
            taken = remaining.pop(leaf)
            chosen.extend(taken)
            need -= len(taken)
        return chosen


def _first_fit(cluster: SimCluster, free: dict[str, int], job: Job) -> list[str] | None:
    chosen = []
    for name in cluster.node_names:
        if free[name] >= job.gpus_per_node:
            chosen.append(name)
            if len(chosen) == job.node_count:
                return chosen
    return None


@dataclass
class SlurmFifo:
    """Slurm ``sched/builtin``: priority order, first fit by node index, stop at the first miss."""

    name: str = "slurm-fifo"
    tick_s: float | None = None

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList:
        free = dict(cluster.free)
        starts: StartList = []
        for job in priority_order(list(cluster.pending.values())):
            chosen = _first_fit(cluster, free, job)
            if chosen is None:
                break
            for name in chosen:
                free[name] -= job.gpus_per_node
            starts.append((job.job_id, tuple(chosen)))
        return starts


@dataclass
class SlurmBackfillTree:
    """Slurm ``sched/backfill`` with ``topology/tree``; see the module docstring."""

    fabric: Fabric
    bf_max_job_test: int = BF_MAX_JOB_TEST
    bf_window_s: float = BF_WINDOW_S
    bf_interval_s: float = BF_INTERVAL_S
    name: str = "slurm-backfill-tree"
    _tree: TreePlacement | None = None

    @property
    def tick_s(self) -> float | None:
        return self.bf_interval_s if self.bf_interval_s > 0 else None

    def _placement(self, cluster: SimCluster) -> TreePlacement:
        if self._tree is None:
            self._tree = TreePlacement(self.fabric, cluster.index)
        return self._tree

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList:
        if tick or self.bf_interval_s <= 0:
            return self._backfill(cluster, now)
        return self._main(cluster)

    def _main(self, cluster: SimCluster) -> StartList:
        """The event-driven main scheduler: priority order until the first job that waits."""
        tree = self._placement(cluster)
        free = dict(cluster.free)
        starts: StartList = []
        for job in priority_order(list(cluster.pending.values())):
            usable = [n for n in cluster.node_names if free[n] >= job.gpus_per_node]
            chosen = tree.place(usable, job.node_count)
            if chosen is None:
                break
            for name in chosen:
                free[name] -= job.gpus_per_node
            starts.append((job.job_id, tuple(chosen)))
        return starts

    def _backfill(self, cluster: SimCluster, now: float) -> StartList:
        tree = self._placement(cluster)
        timeline = Timeline(now)
        releases: dict[str, list[tuple[float, int]]] = {}
        for job in cluster.running.values():
            assert job.start_time is not None and job.time_limit_s is not None
            for name in job.nodes:
                releases.setdefault(name, []).append(
                    (job.start_time + job.time_limit_s, job.gpus_per_node)
                )
        for name in cluster.node_names:
            timeline.add_node(name, cluster.free[name], releases.get(name, ()))
        starts: StartList = []
        failed: set[tuple[int, int, float]] = set()
        pending = priority_order(list(cluster.pending.values()))
        for job in pending[: self.bf_max_job_test]:
            gpus, k = job.gpus_per_node, job.node_count
            limit = float(job.time_limit_s) if job.time_limit_s is not None else INFINITY
            end = now + limit
            key = (k, gpus, limit)
            if key not in failed:
                usable = [n for n in cluster.node_names if timeline.fits_now(n, gpus, end)]
                chosen = tree.place(usable, k)
                if chosen is not None:
                    for name in chosen:
                        timeline.occupy(name, gpus, end)
                    starts.append((job.job_id, tuple(chosen)))
                    continue
                failed.add(key)  # resources only shrink within a pass
            ready = sorted(
                (timeline.available_from(n, gpus), cluster.index[n], n) for n in cluster.node_names
            )
            if len(ready) < k or ready[k - 1][0] >= INFINITY:
                continue
            at = ready[k - 1][0]
            if at - now > self.bf_window_s:
                continue
            candidates = sorted((i, n) for t, i, n in ready if t <= at)
            held = tree.place([n for _, n in candidates], k)
            if held is None:
                continue
            for name in held:
                timeline.reserve(name, gpus, at, at + limit)
        return starts


def make_scheduler(
    name: str,
    fabric: Fabric,
    bf_max_job_test: int = BF_MAX_JOB_TEST,
    bf_window_s: float = BF_WINDOW_S,
    bf_interval_s: float = BF_INTERVAL_S,
) -> Scheduler:
    """The scheduler a ``--policy`` name stands for."""
    if name == "slurmopt":
        return PlannerScheduler(fabric)
    if name == "slurm-fifo":
        return SlurmFifo()
    if name == "slurm-backfill-tree":
        return SlurmBackfillTree(fabric, bf_max_job_test, bf_window_s, bf_interval_s)
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
