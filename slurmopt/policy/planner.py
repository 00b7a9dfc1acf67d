"""One planning pass: its state, the bookkeeping every placement shares, and the walk over jobs.

:class:`PlannerCore` holds what a pass changes as it goes (the timeline,
each partition's :class:`Pool` indexes, the decisions so far) and the steps
every kind of placement needs: taking GPUs now, reserving them later,
testing one node.  It walks the jobs in order and, for each, hands one
:class:`Ask` to the placement concerns, which live in their own modules
(``single``, ``gang``, ``reserve``, ``elastic``) as mixins over this class,
so each rule can be read without the others; ``plan`` composes them.
"""

from __future__ import annotations

import bisect
import heapq
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, Node, Partition
from slurmopt.policy.backfill import INFINITY
from slurmopt.policy.cache import Layout, PlannerCache
from slurmopt.policy.decisions import Action, Plan, Reason, Reservation, Start, Unplaced
from slurmopt.policy.domains import required_domain
from slurmopt.policy.fragmentation import JobShape
from slurmopt.policy.knobs import Policy
from slurmopt.policy.ordering import not_eligible
from slurmopt.policy.placement import Constraint, parse_constraint
from slurmopt.tag import domain_ask

_UP_PARTITION_STATES = frozenset({"UP", ""})


@dataclass
class Pool:
    """One partition's usable nodes with the indexes placement reads.

    ``count_ge[leaf][g]``: nodes of the leaf with at least ``g`` free GPUs;
    ``histogram``: nodes per free-GPU count (free > 0);
    ``buckets[f]``: heap of nodes with ``f`` free, best-fit order first (the layout's
    :meth:`~slurmopt.policy.cache.Layout.entry` of each);
    ``ends[f]``: the nodes with ``f`` free that have a last end
    (:meth:`PlannerCore._last_end`), sorted by it (built when end alignment
    first reads it, then kept up to date).
    The layout's lists are shared with later passes and never changed.
    """

    partition: Partition
    layout: Layout
    count_ge: dict[str, list[int]]
    histogram: Counter[int]
    buckets: dict[int, list[int]]
    avail_cache: dict[int, dict[str, tuple[int, list[tuple[float, str]]]]] = field(
        default_factory=dict
    )
    #: ``avail_views[(gpus, by_leaf)]``: every group's ready list for jobs without node
    #: constraints (empty ones too, in group order), and how far into the pass's change log
    #: (:attr:`PlannerCore.changed`) it is up to date.
    avail_views: dict[tuple[int, bool], tuple[int, dict[str, list[tuple[float, str]]]]] = field(
        default_factory=dict
    )
    ends: dict[int, list[tuple[float, str]]] | None = None

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
class Failure:
    """Why a job cannot start (or be placed) now: the reason and detail it is left with."""

    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True)
class Ask:
    """One job asked of one pool: what every placement step reads about the request.

    ``end`` is when the job would give its nodes back if it started now.
    """

    job: Job
    pool: Pool
    constraint: Constraint
    end: float

    @property
    def k(self) -> int:
        """Nodes the job needs (at least one)."""
        return max(self.job.node_count, 1)


