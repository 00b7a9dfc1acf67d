"""What consecutive planning passes share: the :class:`PlannerCache` and each partition's layout.

Everything here is derived from a pass's inputs alone (the snapshot's nodes
and jobs, the fabric), not from any placement decision, so one pass after
another can keep it and redo only what changed.  The pass itself (the
``planner`` module and its placement concerns) only reads it, through
copies, and never changes it.
"""

from __future__ import annotations

import bisect
import operator
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurmopt.fabric import Fabric
from slurmopt.model import ACTIVE_JOB_STATES, ClusterSnapshot, Job, JobState, Node, Partition
from slurmopt.policy.backfill import INFINITY, Timeline
from slurmopt.policy.fragmentation import JobShape, queue_shape
from slurmopt.policy.ordering import OrderKey, order_key

#: A running job's hold on one node: (ends at, GPUs it gives back, runs exclusive).
_Hold = tuple[float, int, bool]
#: A pending job in the planning order: its order key, and the job object it was made from.
_Placed = tuple[OrderKey, Job]
_first = operator.itemgetter(0)


def _running_end(job: Job) -> float:
    """When a running job gives its GPUs back: start plus time limit (inf if unlimited)."""
    if job.time_limit_s is None:
        return INFINITY
    if job.start_time is not None:
        return job.start_time + job.time_limit_s
    return job.end_time if job.end_time is not None else INFINITY


@dataclass
class Layout:
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
    #: The usable nodes by weight, then name, and each one's place in that order (see
    #: :meth:`entry`).
    ranked: list[str] = field(default_factory=list)
    rank: dict[str, int] = field(default_factory=dict)
    #: The free-GPU indexes of a pool (see :class:`~slurmopt.policy.planner.Pool`) as a pass
    #: starts; buckets are kept sorted (a sorted list is a heap).  ``free`` and ``entries``:
    #: what each node counts as.
    count_ge: dict[str, list[int]] = field(default_factory=dict)
    histogram: Counter[int] = field(default_factory=Counter)
    buckets: dict[int, list[int]] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    entries: dict[str, int] = field(default_factory=dict)

    def entry(self, node: Node, free: int) -> int:
        """The node's place in the best-fit order of the nodes with ``free`` free GPUs.

        Partly used nodes first, then weight, then name.  One small integer
        (the node's rank, after every rank when its GPUs are all free) orders
        as that triple does, so heaps of thousands of nodes compare integers
        instead of tuples; :meth:`name_of` reads the node back.
        """
        rank = self.rank[node.name]
        return rank + len(self.ranked) if free >= node.gpus_total else rank

    def name_of(self, entry: int) -> str:
        """The node an :meth:`entry` stands for."""
        return self.ranked[entry % len(self.ranked)]

    #: ``ready[g][group]``: the group's nodes with at least ``g`` GPUs that ever have ``g`` free,
    #: each with when it keeps them free for good as a pass starts (``-inf``: from now), sorted;
    #: made on first use, dropped when a node of the group changes.
    ready: dict[int, dict[str, list[tuple[float, str]]]] = field(default_factory=dict)

    def count(self, name: str, leaf: str | None, node: Node, free: int) -> None:
        """Move one usable node to ``free`` free GPUs in the pass-start indexes."""
        for groups in self.ready.values():
            groups.pop(name if leaf is None else leaf, None)
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
            del bucket[bisect.bisect_left(bucket, self.entries.pop(name))]
            if not bucket:
                del self.buckets[old]
        self.free[name] = free
        if free > 0:
            self.histogram[free] += 1
            entry = self.entries[name] = self.entry(node, free)
            bisect.insort(self.buckets.setdefault(free, []), entry)


def _spliced(ranked: list[_Placed], gone: list[_Placed], added: list[_Placed]) -> list[_Placed]:
    """``ranked`` without ``gone`` and with ``added`` (sorted) merged in, in order.

    Order keys are unique, so each entry's place is found by bisection and
    the runs between the few changed places are copied whole: a queue that
    barely changed between passes is not filtered and sorted item by item.
    """
    cuts = sorted(bisect.bisect_left(ranked, (e[0],)) for e in gone)
    kept: list[_Placed] = []
    start = 0
    for cut in cuts:
        kept += ranked[start:cut]
        start = cut + 1
    kept += ranked[start:]
    merged: list[_Placed] = []
    start = 0
    for entry in added:
        cut = bisect.bisect_left(kept, (entry[0],), start)
        merged += kept[start:cut]
        merged.append(entry)
        start = cut
    merged += kept[start:]
    return merged


