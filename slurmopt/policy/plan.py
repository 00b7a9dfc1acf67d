"""The planner: which managed jobs start now, on which nodes, and which wait for what.

Pure: ``plan(snapshot, fabric, policy, now)`` reads only its arguments and
returns a frozen :class:`Plan`; Slurm carries the plan out elsewhere.  One
pass walks the managed pending jobs in Slurm's priority order.  Each job
either starts now (a :class:`Start` with the rule that chose its nodes),
gets a backfill :class:`Reservation` at the earliest time its nodes free
up, or stays :class:`Unplaced` with the cause.  A lower-priority job
starts only where it delays no reservation.  ``docs/planner.md`` has the
rules and tie-breaks.  A :class:`PlannerCache` passed to consecutive passes
lets each pass redo only what changed since the last, with the same plan.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, ClassVar

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, Node, Partition
from slurmopt.policy.backfill import INFINITY, Timeline
from slurmopt.policy.fragmentation import JobShape, queue_shape
from slurmopt.policy.knobs import Policy
from slurmopt.policy.placement import Constraint, choose_leaves, fgd_increase, parse_constraint
from slurmopt.tag import elastic_range, is_preemptible_comment

PLAN_SCHEMA_VERSION = 1


class Reason(StrEnum):
    """Why a job starts where it does, or why it does not start."""

    # starts
    GANG_FEWEST_LEAVES = "GANG_FEWEST_LEAVES"
    BEST_FIT_NODE = "BEST_FIT_NODE"
    BACKFILL = "BACKFILL"
    ELASTIC_START = "ELASTIC_START"
    # reservations and waits
    RESERVED = "RESERVED"
    WAITS_FOR_RESERVATION = "WAITS_FOR_RESERVATION"
    WAITS_FOR_RESOURCES = "WAITS_FOR_RESOURCES"
    NEEDS_NODES_IN_ONE_LEAF = "NEEDS_NODES_IN_ONE_LEAF"
    # never, as things stand
    TOO_BIG_FOR_PARTITION = "TOO_BIG_FOR_PARTITION"
    NODES_UNAVAILABLE = "NODES_UNAVAILABLE"
    NOT_ELIGIBLE = "NOT_ELIGIBLE"
    UNSUPPORTED_REQUEST = "UNSUPPORTED_REQUEST"


#: Unplaced reasons for which slurmopt gives the job back to Slurm instead of holding it.
HAND_BACK_REASONS = frozenset({Reason.UNSUPPORTED_REQUEST, Reason.TOO_BIG_FOR_PARTITION})


@dataclass(frozen=True, slots=True)
class Start:
    """Start ``job_id`` now on exactly ``nodes`` (Slurm is asked to pin it there)."""

    kind: ClassVar[str] = "start"
    job_id: int
    nodes: tuple[str, ...]
    reason: Reason
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "job_id": self.job_id,
            "nodes": list(self.nodes),
            "reason": self.reason.value,
            "detail": self.detail,
        }


#: Every action a plan can hold.  Preempt, Requeue and Shrink join this union later.
Action = Start


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held from ``start_time`` for a job that cannot start now; ``reason`` says why not."""

    job_id: int
    nodes: tuple[str, ...]
    start_time: float
    reason: Reason
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "nodes": list(self.nodes),
            "start_time": self.start_time,
            "reason": self.reason.value,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A managed job that does not start now; ``expected_start`` is set if it has a reservation."""

    job_id: int
    reason: Reason
    detail: str = ""
    expected_start: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "reason": self.reason.value,
            "detail": self.detail,
            "expected_start": self.expected_start,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything one pass decided, in priority order within each list."""

    actions: tuple[Action, ...]
    reservations: tuple[Reservation, ...]
    unplaced: tuple[Unplaced, ...]
    now: float
    schema_version: int = PLAN_SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "now": self.now,
            "actions": [a.to_json() for a in self.actions],
            "reservations": [r.to_json() for r in self.reservations],
            "unplaced": [u.to_json() for u in self.unplaced],
        }


#: Pending reasons (prefixes) for which Slurm itself will not start the job now.
NOT_ELIGIBLE_REASONS = (
    "Dependency",
    "BeginTime",
    "QOS",
    "Assoc",
    "Licenses",
    "Reservation",
    "Partition",
    "Invalid",
    "AccountNotAllowed",
    "BadConstraints",
    "JobArrayTaskLimit",
    "DeadLine",
    "MaxJobs",
    "MaxGRES",
)

_UP_PARTITION_STATES = frozenset({"UP", ""})


def default_managed(job: Job) -> bool:
    """Every pending GPU job."""
    return job.is_pending and job.gpus_per_node > 0


def priority_order(
    jobs: Sequence[Job],
    priorities: Mapping[int, int] | None = None,
    *,
    preemptible_last: bool = False,
) -> list[Job]:
    """Highest Slurm priority first, then earliest submit, then lowest id.

    ``priorities`` overrides a job's own figure: a held job shows priority
    0, so the caller passes the priority recorded before it held the job.
    With ``preemptible_last`` (the planner's order) jobs tagged preemptible
    come after all others: any of those may preempt them, so they must not
    take first the nodes a preemption freed for one.
    """
    overrides = priorities or {}

    def key(job: Job) -> tuple[bool, int, float, int]:
        prio = overrides.get(job.job_id, job.priority)
        submitted = job.submit_time if job.submit_time is not None else math.inf
        tier = preemptible_last and is_preemptible_comment(job.admin_comment)
        return (tier, -prio, submitted, job.job_id)

    return sorted(jobs, key=key)


def _not_eligible(job: Job, now: float) -> str | None:
    """Why Slurm would not start this job now, or None."""
    if job.begin_time is not None and job.begin_time > now:
        return f"begin time {job.begin_time:.0f} is {job.begin_time - now:.0f} s away"
    if job.dependency and job.dependency != "(null)":
        return f"dependency {job.dependency}"
    if job.reservation:
        return f"runs in Slurm reservation {job.reservation}; left to Slurm"
    if job.reason.startswith(NOT_ELIGIBLE_REASONS):
        return f"Slurm reason {job.reason}"
    return None


# -- what passes share -----------------------------------------------------------------------------
#: A running job's hold on one node: (ends at, GPUs it gives back, runs exclusive).
_Hold = tuple[float, int, bool]