class PlannerCore(ABC):
    """A pass's state and shared steps; the placement concerns are mixed in by ``plan``."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        fabric: Fabric,
        policy: Policy,
        now: float,
        jobs: list[Job],
        cache: PlannerCache,
        deadline: tuple[Callable[[], float], float] | None = None,
    ) -> None:
        self.snapshot = snapshot
        #: ``(clock, time)``: the pass plans no further job once ``clock()`` reaches ``time``.
        self.deadline = deadline
        self.fabric = fabric
        #: topology/block: every multi-node job stays inside one block (:meth:`_segment`); the
        #: nodes of its largest block (0 on other fabrics).
        self._largest_block = (
            max(map(len, fabric.domains().values()), default=0)
            if "block_sizes" in fabric.graph.graph
            else 0
        )
        self.policy = policy
        self.now = now
        self.jobs = jobs
        self.cache = cache
        self.timeline = cache.timeline(now)
        # The timeline's own containers (changed in place, never replaced), read in hot loops.
        self._reserved_nodes = self.timeline.reserved
        self._events = self.timeline.events
        self.pools: dict[str, Pool | None] = {}
        self.pool_list: list[Pool] = []
        #: Nodes this pass has taken GPUs from.
        self.taken: set[str] = set()
        self.pools_for_request: dict[tuple[Any, ...], tuple[list[Pool], Failure | None]] = {}
        self.leaf_of = cache.leaf_of
        #: The fabric's leaves grouped tier by tier, which gang placement reads.
        self.tiers = fabric.tiers()
        self.reserved_in_leaf: dict[str, int] = {}
        #: NVLink domains some of whose GPUs are in use (built on first use; see _breaks_domain).
        self.broken_domains: set[str] | None = None
        self.reserved_by: dict[str, list[int]] = {}
        #: Bumped when a leaf's (or off-leaf node's) free GPUs or reservations change.
        self.versions: dict[str, int] = {}
        #: The leaves (or off-leaf nodes) bumped, in order, one entry per change.
        self.changed: list[str] = []
        self.failures: dict[tuple[Any, ...], Failure] = {}
        #: Requests (``_request_key``) that can neither start nor be reserved for the rest of
        #: the pass, with the failure every job asking them is left with.
        self.settled: dict[tuple[Any, ...], Failure] = {}
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

    def _pool(self, name: str) -> Pool | None:
        if name in self.pools:
            return self.pools[name]
        part = self.snapshot.partitions.get(name)
        if part is None:
            self.pools[name] = None
            return None
        layout = self.cache.layout(part)
        pool = Pool(
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
        self.changed.append(key)

    def _take_now(self, name: str, gpus: int, end: float) -> None:
        self._bump(name)
        old = self.timeline.free[name]
        indexed = self._unindex_end(name)
        self.timeline.occupy(name, gpus, end)
        new = self.timeline.free[name]
        self.taken.add(name)
        if self.broken_domains is not None:
            domain = self.fabric.domain_of(name)
            if domain is not None:
                self.broken_domains.add(domain)
        for pool in self.pool_list:
            if name in pool.layout.members:
                self._shift(pool, name, old, new)
        self._index_end(name, indexed)

    def _shift(self, pool: Pool, name: str, old: int, new: int) -> None:
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
            entry = pool.layout.entry(self.snapshot.nodes[name], new)
            heapq.heappush(pool.buckets.setdefault(new, []), entry)

    def _reserve(self, job_id: int, name: str, gpus: int, start: float, end: float) -> None:
        self._bump(name)
        if name not in self.timeline.reserved:
            leaf = self._leaf(name)
            if leaf is not None:
                self.reserved_in_leaf[leaf] = self.reserved_in_leaf.get(leaf, 0) + 1
        indexed = self._unindex_end(name)
        self.timeline.reserve(name, gpus, start, end)
        self.reserved_by.setdefault(name, []).append(job_id)
        self._index_end(name, indexed)

    # -- the end-time index (single.py's end alignment reads it) -----------------------------
    def _last_end(self, name: str) -> float | None:
        """When the node's last job ends, as end alignment compares it; None when idle.

        A node with a reservation counts its running jobs only; others count
        this pass's starts too.
        """
        if name in self._reserved_nodes:
            events = self.cache.running_releases(name)
        else:
            events = self._events.get(name, [])
        return events[-1][0] if events else None

    def _end_entry(self, name: str) -> tuple[int, tuple[float, str]] | None:
        """The node's free GPUs and end-index entry; None when it has no place in the index."""
        free = self.timeline.free[name]
        last = self._last_end(name)
        return (free, (last, name)) if free > 0 and last is not None else None

    def _unindex_end(self, name: str) -> list[Pool]:
        """Take the node out of every built end index; the pools it was in."""
        indexed = [p for p in self.pool_list if p.ends is not None and name in p.layout.members]
        entry = self._end_entry(name) if indexed else None
        if entry is not None:
            for pool in indexed:
                assert pool.ends is not None
                bucket = pool.ends[entry[0]]
                del bucket[bisect.bisect_left(bucket, entry[1])]
        return indexed

    def _index_end(self, name: str, pools: list[Pool]) -> None:
        """Put the node back, under its free GPUs and last end now, into ``pools``' end indexes."""
        entry = self._end_entry(name) if pools else None
        if entry is not None:
            for pool in pools:
                assert pool.ends is not None
                bisect.insort(pool.ends.setdefault(entry[0], []), entry[1])

    # -- NVLink domains ----------------------------------------------------------------------
    def _breaks_domain(self, name: str) -> bool:
        """Taking the node would break a whole free NVLink domain (never, on a fabric with none).

        Other jobs take from domains already in use first, so whole domains
        stay free for the jobs that ask for one.
        """
        domain = self.fabric.domain_of(name)
        if domain is None:
            return False
        if self.broken_domains is None:
            free, nodes = self.timeline.free, self.snapshot.nodes
            self.broken_domains = {
                d
                for d, members in self.fabric.domains().items()
                if any(m not in nodes or free.get(m, 0) < nodes[m].gpus_total for m in members)
            }
        return domain not in self.broken_domains

    def _segment(self, job: Job) -> int | None:
        """Nodes per group that must share one NVLink domain; None when the job asks none.

        The job's own tag (``domain``: all its nodes; ``domain=S``) or
        Slurm's ``--segment``; the whole-job ask is the stricter and wins.  On a
        topology/block fabric every multi-node job asks one block: Slurm's
        ``eval_nodes_block`` places a job without ``--segment`` inside one
        block, and leaves nodes pinned across two pending for ever.
        """
        asked = domain_ask(job.admin_comment) if job.admin_comment else None
        if asked == 0:
            return max(job.node_count, 1)
        segment = job.segment_size or asked
        if segment is None and self._largest_block and job.node_count > 1:
            return job.node_count
        return segment

    def _beyond_one_block(self, job: Job) -> str | None:
        """Why a job is left to Slurm on a topology/block fabric: more nodes than a block has.

        Slurm places such a job on aggregated blocks (``BlockSizes``), which
        the planner does not model; pinning it elsewhere would strand it.
        """
        largest = self._largest_block
        if not largest or job.segment_size or job.node_count <= largest:
            return None
        return (
            f"{job.node_count} nodes are more than one topology/block block holds ({largest}); "
            "Slurm places it over aggregated blocks (BlockSizes); left to Slurm"
        )

    def _required_domain(self, job: Job, k: int, segment: int) -> tuple[str | None, str | None]:
        """The domain a node-pinned, domain-asking job's other nodes come from, or why none can
        (:func:`~slurmopt.policy.domains.required_domain` on this fabric)."""
        fabric = self.fabric
        return required_domain(
            list(job.required_nodes), k, segment, len(fabric.domains()), fabric.domain_of
        )

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

    def _fits_now(self, ask: Ask, node: Node, respect: bool) -> bool:
        """Whether the job may take the node now (``respect``: without delaying a reservation)."""
        job = ask.job
        need = self._need(job, node)
        if not self._static_ok(job, node, ask.constraint, job.gpus_per_node):
            return False
        if job.exclusive and (node.alloc_cpus > 0 or self.timeline.free[node.name] < need):
            return False
        if respect:
            return self.timeline.fits_now(node.name, need, ask.end)
        return self.timeline.free[node.name] >= need

    # -- one job -----------------------------------------------------------------------------
    def run(self) -> Plan:
        """Plan the jobs in order, up to the policy's budgets; the rest are ``NOT_PLANNED``.

        The cut keeps the head of the queue planned in full: a job past it
        never starts on a pass that stopped before its turn, since it could
        take what an unmade reservation of a job above it needs.  The clock
        is read before each job but the first, so every pass plans the head.
        """
        budget = self.policy.plan_budget
        depth = min(budget, len(self.jobs)) if budget else len(self.jobs)
        detail = f"past this pass's budget of {budget} jobs (plan_budget)"
        if self.deadline is None:
            for job in self.jobs[:depth]:
                self._plan_job(job)
        else:
            clock, stop_at = self.deadline
            for i, job in enumerate(self.jobs[:depth]):
                if i and clock() >= stop_at:
                    depth = i
                    seconds = self.policy.plan_seconds
                    detail = f"past this pass's budget of {seconds:g} s (plan_seconds)"
                    break
                self._plan_job(job)
        if depth < len(self.jobs):
            detail += "; planned in a later pass"
            for job in self.jobs[depth:]:
                self._unplaced(job, Reason.NOT_PLANNED, detail)
        return Plan(
            tuple(self.actions),
            tuple(self.reservations),
            tuple(self.unplaced),
            self.now,
            depth=depth,
            complete=depth == len(self.jobs),
        )

    def _unplaced(self, job: Job, reason: Reason, detail: str, at: float | None = None) -> None:
        self.unplaced.append(Unplaced(job.job_id, reason, detail, at))

    def _plan_job(self, job: Job) -> None:
        if job.het_job_id is not None:
            self._unplaced(job, Reason.UNSUPPORTED_REQUEST, "heterogeneous job; left to Slurm")
            return
        if job.gpus_per_node <= 0:
            self._unplaced(job, Reason.UNSUPPORTED_REQUEST, "asks for no GPUs; left to Slurm")
            return
        why = not_eligible(job, self.now)
        if why is not None:
            self._unplaced(job, Reason.NOT_ELIGIBLE, why)
            return
        span = self._elastic_span(job)
        if span is not None and job.node_count != span[1]:
            job = replace(job, node_count=span[1])  # planned from MAX, even once set smaller
        request = None if span is not None else self._request_key(job)
        settled = self.settled.get(request) if request is not None else None
        if settled is not None:
            self._unplaced(job, settled.reason, settled.detail)
            return
        beyond = self._beyond_one_block(job)
        if beyond is not None:
            self._unplaced(job, Reason.UNSUPPORTED_REQUEST, beyond)
            return
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
        asks: list[Ask] = []
        failure: Failure | None = None
        for pool in pools:
            ask = Ask(job, pool, constraint, end)
            failure = self._try_start(ask)
            if failure is None:
                return
            asks.append(ask)
        assert failure is not None
        if span is not None and self._start_elastic(asks, span[0]):
            return
        if len(self.reservations) < self.policy.backfill_depth:
            if self._try_reserve(asks, failure):
                return
        elif request is not None:
            # No start (every pool's failure is cached) and no reservation (the depth is
            # reached) for good: a later job asking the same is answered from here.
            self.settled[request] = failure
        self._unplaced(job, failure.reason, failure.detail)

    @staticmethod
    def _request_key(job: Job) -> tuple[Any, ...]:
        """Everything a job's placement reads of the job, bar its id and priority."""
        return (
            job.partition,
            job.node_count,
            job.gpus_per_node,
            job.time_limit_s,
            job.features,
            job.gpu_type,
            job.excluded_nodes,
            job.required_nodes,
            job.exclusive,
            job.segment_size,
            domain_ask(job.admin_comment) if job.admin_comment else None,
        )

    def _end(self, job: Job, partition: Partition) -> float:
        limit = job.time_limit_s if job.time_limit_s is not None else partition.max_time_s
        return INFINITY if limit is None else self.now + limit

    def _pools_for(self, job: Job) -> tuple[list[Pool], Failure | None]:
        """The job's partitions that are managed, up, and big enough; else why none is.

        The answer depends only on the fields in the key, so one pass works
        it out once per kind of request.
        """
        key = (job.partition, job.node_count, job.gpus_per_node, job.time_limit_s)
        known = self.pools_for_request.get(key)
        if known is None:
            known = self.pools_for_request[key] = self._find_pools(job)
        return known

    def _find_pools(self, job: Job) -> tuple[list[Pool], Failure | None]:
        names = [p for p in (job.partition or self._default_partition()).split(",") if p]
        managed = self.policy.partitions
        pools: list[Pool] = []
        refusal: Failure | None = None
        k = max(job.node_count, 1)
        gpus = job.gpus_per_node
        for name in names:
            if managed is not None and name not in managed:
                refusal = refusal or Failure(Reason.NOT_ELIGIBLE, f"partition {name} not managed")
                continue
            pool = self._pool(name)
            if pool is None:
                refusal = Failure(Reason.NOT_ELIGIBLE, f"unknown partition {name}")
                continue
            part = pool.partition
            if part.state.upper() not in _UP_PARTITION_STATES:
                refusal = Failure(Reason.NOT_ELIGIBLE, f"partition {name} is {part.state}")
                continue
            limit = part.max_time_s
            if limit is not None and job.time_limit_s is not None and job.time_limit_s > limit:
                refusal = Failure(
                    Reason.NOT_ELIGIBLE,
                    f"time limit {job.time_limit_s} s over partition {name}'s {limit} s",
                )
                continue
            layout = pool.layout
            exists = layout.exists_ge[gpus] if gpus <= layout.max_gpus else 0
            if (part.max_nodes is not None and k > part.max_nodes) or k > exists:
                refusal = Failure(
                    Reason.TOO_BIG_FOR_PARTITION,
                    f"needs {k} nodes with {gpus} GPUs; partition {name} has {exists}"
                    + (f" and allows {part.max_nodes} per job" if part.max_nodes else ""),
                )
                continue
            capable = layout.capable_ge[gpus]
            if k > capable:
                refusal = Failure(
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

    def _single_leaf(self, pool: Pool, k: int, gpus: int) -> bool:
        return self.policy.require_single_leaf and k <= pool.leaf_capable_ge[gpus]

    def _cache_key(self, ask: Ask) -> tuple[Any, ...]:
        job = ask.job
        return (
            ask.pool.partition.name,
            max(job.node_count, 1),
            job.gpus_per_node,
            job.features,
            job.gpu_type,
            job.excluded_nodes,
            job.required_nodes,
            job.exclusive,
            ask.end,
            self._segment(job),
        )

    def _try_start(self, ask: Ask) -> Failure | None:
        """Start the job in this pool now if it fits without delaying a reservation."""
        job, pool = ask.job, ask.pool
        k = max(job.node_count, 1)
        gpus = job.gpus_per_node
        # Resources only shrink during a pass, so a request that failed fails again.
        key = self._cache_key(ask)
        cached = self.failures.get(key)
        if cached is not None:
            return cached
        fitting = sum(n for f, n in pool.histogram.items() if f >= gpus)
        if fitting < k:
            failure = Failure(
                Reason.WAITS_FOR_RESOURCES,
                f"needs {k} node(s) with {gpus} free GPUs; {fitting} in partition "
                f"{pool.partition.name}",
            )
            self.failures[key] = failure
            return failure
        if k == 1 and not job.required_nodes and self._segment(job) is None:
            result = self._start_single(ask)
        else:
            result = self._start_gang(ask)
        if isinstance(result, Failure):
            self.failures[key] = result
            return result
        return None

    def _start_reason(self, placed: Reason) -> Reason:
        return Reason.BACKFILL if self.reservations else placed

    def _commit_start(self, ask: Ask, chosen: Sequence[str], placed: Reason, detail: str) -> None:
        job = ask.job
        for name in chosen:
            self._take_now(name, self._need(job, self.snapshot.nodes[name]), ask.end)
        self.actions.append(Start(job.job_id, tuple(chosen), self._start_reason(placed), detail))

    # -- the placement concerns (single.py, gang.py, reserve.py, elastic.py) -----------------
    @abstractmethod
    def _start_single(self, ask: Ask) -> Failure | None:
        """Start a one-node job now on the node FGD (and end alignment) picks."""

    @abstractmethod
    def _start_gang(self, ask: Ask) -> Failure | None:
        """Start a multi-node (or node-pinned) job now where the gang placement cost is lowest."""

    @abstractmethod
    def _try_reserve(self, asks: Sequence[Ask], failure: Failure) -> bool:
        """Hold the earliest block of nodes that frees up for the job; False if none ever does."""

    @abstractmethod
    def _earliest_block(
        self, ask: Ask, one_leaf: bool | None = None
    ) -> tuple[float, list[str]] | None:
        """When and on which nodes the job could start first, by the timeline."""

    @abstractmethod
    def _elastic_span(self, job: Job) -> tuple[int, int] | None:
        """``(MIN, MAX)`` nodes of an elastic job the planner may start smaller; else None."""

    @abstractmethod
    def _start_elastic(self, asks: Sequence[Ask], low: int) -> bool:
        """Start an elastic job on fewer nodes now if that finishes before waiting for all."""