def _at_least(counts: list[int]) -> list[int]:
    """Turn "how many have exactly g" into "how many have at least g", in place."""
    for g in range(len(counts) - 2, -1, -1):
        counts[g] += counts[g + 1]
    return counts


class PlannerCache:
    """What consecutive :func:`plan` passes share, so a pass redoes only what changed.

    Everything held is derived from the passes' own inputs: leaf
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
        #: Passes since the last check against a pass without the cache, and the checks failed.
        self.unchecked = 0
        self.mismatches = 0

    def clear(self) -> None:
        """Drop everything kept (back to EMPTY); the next pass builds it all again."""
        self._reset(None)

    def check_due(self, every: int) -> bool:
        """Count one pass; True when it is the ``every``-th since the last check (0: never)."""
        self.unchecked += 1
        if not every or self.unchecked < every:
            return False
        self.unchecked = 0
        return True

    def _reset(self, fabric: Fabric | None) -> None:
        self._fabric = fabric
        self.leaf_of: dict[str, str | None] = {}
        self._nodes: dict[str, Node] = {}
        self._node_sig: dict[str, tuple[int, bool, int]] = {}
        self._available_by_state: dict[tuple[str, frozenset[str]], bool] = {}
        #: Bumped whenever a node comes, goes, or changes its GPU count or service state.
        self._epoch = 0
        self._layouts: dict[str, Layout] = {}
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
        #: The last pass's jobs (as given), priorities and their planning order.
        self._order: tuple[list[Job], dict[int, int], list[Job]] | None = None
        #: The last planning order's entries, by job id and in order.
        self._placed: dict[int, _Placed] = {}
        self._ranked: list[_Placed] = []

    # -- refresh -----------------------------------------------------------------------------
    def refresh(self, snapshot: ClusterSnapshot, fabric: Fabric) -> None:
        """Bring everything up to date with ``snapshot`` on ``fabric``."""
        if fabric is not self._fabric:
            self._reset(fabric)
        try:
            self._refresh_nodes(snapshot.nodes)
            self._refresh_jobs(snapshot.jobs)
            for name in self._settle_order():
                self._settle_node(name)
            self._dirty.clear()
        except BaseException:
            self._reset(None)
            raise

    def _settle_order(self) -> list[str] | set[str]:
        """The nodes to settle; when they are many, in the snapshot's order.

        Nodes listed together were made together and lie together in memory,
        which a set's order scatters (a fifth slower over a whole snapshot).
        """
        dirty, nodes = self._dirty, self._nodes
        if len(dirty) * 4 < len(nodes):
            return dirty
        ordered = [name for name in nodes if name in dirty]
        if len(ordered) < len(dirty):  # nodes gone from the snapshot
            ordered += [name for name in dirty if name not in nodes]
        return ordered

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
            # The weight too: the layouts' best-fit ranks (Layout.entry) are made from it.
            signature = (node.gpus_total, self._available(node), node.weight)
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
        if not seen:  # a first pass: every job is new (a snapshot's whole queue, one by one)
            for job_id, job in jobs.items():
                self._add_job(job_id, job)
            return
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
        state = job.state
        active = False
        if state is JobState.PENDING:
            self._pending[job_id] = job
        elif state in ACTIVE_JOB_STATES:
            active = True
        else:
            return  # neither waiting nor holding nodes: not in the queue's sizes, holds nothing
        shape = queue_shape(job)
        if shape is not None:
            self._shape_of[job_id] = shape
            self._shape_counts[shape] += 1
            self._shapes = None
        if active:
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
        by_job = self._holds.get(name)
        if by_job:
            for holds in by_job.values():
                for end, gpus, whole in holds:
                    if whole:
                        exclusive = True
                        gpus = total
                    releases.append((end, gpus))
        available = self._node_sig[name][1]  # _available(node), as _refresh_nodes recorded it
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

    def planning_order(self, jobs: list[Job], priorities: Mapping[int, int]) -> list[Job]:
        """``priority_order(jobs, priorities, preemptible_last=True)``, kept between passes.

        Sorting the whole queue is a good part of a pass that plans few jobs;
        when the same job objects come in the same order with the same
        priorities, the last order is given again.  Otherwise only the jobs
        that are new, changed or of another priority are sorted, and merged
        into the last order of the others (the keys are unique, so the merge
        is the full sort).
        """
        known = self._order
        if (
            known is not None
            and len(known[0]) == len(jobs)
            and all(map(operator.is_, known[0], jobs))
            and known[1] == priorities
        ):
            return list(known[2])
        placed = self._placed
        fresh: dict[int, _Placed] = {}
        added: list[_Placed] = []
        replaced: list[_Placed] = []
        for job in jobs:
            priority = priorities.get(job.job_id, job.priority)
            entry = placed.get(job.job_id)
            if entry is None or entry[1] is not job or entry[0][1] != -priority:
                if entry is not None:
                    replaced.append(entry)
                entry = (order_key(job, priority, True), job)
                added.append(entry)
            fresh[job.job_id] = entry
        added.sort(key=_first)
        ranked = self._ranked
        gone_count = len(ranked) - (len(jobs) - len(added))
        if (gone_count + len(added)) * 16 <= len(ranked):
            gone = replaced + [placed[i] for i in placed.keys() - fresh.keys()]
            merged = _spliced(ranked, gone, added)
        else:
            merged = [e for e in ranked if fresh.get(e[1].job_id) is e]
            if merged:
                merged += added
                merged.sort(key=_first)  # two sorted runs: one merge
            else:
                merged = added  # a first pass: every job is new
        self._placed, self._ranked = fresh, merged
        order = [job for _, job in merged]
        self._order = (jobs, dict(priorities), order)
        return list(order)

    def queue_shapes(self) -> tuple[JobShape, ...]:
        """The queue's job-size distribution, as ``queue_distribution`` gives it."""
        if self._shapes is None:
            self._shapes = tuple(
                JobShape(n, d, float(c)) for (n, d), c in sorted(self._shape_counts.items())
            )
        return self._shapes

    def ready_times(
        self, layout: Layout, group: str, members: list[str], gpus: int, now: float
    ) -> list[tuple[float, str]]:
        """When each node of ``group`` keeps ``gpus`` free for good as a pass at ``now`` starts.

        What :meth:`Timeline.available_from` answers on the pass's fresh
        timeline, as ``(time, node)`` sorted, nodes that never do left out;
        kept in the layout between passes.  Release times are kept unclipped,
        so a node's answer is ``max(raw, now)``: only the nodes ready by
        ``now`` are put in order again.
        """
        groups = layout.ready.setdefault(gpus, {})
        raw = groups.get(group)
        if raw is None:
            raw = groups[group] = self._raw_ready(members, gpus)
        cut = bisect.bisect_right(raw, (now, "\uffff"))
        if not cut:
            return raw
        return sorted((now, name) for _, name in raw[:cut]) + raw[cut:]

    def _raw_ready(self, members: list[str], gpus: int) -> list[tuple[float, str]]:
        """Per node with ``gpus`` GPUs or more: the last release it needs to keep them free."""
        nodes, free, events = self._nodes, self._free, self._events
        out: list[tuple[float, str]] = []
        for name in members:
            if nodes[name].gpus_total < gpus:
                continue
            changes = events.get(name, ())
            level = free[name] + sum(d for _, d in changes)
            if level < gpus:
                continue
            at = -INFINITY
            for t, delta in reversed(changes):
                level -= delta
                if level < gpus:
                    at = t
                    break
            out.append((at, name))
        out.sort()
        return out

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

    def layout(self, partition: Partition) -> Layout:
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
        for counts in leaf_capable.values():
            _at_least(counts)
        avail_groups = {**leaf_nodes}
        for name, leaf in usable:
            if leaf is None:
                avail_groups[name] = [name]
        layout = self._layouts[partition.name] = Layout(
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
        layout.ranked = sorted((name for name, _ in usable), key=lambda n: (nodes[n].weight, n))
        layout.rank = {name: i for i, name in enumerate(layout.ranked)}
        layout.count_ge = {leaf: [0] * (max_gpus + 2) for leaf in leaf_nodes}
        free = self._free
        for name, leaf in usable:
            f = free[name]
            layout.free[name] = f
            if leaf is not None:
                layout.count_ge[leaf][f] += 1
            if f > 0:
                layout.histogram[f] += 1
                entry = layout.entries[name] = layout.entry(nodes[name], f)
                layout.buckets.setdefault(f, []).append(entry)
        for counts in layout.count_ge.values():
            _at_least(counts)
        for bucket in layout.buckets.values():
            bucket.sort()
        return layout