def _running_end(job: Job) -> float:
    """When a running job gives its GPUs back: start plus time limit (inf if unlimited)."""
    if job.time_limit_s is None:
        return INFINITY
    if job.start_time is not None:
        return job.start_time + job.time_limit_s
    return job.end_time if job.end_time is not None else INFINITY


@dataclass
class _Layout:
    """One partition's nodes as far as they depend on the node set and the fabric alone.

    ``usable``: in-service nodes in partition order, each with its leaf;
    ``exists_ge[g]`` / ``capable_ge[g]``: nodes (in service) with at least ``g``
    GPUs; ``leaf_capable_ge[g]``: the most such in-service nodes under one leaf.
    """

    nodes: tuple[str, ...]
    epoch: int
    usable: list[tuple[str, str | None]]
    leaf_nodes: dict[str, list[str]]
    avail_groups: dict[str, list[str]]
    members: frozenset[str]
    exists_ge: list[int]
    capable_ge: list[int]
    leaf_capable_ge: list[int]
    max_gpus: int
    #: The free-GPU indexes of a pool (see :class:`_Pool`) as a pass starts; buckets are
    #: kept sorted (a sorted list is a heap).  ``free`` and ``entry``: what each node counts as.
    count_ge: dict[str, list[int]] = field(default_factory=dict)
    histogram: Counter[int] = field(default_factory=Counter)
    buckets: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    entry: dict[str, tuple[int, int, str]] = field(default_factory=dict)

    def count(self, name: str, leaf: str | None, node: Node, free: int) -> None:
        """Move one usable node to ``free`` free GPUs in the pass-start indexes."""
        old = self.free.get(name, 0)
        if leaf is not None and old != free:
            counts = self.count_ge[leaf]
            for g in range(min(old, free) + 1, max(old, free) + 1):
                counts[g] += 1 if free > old else -1
        if old > 0:
            self.histogram[old] -= 1
            if not self.histogram[old]:
                del self.histogram[old]
            bucket = self.buckets[old]
            del bucket[bisect.bisect_left(bucket, self.entry.pop(name))]
            if not bucket:
                del self.buckets[old]
        self.free[name] = free
        if free > 0:
            self.histogram[free] += 1
            entry = self.entry[name] = _bucket_entry(node, free)
            bisect.insort(self.buckets.setdefault(free, []), entry)


def _bucket_entry(node: Node, free: int) -> tuple[int, int, str]:
    """Best-fit order within one free count: partly used nodes first, then weight, name."""
    return (1 if free >= node.gpus_total else 0, node.weight, node.name)


def _at_least(counts: list[int]) -> list[int]:
    """Turn "how many have exactly g" into "how many have at least g", in place."""
    for g in range(len(counts) - 2, -1, -1):
        counts[g] += counts[g + 1]
    return counts


class PlannerCache:
    """What consecutive :func:`plan` passes share, so a pass redoes only what changed.

    Everything held is derived from the passes' own inputs: leaf and group
    lookups of the fabric, each partition's node layout and capability
    indexes, each node's free GPUs and release times, the queue's job-size
    counts and its pending jobs.  Each pass first compares its snapshot with
    the previous one (node and job objects by identity, then by value) and
    recomputes only the nodes and jobs that differ, so a plan made with a
    cache is exactly the plan made without one.  Without a cache,
    :func:`plan` builds a throwaway one.

    States: EMPTY until the first pass; then BOUND to that pass's fabric.  A
    pass on the same fabric object stays BOUND and refreshes from the
    differences; a pass on another fabric object drops everything and binds
    to it (fabrics are taken as immutable once built, as their own cached
    lookups already assume).  A refresh that fails part-way drops everything
    (back to EMPTY) before the error propagates, so no later pass sees half
    an update.  Not for concurrent use: one cache per planning loop.
    """

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, fabric: Fabric | None) -> None:
        self._fabric = fabric
        self.leaf_of: dict[str, str | None] = {}
        self.group_of: dict[str, str] = {}
        self._nodes: dict[str, Node] = {}
        self._node_sig: dict[str, tuple[int, bool]] = {}
        self._available_by_state: dict[tuple[str, frozenset[str]], bool] = {}
        #: Bumped whenever a node comes, goes, or changes its GPU count or service state.
        self._epoch = 0
        self._layouts: dict[str, _Layout] = {}
        self._jobs: dict[int, Job] = {}
        self._pending: dict[int, Job] = {}
        self._shape_of: dict[int, tuple[int, int]] = {}
        self._shape_counts: Counter[tuple[int, int]] = Counter()
        self._shapes: tuple[JobShape, ...] | None = ()
        self._holds: dict[str, dict[int, list[_Hold]]] = {}
        self._dirty: set[str] = set()
        #: Free GPUs at the start of a pass, and release events (times not yet clipped to now).
        self._free: dict[str, int] = {}
        self._events: dict[str, list[tuple[float, int]]] = {}

    # -- refresh -----------------------------------------------------------------------------
    def refresh(self, snapshot: ClusterSnapshot, fabric: Fabric) -> None:
        """Bring everything up to date with ``snapshot`` on ``fabric``."""
        if fabric is not self._fabric:
            self._reset(fabric)
        try:
            self._refresh_nodes(snapshot.nodes)
            self._refresh_jobs(snapshot.jobs)
            for name in self._dirty:
                self._settle_node(name)
            self._dirty.clear()
        except BaseException:
            self._reset(None)
            raise

    def _available(self, node: Node) -> bool:
        key = (node.state, node.flags)
        known = self._available_by_state.get(key)
        if known is None:
            known = self._available_by_state[key] = node.available
        return known

    def _refresh_nodes(self, nodes: Mapping[str, Node]) -> None:
        seen = self._nodes
        changed = [name for name, node in nodes.items() if seen.get(name) is not node]
        for name in changed:
            node = nodes[name]
            old = seen.get(name)
            seen[name] = node
            if old is not None and old == node:
                continue
            signature = (node.gpus_total, self._available(node))
            if self._node_sig.get(name) != signature:
                self._node_sig[name] = signature
                self._epoch += 1
            self._dirty.add(name)
        if len(seen) > len(nodes):
            for name in [n for n in seen if n not in nodes]:
                del seen[name]
                del self._node_sig[name]
                self._dirty.add(name)
            self._epoch += 1

    def _refresh_jobs(self, jobs: Mapping[int, Job]) -> None:
        seen = self._jobs
        changed = [job_id for job_id, job in jobs.items() if seen.get(job_id) is not job]
        for job_id in changed:
            job = jobs[job_id]
            old = seen.get(job_id)
            if old is not None:
                if old == job:
                    seen[job_id] = job
                    if job_id in self._pending:
                        self._pending[job_id] = job
                    continue
                self._forget_job(job_id)
            self._add_job(job_id, job)
        if len(seen) > len(jobs):
            for job_id in [j for j in seen if j not in jobs]:
                self._forget_job(job_id)

    def _add_job(self, job_id: int, job: Job) -> None:
        self._jobs[job_id] = job
        if job.is_pending:
            self._pending[job_id] = job
        shape = queue_shape(job)
        if shape is not None:
            self._shape_of[job_id] = shape
            self._shape_counts[shape] += 1
            self._shapes = None
        if job.is_active:
            end = _running_end(job)
            for name in job.nodes:
                indices = job.gpu_indices.get(name)
                gpus = len(indices) if indices else job.gpus_per_node
                self._holds.setdefault(name, {}).setdefault(job_id, []).append(
                    (end, gpus, job.exclusive)
                )
                self._dirty.add(name)

    def _forget_job(self, job_id: int) -> None:
        job = self._jobs.pop(job_id)
        self._pending.pop(job_id, None)
        shape = self._shape_of.pop(job_id, None)
        if shape is not None:
            self._shape_counts[shape] -= 1
            if not self._shape_counts[shape]:
                del self._shape_counts[shape]
            self._shapes = None
        if job.is_active:
            for name in job.nodes:
                holds = self._holds.get(name)
                if holds is not None and holds.pop(job_id, None) is not None and not holds:
                    del self._holds[name]
                self._dirty.add(name)

    def _settle_node(self, name: str) -> None:
        """Free GPUs now and when running jobs give theirs back, for one node.

        Slurm's own free count wins over the jobs (a node may hold GPUs no
        listed job accounts for); releases are capped at what is held.
        """
        node = self._nodes.get(name)
        if node is None:
            self._free.pop(name, None)
            self._events.pop(name, None)
            return
        total = node.gpus_total
        exclusive = False
        releases: list[tuple[float, int]] = []
        for holds in self._holds.get(name, {}).values():
            for end, gpus, whole in holds:
                if whole:
                    exclusive = True
                    gpus = total
                releases.append((end, gpus))
        available = self._available(node)
        free = node.gpus_free if available and not exclusive else 0
        self._free[name] = free
        for layout in self._layouts.values():
            if layout.epoch == self._epoch and name in layout.members:
                layout.count(name, self.leaf_of[name], node, free)
        events: list[tuple[float, int]] = []
        if available and releases:
            held = total - free
            for end, gpus in sorted(releases):
                give = min(gpus, held)
                if give > 0:
                    if end < INFINITY:
                        events.append((end, give))
                    held -= give
            events.sort()
        if events:
            self._events[name] = events
        else:
            self._events.pop(name, None)

    # -- what a pass reads -------------------------------------------------------------------
    def pending_jobs(self) -> list[Job]:
        """The snapshot's pending jobs, in no particular order."""
        return list(self._pending.values())

    def queue_shapes(self) -> tuple[JobShape, ...]:
        """The queue's job-size distribution, as ``queue_distribution`` gives it."""
        if self._shapes is None:
            self._shapes = tuple(
                JobShape(n, d, float(c)) for (n, d), c in sorted(self._shape_counts.items())
            )
        return self._shapes

    def running_releases(self, name: str) -> list[tuple[float, int]]:
        """When the node's running jobs give their GPUs back, sorted (no reservations)."""
        return self._events.get(name, [])

    def timeline(self, now: float) -> Timeline:
        """A fresh timeline at ``now``; it copies an event list before changing it."""
        events = dict(self._events)
        for name, changes in events.items():
            if changes[0][0] < now:  # overdue jobs give their GPUs back from now on
                events[name] = sorted((max(t, now), g) for t, g in changes)
        return Timeline.shared(now, dict(self._free), events)

    def leaf(self, node: str) -> str | None:
        if node not in self.leaf_of:
            assert self._fabric is not None
            self.leaf_of[node] = self._fabric.leaf_of(node)
        return self.leaf_of[node]

    def _group(self, leaf: str) -> str:
        """Leaves with the same uplinks are one group: any two are the fewest hops apart."""
        group = self.group_of.get(leaf)
        if group is None:
            fabric = self._fabric
            assert fabric is not None
            up = fabric.uplinks(leaf) if leaf in fabric.graph else []
            group = self.group_of[leaf] = ",".join(up) or leaf
        return group

    def layout(self, partition: Partition) -> _Layout:
        """The partition's layout, rebuilt only when its nodes or their service changed."""
        known = self._layouts.get(partition.name)
        if (
            known is not None
            and known.epoch == self._epoch
            and (known.nodes is partition.nodes or known.nodes == partition.nodes)
        ):
            return known
        nodes = self._nodes
        all_nodes = [nodes[n] for n in partition.nodes if n in nodes]
        max_gpus = max((n.gpus_total for n in all_nodes), default=0)
        exists = [0] * (max_gpus + 2)
        capable = [0] * (max_gpus + 2)
        leaf_capable: dict[str, list[int]] = {}
        leaf_nodes: dict[str, list[str]] = {}
        usable: list[tuple[str, str | None]] = []
        for node in all_nodes:
            exists[node.gpus_total] += 1
            if not self._node_sig[node.name][1]:
                continue
            capable[node.gpus_total] += 1
            leaf = self.leaf(node.name)
            usable.append((node.name, leaf))
            if leaf is not None:
                leaf_nodes.setdefault(leaf, []).append(node.name)
                leaf_capable.setdefault(leaf, [0] * (max_gpus + 2))[node.gpus_total] += 1
                self._group(leaf)
        for counts in leaf_capable.values():
            _at_least(counts)
        avail_groups = {**leaf_nodes}
        for name, leaf in usable:
            if leaf is None:
                avail_groups[name] = [name]
        layout = self._layouts[partition.name] = _Layout(
            nodes=partition.nodes,
            epoch=self._epoch,
            usable=usable,
            leaf_nodes=leaf_nodes,
            avail_groups=avail_groups,
            members=frozenset(name for name, _ in usable),
            exists_ge=_at_least(exists),
            capable_ge=_at_least(capable),
            leaf_capable_ge=[
                max((cap[g] for cap in leaf_capable.values()), default=0)
                for g in range(max_gpus + 2)
            ],
            max_gpus=max_gpus,
        )
        layout.count_ge = {leaf: [0] * (max_gpus + 2) for leaf in leaf_nodes}
        free = self._free
        for name, leaf in usable:
            f = free[name]
            layout.free[name] = f
            if leaf is not None:
                layout.count_ge[leaf][f] += 1
            if f > 0:
                layout.histogram[f] += 1
                entry = layout.entry[name] = _bucket_entry(nodes[name], f)
                layout.buckets.setdefault(f, []).append(entry)
        for counts in layout.count_ge.values():
            _at_least(counts)
        for bucket in layout.buckets.values():
            bucket.sort()
        return layout


# -- the pass ------------------------------------------------------------------------------------
@dataclass
class _Pool:
    """One partition's usable nodes with the indexes placement reads.

    ``count_ge[leaf][g]``: nodes of the leaf with at least ``g`` free GPUs;
    ``histogram``: nodes per free-GPU count (free > 0);
    ``buckets[f]``: heap of nodes with ``f`` free, best-fit order first.
    The layout's lists are shared with later passes and never changed.
    """

    partition: Partition
    layout: _Layout
    count_ge: dict[str, list[int]]
    histogram: Counter[int]
    buckets: dict[int, list[tuple[int, int, str]]]
    avail_cache: dict[int, dict[str, tuple[int, list[tuple[float, str]]]]] = field(
        default_factory=dict
    )

    @property
    def leaf_nodes(self) -> dict[str, list[str]]:
        return self.layout.leaf_nodes

    @property
    def avail_groups(self) -> dict[str, list[str]]:
        return self.layout.avail_groups

    @property
    def members(self) -> frozenset[str]:
        return self.layout.members

    @property
    def leaf_capable_ge(self) -> list[int]:
        return self.layout.leaf_capable_ge


@dataclass
class _Failure:
    reason: Reason
    detail: str


class _Planner:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        fabric: Fabric,
        policy: Policy,
        now: float,
        jobs: list[Job],
        cache: PlannerCache,
    ) -> None:
        self.snapshot = snapshot
        self.fabric = fabric
        self.policy = policy
        self.now = now
        self.jobs = jobs
        self.cache = cache
        self.timeline = cache.timeline(now)
        self.pools: dict[str, _Pool | None] = {}
        self.pool_list: list[_Pool] = []
        #: Nodes this pass has taken GPUs from.
        self.taken: set[str] = set()
        self.pools_for_request: dict[tuple[Any, ...], tuple[list[_Pool], _Failure | None]] = {}
        self.leaf_of = cache.leaf_of
        self.group_of = cache.group_of
        self.reserved_in_leaf: dict[str, int] = {}
        self.reserved_by: dict[str, list[int]] = {}
        #: Bumped when a leaf's (or off-leaf node's) free GPUs or reservations change.
        self.versions: dict[str, int] = {}
        self.failures: dict[tuple[Any, ...], _Failure] = {}
        self.constraints: dict[str, Constraint | None] = {}
        job_sizes = policy.job_sizes
        self.shapes: tuple[JobShape, ...] = job_sizes.shapes if job_sizes else cache.queue_shapes()
        self.actions: list[Action] = []
        self.reservations: list[Reservation] = []
        self.unplaced: list[Unplaced] = []

    # -- setup -------------------------------------------------------------------------------
    def _leaf(self, node: str) -> str | None:
        try:
            return self.leaf_of[node]
        except KeyError:
            return self.cache.leaf(node)

    def _pool(self, name: str) -> _Pool | None:
        if name in self.pools:
            return self.pools[name]
        part = self.snapshot.partitions.get(name)
        if part is None:
            self.pools[name] = None
            return None
        layout = self.cache.layout(part)
        pool = _Pool(
            part,
            layout,
            {leaf: counts.copy() for leaf, counts in layout.count_ge.items()},
            layout.histogram.copy(),
            {f: bucket.copy() for f, bucket in layout.buckets.items()},
        )
        # Nodes this pass already took GPUs from (for pools of other partitions) move now.
        free = self.timeline.free
        for node_name in self.taken:
            if node_name in layout.members and layout.free[node_name] != free[node_name]:
                self._shift(pool, node_name, layout.free[node_name], free[node_name])
        self.pools[name] = pool
        self.pool_list.append(pool)
        return pool

    # -- state changes -----------------------------------------------------------------------
    def _bump(self, name: str) -> None:
        key = self._leaf(name) or name
        self.versions[key] = self.versions.get(key, 0) + 1

    def _take_now(self, name: str, gpus: int, end: float) -> None:
        self._bump(name)
        old = self.timeline.free[name]
        self.timeline.occupy(name, gpus, end)
        new = self.timeline.free[name]
        self.taken.add(name)
        for pool in self.pool_list:
            if name in pool.layout.members:
                self._shift(pool, name, old, new)

    def _shift(self, pool: _Pool, name: str, old: int, new: int) -> None:
        """Move a node from ``old`` to ``new`` (fewer) free GPUs in the pool's indexes.

        Its entry in the ``old`` bucket stays behind; readers skip entries
        whose node no longer has that many free.
        """
        leaf = self._leaf(name)
        if leaf is not None:
            counts = pool.count_ge[leaf]
            for g in range(new + 1, old + 1):
                counts[g] -= 1
        if old > 0:
            pool.histogram[old] -= 1
            if pool.histogram[old] == 0:
                del pool.histogram[old]
        if new > 0:
            pool.histogram[new] += 1
            entry = _bucket_entry(self.snapshot.nodes[name], new)
            heapq.heappush(pool.buckets.setdefault(new, []), entry)

    def _reserve(self, job_id: int, name: str, gpus: int, start: float, end: float) -> None:
        self._bump(name)
        if name not in self.timeline.reserved:
            leaf = self._leaf(name)
            if leaf is not None:
                self.reserved_in_leaf[leaf] = self.reserved_in_leaf.get(leaf, 0) + 1
        self.timeline.reserve(name, gpus, start, end)
        self.reserved_by.setdefault(name, []).append(job_id)

    # -- per-node tests ----------------------------------------------------------------------
    def _constraint(self, job: Job) -> Constraint | None:
        if job.features not in self.constraints:
            try:
                self.constraints[job.features] = parse_constraint(job.features)
            except ValueError:
                self.constraints[job.features] = None
        return self.constraints[job.features]

    @staticmethod
    def _is_simple(job: Job) -> bool:
        return not (
            job.features
            or job.excluded_nodes
            or job.required_nodes
            or job.exclusive
            or job.gpu_type
        )

    def _static_ok(self, job: Job, node: Node, constraint: Constraint, gpus: int) -> bool:
        """What never changes within a pass: type, features, exclusions, size."""
        if node.gpus_total < gpus:
            return False
        if job.gpu_type and node.gpu_type and job.gpu_type != node.gpu_type:
            return False
        if job.excluded_nodes and node.name in job.excluded_nodes:
            return False
        return constraint.matches(node.features)

    def _need(self, job: Job, node: Node) -> int:
        """GPUs the job takes on this node: all of them when it runs exclusive."""
        return node.gpus_total if job.exclusive else job.gpus_per_node

    def _fits_now(
        self, job: Job, node: Node, constraint: Constraint, end: float, respect: bool
    ) -> bool:
        need = self._need(job, node)
        if not self._static_ok(job, node, constraint, job.gpus_per_node):
            return False
        if job.exclusive and (node.alloc_cpus > 0 or self.timeline.free[node.name] < need):
            return False
        if respect:
            return self.timeline.fits_now(node.name, need, end)
        return self.timeline.free[node.name] >= need

    # -- one job -----------------------------------------------------------------------------
    def run(self) -> Plan:
        for job in self.jobs:
            self._plan_job(job)
        return Plan(tuple(self.actions), tuple(self.reservations), tuple(self.unplaced), self.now)

    def _unplaced(self, job: Job, reason: Reason, detail: str, at: float | None = None) -> None:
        self.unplaced.append(Unplaced(job.job_id, reason, detail, at))

    def _plan_job(self, job: Job) -> None:
        if job.het_job_id is not None:
            self._unplaced(job, Reason.UNSUPPORTED_REQUEST, "heterogeneous job; left to Slurm")
            return
        if job.gpus_per_node <= 0:
            self._unplaced(job, Reason.UNSUPPORTED_REQUEST, "asks for no GPUs; left to Slurm")
            return
        why = _not_eligible(job, self.now)
        if why is not None:
            self._unplaced(job, Reason.NOT_ELIGIBLE, why)
            return
        span = self._elastic_span(job)
        if span is not None and job.node_count != span[1]:
            job = replace(job, node_count=span[1])  # planned from MAX, even once set smaller
        constraint = self._constraint(job)
        if constraint is None:
            self._unplaced(
                job, Reason.UNSUPPORTED_REQUEST, f"constraint {job.features!r}; left to Slurm"
            )
            return
        pools, refusal = self._pools_for(job)
        if not pools:
            assert refusal is not None
            self._unplaced(job, refusal.reason, refusal.detail)
            return
        end = self._end(job, pools[0].partition)
        failure: _Failure | None = None
        for pool in pools:
            failure = self._try_start(job, pool, constraint, end)
            if failure is None:
                return
        assert failure is not None
        if span is not None and self._start_elastic(job, pools, constraint, end, span[0]):
            return
        if len(self.reservations) < self.policy.backfill_depth:
            if self._try_reserve(job, pools, constraint, failure):
                return
        self._unplaced(job, failure.reason, failure.detail)

    def _elastic_span(self, job: Job) -> tuple[int, int] | None:
        """``(MIN, MAX)`` nodes of an elastic job the planner may start smaller; else None."""
        if not self.policy.elastic or job.required_nodes:
            return None
        span = elastic_range(job.admin_comment)
        if span is None or span[0] >= span[1] or not span[0] <= job.node_count <= span[1]:
            return None
        return span

    def _start_elastic(
        self, job: Job, pools: list[_Pool], constraint: Constraint, end: float, low: int
    ) -> bool:
        """Start an elastic job on fewer nodes now if that finishes before waiting for all.

        Its time limit is the budget at ``low`` nodes, so on ``n`` nodes it
        is expected to run ``limit * low / n``; the full size would start at
        its earliest block (never, when none frees up).  The timeline keeps
        the whole limit on the nodes taken, so no reservation is delayed.
        """
        limit = end - self.now
        if limit >= INFINITY:
            return False
        k = job.node_count
        blocks = (self._earliest_block(job, pool, constraint) for pool in pools)
        full = min((b[0] for b in blocks if b is not None), default=INFINITY)
        finish_full = full + limit * low / k
        for n in range(k - 1, low - 1, -1):
            if self.now + limit * low / n >= finish_full:
                return False  # fewer nodes would finish later still
            smaller = replace(job, node_count=n)
            for pool in pools:
                if self._try_start(smaller, pool, constraint, end) is None:
                    started = self.actions[-1]
                    wait = "never" if full >= INFINITY else f"from now+{full - self.now:.0f} s"
                    detail = f"elastic {low}:{k}: {n} of {k} nodes now ({k} {wait}); "
                    self.actions[-1] = replace(
                        started, reason=Reason.ELASTIC_START, detail=detail + started.detail
                    )
                    return True
        return False

    def _end(self, job: Job, partition: Partition) -> float:
        limit = job.time_limit_s if job.time_limit_s is not None else partition.max_time_s
        return INFINITY if limit is None else self.now + limit

    def _pools_for(self, job: Job) -> tuple[list[_Pool], _Failure | None]:
        """The job's partitions that are managed, up, and big enough; else why none is.

        The answer depends only on the fields in the key, so one pass works
        it out once per kind of request.
        """
        key = (job.partition, job.node_count, job.gpus_per_node, job.time_limit_s)
        known = self.pools_for_request.get(key)
        if known is None:
            known = self.pools_for_request[key] = self._find_pools(job)
        return known

    def _find_pools(self, job: Job) -> tuple[list[_Pool], _Failure | None]:
        names = [p for p in (job.partition or self._default_partition()).split(",") if p]
        managed = self.policy.partitions
        pools: list[_Pool] = []
        refusal: _Failure | None = None
        k = max(job.node_count, 1)
        gpus = job.gpus_per_node
        for name in names:
            if managed is not None and name not in managed:
                refusal = refusal or _Failure(Reason.NOT_ELIGIBLE, f"partition {name} not managed")
                continue
            pool = self._pool(name)
            if pool is None:
                refusal = _Failure(Reason.NOT_ELIGIBLE, f"unknown partition {name}")
                continue
            part = pool.partition
            if part.state.upper() not in _UP_PARTITION_STATES:
                refusal = _Failure(Reason.NOT_ELIGIBLE, f"partition {name} is {part.state}")
                continue
            limit = part.max_time_s
            if limit is not None and job.time_limit_s is not None and job.time_limit_s > limit:
                refusal = _Failure(
                    Reason.NOT_ELIGIBLE,
                    f"time limit {job.time_limit_s} s over partition {name}'s {limit} s",
                )
                continue
            layout = pool.layout
            exists = layout.exists_ge[gpus] if gpus <= layout.max_gpus else 0
            if (part.max_nodes is not None and k > part.max_nodes) or k > exists:
                refusal = _Failure(
                    Reason.TOO_BIG_FOR_PARTITION,
                    f"needs {k} nodes with {gpus} GPUs; partition {name} has {exists}"
                    + (f" and allows {part.max_nodes} per job" if part.max_nodes else ""),
                )
                continue
            capable = layout.capable_ge[gpus]
            if k > capable:
                refusal = _Failure(
                    Reason.NODES_UNAVAILABLE,
                    f"needs {k} nodes with {gpus} GPUs; {capable} of partition {name}'s "
                    f"{exists} are in service",
                )
                continue
            pools.append(pool)
        return pools, refusal

    def _default_partition(self) -> str:
        for part in self.snapshot.partitions.values():
            if part.default:
                return part.name
        return ""

    def _single_leaf(self, pool: _Pool, k: int, gpus: int) -> bool:
        return self.policy.require_single_leaf and k <= pool.leaf_capable_ge[gpus]

    def _cache_key(self, job: Job, pool: _Pool, end: float) -> tuple[Any, ...]:
        return (
            pool.partition.name,
            max(job.node_count, 1),
            job.gpus_per_node,
            job.features,
            job.gpu_type,
            job.excluded_nodes,
            job.required_nodes,
            job.exclusive,
            end,
        )

    def _try_start(
        self, job: Job, pool: _Pool, constraint: Constraint, end: float
    ) -> _Failure | None:
        """Start the job in this pool now if it fits without delaying a reservation."""
        k = max(job.node_count, 1)
        gpus = job.gpus_per_node
        # Resources only shrink during a pass, so a request that failed fails again.
        key = self._cache_key(job, pool, end)
        cached = self.failures.get(key)
        if cached is not None:
            return cached
        fitting = sum(n for f, n in pool.histogram.items() if f >= gpus)
        if fitting < k:
            failure = _Failure(
                Reason.WAITS_FOR_RESOURCES,
                f"needs {k} node(s) with {gpus} free GPUs; {fitting} in partition "
                f"{pool.partition.name}",
            )
            self.failures[key] = failure
            return failure
        if k == 1 and not job.required_nodes:
            result = self._start_single(job, pool, constraint, end)
        else:
            result = self._start_gang(job, pool, constraint, end, k)
        if isinstance(result, _Failure):
            self.failures[key] = result
            return result
        return None

    def _start_reason(self, placed: Reason) -> Reason:
        return Reason.BACKFILL if self.reservations else placed

    def _start_single(
        self, job: Job, pool: _Pool, constraint: Constraint, end: float
    ) -> _Failure | None:
        gpus = job.gpus_per_node
        rise = fgd_increase(pool.histogram, self.shapes, gpus)
        blocked = False
        order = sorted(rise, key=lambda f: (rise[f], f - gpus))
        for i, f in enumerate(order):
            name, held_back = self._first_in_bucket(pool, f, job, constraint, end)
            blocked = blocked or held_back
            if name is None:
                continue
            if self.policy.align_ends:
                name, f = self._aligned_across(order[i + 1 :], pool, job, constraint, end, name, f)
            node = self.snapshot.nodes[name]
            need = self._need(job, node)
            self._take_now(name, need, end)
            detail = (
                f"{name}: {need} of {f} free GPUs taken, {f - need} left; "
                f"FGD unusable GPUs {rise[f]:+.2f}"
            )
            self.actions.append(
                Start(job.job_id, (name,), self._start_reason(Reason.BEST_FIT_NODE), detail)
            )
            return None
        if blocked:
            return _Failure(
                Reason.RESERVED,
                f"nodes with {gpus} free GPUs are reserved for higher-priority jobs",
            )
        return _Failure(
            Reason.WAITS_FOR_RESOURCES,
            f"needs {gpus} free GPUs on one node matching its constraints",
        )

    def _aligned_across(
        self,
        buckets: Sequence[int],
        pool: _Pool,
        job: Job,
        constraint: Constraint,
        end: float,
        name: str,
        free: int,
    ) -> tuple[str, int]:
        """Of the partly used nodes the job may take, the one whose jobs end nearest ``end``.

        ``name`` (with ``free`` free GPUs) is FGD's choice; when it is a partly
        used node, the aligned node of each other bucket competes with it on
        the end gap alone.  Best fit strands little at the start, but nodes
        whose jobs end far apart strand the rest while the last one runs on;
        over a replay that costs more than the fit saves.  An idle choice
        stays: there is no end to match.
        """
        gap = self._end_gap(name, end)
        if gap is None:
            return name, free
        best = (gap, name, free)
        for other_free in buckets:
            other, _ = self._first_in_bucket(pool, other_free, job, constraint, end)
            if other is None:
                continue
            other_gap = self._end_gap(other, end)
            if other_gap is not None and other_gap < best[0]:
                best = (other_gap, other, other_free)
        return best[1], best[2]

    def _first_in_bucket(
        self, pool: _Pool, free: int, job: Job, constraint: Constraint, end: float
    ) -> tuple[str | None, bool]:
        """The best-fit node with ``free`` free GPUs the job may take; and was one reserved."""
        heap = pool.buckets.get(free, [])
        skipped: list[tuple[int, int, str]] = []
        found: str | None = None
        blocked = False
        while heap:
            entry = heapq.heappop(heap)
            name = entry[2]
            if self.timeline.free[name] != free:
                continue  # stale: the node has moved to another bucket
            skipped.append(entry)
            node = self.snapshot.nodes[name]
            if self._fits_now(job, node, constraint, end, respect=True):
                found = name
                break
            if not blocked and self._fits_now(job, node, constraint, end, respect=False):
                blocked = True
        if found is not None and self.policy.align_ends and heap:
            found = self._closest_end(heap, found, free, job, constraint, end)
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found, blocked

    def _closest_end(
        self,
        heap: list[tuple[int, int, str]],
        first: str,
        free: int,
        job: Job,
        constraint: Constraint,
        end: float,
    ) -> str:
        """Of the partly used nodes with ``free`` free GPUs, the one whose jobs end nearest ``end``.

        A node whose GPUs all free up within a short span empties whole; one
        that keeps a single long job strands the rest.  Only partly used
        nodes are compared (an idle node has no end to match), so with no
        running jobs nothing changes; on a tie the best-fit node ``first``
        stays, else the first found of the equally near ones.
        """
        gap = self._end_gap(first, end)
        if gap is None:
            return first
        best = (gap, first)
        for _, _, name in heap:  # the heap's own list, read without popping
            if self.timeline.free[name] != free:
                continue
            other = self._end_gap(name, end)
            if other is None or other >= best[0]:
                continue
            if self._fits_now(job, self.snapshot.nodes[name], constraint, end, respect=True):
                best = (other, name)
        return best[1]

    def _end_gap(self, name: str, end: float) -> float | None:
        """Seconds between ``end`` and the last running job's end on the node; None when idle."""
        if name in self.timeline.reserved:
            events = self.cache.running_releases(name)
        else:
            events = self.timeline.events.get(name, [])
        if not events:
            return None
        return abs(events[-1][0] - end)

    def _node_order(self, name: str) -> tuple[int, int, int, str]:
        node = self.snapshot.nodes[name]
        free = self.timeline.free[name]
        return (free, 1 if free >= node.gpus_total else 0, node.weight, name)

    def _start_gang(
        self, job: Job, pool: _Pool, constraint: Constraint, end: float, k: int
    ) -> _Failure | None:
        gpus = job.gpus_per_node
        nodes = self.snapshot.nodes
        required = [n for n in job.required_nodes]
        if required:
            bad = [
                n
                for n in required
                if n not in pool.members
                or not self._fits_now(job, nodes[n], constraint, end, respect=True)
            ]
            if bad:
                return _Failure(
                    Reason.WAITS_FOR_RESOURCES, f"required node(s) {', '.join(bad)} not free"
                )
            if len(required) >= k:
                self._commit_start(job, required[:k], end, Reason.GANG_FEWEST_LEAVES, "")
                return None
        simple = self._is_simple(job)
        respected = self._usable_by_leaf(job, pool, constraint, end, simple, True, set(required))
        need = k - len(required)
        single = self._single_leaf(pool, k, gpus) and not required
        choice = choose_leaves(
            {leaf: len(v) for leaf, v in respected.items()}, need, self.group_of, single
        )
        spread_note = ""
        if choice is None and single and self.policy.compact_wait_share is not None:
            spread = choose_leaves(
                {leaf: len(v) for leaf, v in respected.items()}, need, self.group_of, False
            )
            if spread is not None:
                found = self._earliest_block(job, pool, constraint, one_leaf=True)
                bound = self.policy.compact_wait_share * (end - self.now)
                if found is None or found[0] - self.now > bound:
                    choice = spread
                    one_leaf = "never" if found is None else f"from now+{found[0] - self.now:.0f} s"
                    spread_note = f"; one leaf only {one_leaf}, over the {bound:.0f} s bound"
        if choice is None:
            return self._gang_failure(job, pool, constraint, end, k, respected, single, required)
        chosen = list(required)
        for leaf, count in choice.take:
            ranked = sorted(respected[leaf], key=self._node_order)
            chosen.extend(ranked[:count])
        leaves = ", ".join(choice.leaves)
        detail = (
            f"{k} nodes on {len(choice.leaves)} leaf switch(es) ({leaves}); "
            f"{choice.left_over} usable node(s) left on them{spread_note}"
        )
        self._commit_start(job, chosen, end, Reason.GANG_FEWEST_LEAVES, detail)
        return None

    def _usable_by_leaf(
        self,
        job: Job,
        pool: _Pool,
        constraint: Constraint,
        end: float,
        simple: bool,
        respect: bool,
        skip: set[str],
    ) -> dict[str, list[str]]:
        """Nodes the job could take now, per leaf; the indexes skip leaves with none."""
        gpus = job.gpus_per_node
        free = self.timeline.free
        nodes = self.snapshot.nodes
        out: dict[str, list[str]] = {}
        for leaf, counts in pool.count_ge.items():
            if counts[gpus] == 0:
                continue
            members = pool.leaf_nodes[leaf]
            if simple and not skip and (not respect or not self.reserved_in_leaf.get(leaf)):
                usable = [n for n in members if free[n] >= gpus]
            else:
                usable = [
                    n
                    for n in members
                    if n not in skip and self._fits_now(job, nodes[n], constraint, end, respect)
                ]
            if usable:
                out[leaf] = usable
        return out

    def _gang_failure(
        self,
        job: Job,
        pool: _Pool,
        constraint: Constraint,
        end: float,
        k: int,
        respected: Mapping[str, list[str]],
        single: bool,
        required: list[str],
    ) -> _Failure:
        gpus = job.gpus_per_node
        total = sum(len(v) for v in respected.values())
        best = max((len(v) for v in respected.values()), default=0)
        where = (
            f"needs {k} nodes with {gpus} free GPUs; {total} free across "
            f"{len(respected)} leaves, at most {best} on one"
        )
        if self.reservations:
            loose = self._usable_by_leaf(
                job, pool, constraint, end, self._is_simple(job), False, set(required)
            )
            if choose_leaves(
                {leaf: len(v) for leaf, v in loose.items()},
                k - len(required),
                self.group_of,
                single,
            ):
                return _Failure(
                    Reason.RESERVED, f"{where}; more are free but reserved for higher-priority jobs"
                )
        if single and total >= k:
            return _Failure(Reason.NEEDS_NODES_IN_ONE_LEAF, where)
        return _Failure(Reason.WAITS_FOR_RESOURCES, where)

    def _commit_start(
        self, job: Job, chosen: Sequence[str], end: float, placed: Reason, detail: str
    ) -> None:
        for name in chosen:
            self._take_now(name, self._need(job, self.snapshot.nodes[name]), end)
        self.actions.append(Start(job.job_id, tuple(chosen), self._start_reason(placed), detail))

    # -- reservations ------------------------------------------------------------------------
    def _try_reserve(
        self, job: Job, pools: list[_Pool], constraint: Constraint, failure: _Failure
    ) -> bool:
        """Hold the earliest block of nodes that frees up for the job; False if none ever does."""
        best: tuple[float, list[str], _Pool] | None = None
        for pool in pools:
            found = self._earliest_block(job, pool, constraint)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], found[1], pool)
        if best is None:
            return False
        start, chosen, pool = best
        limit = self._end(job, pool.partition) - self.now
        end = start + limit
        for name in chosen:
            self._reserve(job.job_id, name, self._need(job, self.snapshot.nodes[name]), start, end)
        self.reservations.append(
            Reservation(job.job_id, tuple(chosen), start, failure.reason, failure.detail)
        )
        wait = start - self.now
        self._unplaced(
            job,
            Reason.WAITS_FOR_RESERVATION,
            f"{failure.detail}; reserved {len(chosen)} node(s) from now+{wait:.0f} s",
            start,
        )
        return True

    def _availability(
        self, job: Job, pool: _Pool, constraint: Constraint, k: int
    ) -> dict[str, list[tuple[float, str]]]:
        """Per leaf (or per off-leaf node, for one-node jobs): when each node is ready, sorted.

        For jobs without node constraints the lists are cached per leaf and
        rebuilt only for leaves whose nodes changed since.
        """
        gpus = job.gpus_per_node
        nodes = self.snapshot.nodes
        ready_from = self.timeline.available_from
        simple = self._is_simple(job)
        groups = pool.leaf_nodes if k > 1 else pool.avail_groups
        cache = pool.avail_cache.setdefault(gpus, {}) if simple else None
        out: dict[str, list[tuple[float, str]]] = {}
        for key, members in groups.items():
            version = self.versions.get(key, 0)
            if cache is not None:
                hit = cache.get(key)
                if hit is not None and hit[0] == version:
                    if hit[1]:
                        out[key] = hit[1]
                    continue
            times = []
            for name in members:
                node = nodes[name]
                if node.gpus_total < gpus:
                    continue
                if not simple and not self._static_ok(job, node, constraint, gpus):
                    continue
                at = ready_from(name, self._need(job, node))
                if at < INFINITY:
                    times.append((at, name))
            times.sort()
            if cache is not None:
                cache[key] = (version, times)
            if times:
                out[key] = times
        return out

    def _earliest_block(
        self, job: Job, pool: _Pool, constraint: Constraint, one_leaf: bool | None = None
    ) -> tuple[float, list[str]] | None:
        """When and on which nodes the job could start first, by the timeline.

        A gang that fits one leaf gets the earliest one-leaf block when
        ``one_leaf`` (default: the policy's ``reserve_one_leaf``), else the
        earliest block anywhere, on the fewest leaves at that time.
        """
        if one_leaf is None:
            one_leaf = self.policy.reserve_one_leaf
        k = max(job.node_count, 1)
        gpus = job.gpus_per_node
        when = self._availability(job, pool, constraint, k)
        required = set(job.required_nodes)
        if required:
            req = [(at, n) for v in when.values() for at, n in v if n in required]
            if len(req) < len(required):
                return None
            if len(required) >= k:
                return max(at for at, _ in req), sorted(required)[:k]
        single = one_leaf and self._single_leaf(pool, k, gpus) and not required
        if single or k == 1:
            starts = [v[k - 1][0] for v in when.values() if len(v) >= k]
            if not starts:
                return None
            start = min(starts)
        else:
            earliest = list(itertools.islice(heapq.merge(*when.values()), k))
            if len(earliest) < k:
                return None
            start = earliest[-1][0]
        ready: dict[str, list[tuple[float, str]]] = {}
        for key, v in when.items():
            upto = bisect.bisect_right(v, (start, "\uffff"))
            if upto:
                ready[key] = v[:upto]
        if k == 1:
            _, name = min(v[0] for v in ready.values())
            return start, [name]
        fixed = [n for v in ready.values() for _, n in v if n in required]
        choice = choose_leaves(
            {leaf: sum(1 for _, n in v if n not in required) for leaf, v in ready.items()},
            k - len(fixed),
            self.group_of,
            single,
        )
        if choice is None:
            return None
        chosen = list(fixed)
        for leaf, count in choice.take:
            # Latest-ready nodes first: the earlier ones stay free for backfill.
            ranked = sorted(
                (n for n in ready[leaf] if n[1] not in required), key=lambda x: (-x[0], x[1])
            )
            chosen.extend(n for _, n in ranked[:count])
        return start, chosen


def plan(
    snapshot: ClusterSnapshot,
    fabric: Fabric,
    policy: Policy | None = None,
    now: float | None = None,
    managed: Callable[[Job], bool] = default_managed,
    priorities: Mapping[int, int] | None = None,
    *,
    cache: PlannerCache | None = None,
) -> Plan:
    """Decide which managed pending jobs start now and where; see the module docstring.

    ``managed`` picks the pending jobs to plan (default: every pending GPU
    job); every other job still holds what Slurm says it holds.
    ``priorities`` overrides Slurm's priority per job id (held jobs show 0).
    ``now`` defaults to the snapshot's time.  ``cache``: a
    :class:`PlannerCache` passed to every pass of one planning loop, so each
    pass redoes only what changed since the last; the plan is the same with
    or without it.
    """
    policy = policy or Policy()
    at = snapshot.taken_at if now is None else now
    state = PlannerCache() if cache is None else cache
    state.refresh(snapshot, fabric)
    jobs = [j for j in state.pending_jobs() if managed(j)]
    order = priority_order(jobs, priorities, preemptible_last=True)
    return _Planner(snapshot, fabric, policy, at, order, state).run()


__all__ = [
    "HAND_BACK_REASONS",
    "Action",
    "Plan",
    "PlannerCache",
    "Policy",
    "Reason",
    "Reservation",
    "Start",
    "Unplaced",
    "default_managed",
    "plan",
    "priority_order",
]
