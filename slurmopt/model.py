"""The cluster as slurmopt sees it: immutable snapshots of Slurm's nodes, jobs and partitions.

Every adapter (command line, REST, pyslurm, the simulator) produces these
types, and every policy function reads only these types.  They hold no
handles to Slurm, so a snapshot can be stored, replayed or compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from types import MappingProxyType


def _reduce(obj: Job | ClusterSnapshot) -> tuple[type, tuple[object, ...]]:
    """Pickle a value whose read-only mappings (``MappingProxyType``) cannot be pickled:
    rebuild it from its fields, the mappings as dicts (``__post_init__`` wraps them again)."""
    args = tuple(
        dict(v) if isinstance(v, MappingProxyType) else v
        for v in (getattr(obj, f.name) for f in fields(obj))
    )
    return type(obj), args


class NodeState(StrEnum):
    """Slurm's base node state (the part before any ``+FLAG``)."""

    IDLE = "IDLE"
    MIXED = "MIXED"
    ALLOCATED = "ALLOCATED"
    DOWN = "DOWN"
    ERROR = "ERROR"
    FUTURE = "FUTURE"
    UNKNOWN = "UNKNOWN"


#: Node flags that take a node out of service for new work.  A node with any
#: of these never counts as free, whatever its GPU counters say.
UNAVAILABLE_FLAGS = frozenset(
    {
        "DRAIN",
        "DRAINING",
        "DRAINED",
        "NOT_RESPONDING",
        "MAINTENANCE",
        "MAINT",
        "RESERVED",
        "FAIL",
        "FAILING",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWER_DOWN",
        "POWERING_UP",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "INVALID_REG",
        "INVALID",
    }
)

#: Base states in which a node can run new work (given no unavailable flag).
SERVICE_STATES = frozenset({NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED})


class JobState(StrEnum):
    """Slurm's job state (base state only; flags such as REQUEUED are dropped)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    CONFIGURING = "CONFIGURING"
    UNKNOWN = "UNKNOWN"


#: The largest Slurm job id: ids are 32-bit, and 0xfffffffe and 0xffffffff mean NO_VAL and
#: INFINITE; a larger id can name no job (and overflows a database's integer column).
MAX_JOB_ID = 0xFFFFFFFD

#: Job states whose job still holds nodes and GPUs.
ACTIVE_JOB_STATES = frozenset(
    {JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING, JobState.CONFIGURING}
)


@dataclass(frozen=True, slots=True)
class Node:
    """One compute node.

    ``gpus_alloc`` comes from Slurm's own counters (``gres_used``); the
    indices in ``alloc_gpu_indices`` come from the jobs' per-node GRES detail
    and are ``None`` where the source cannot tell them.  ``reason_time`` is
    when Slurm last set ``reason`` (epoch seconds, stamped by slurmctld in
    whole seconds; ``None`` where the source does not say), which orders
    drains cluster-wide without trusting any compute node's clock.
    """

    name: str
    state: NodeState
    flags: frozenset[str] = frozenset()
    partitions: tuple[str, ...] = ()
    features: frozenset[str] = frozenset()
    weight: int = 1
    gpus_total: int = 0
    gpus_alloc: int = 0
    gpu_type: str | None = None
    alloc_gpu_indices: frozenset[int] | None = None
    cpus: int = 0
    alloc_cpus: int = 0
    reason: str = ""
    reason_time: float | None = None

    @property
    def gpus_free(self) -> int:
        """GPUs Slurm has not allocated (not a statement that they are usable)."""
        return max(0, self.gpus_total - self.gpus_alloc)

    @property
    def unavailable_reason(self) -> str | None:
        """Why the node cannot take new work, or None if it can."""
        bad = sorted(self.flags & UNAVAILABLE_FLAGS)
        if self.state not in SERVICE_STATES:
            return self.state.value if not bad else f"{self.state.value}+{'+'.join(bad)}"
        if bad:
            return "+".join(bad)
        return None

    @property
    def available(self) -> bool:
        """True when Slurm could start new work on this node."""
        return self.unavailable_reason is None


@dataclass(frozen=True, slots=True)
class Job:
    """One Slurm job (one array task for job arrays).

    Times are epoch seconds; ``None`` means unset.  ``time_limit_s`` of
    ``None`` means unlimited.  ``gpus_per_node`` is what the job asked for
    per node (for pending jobs) or holds per node (for running ones).
    ``begin_time`` is the earliest start Slurm allows (``--begin``);
    ``het_job_id`` is set for components of a heterogeneous job;
    ``reservation`` names the Slurm reservation the job must run in;
    ``segment_size`` is Slurm's ``--segment`` (topology/block: nodes in groups
    of that many, each group inside one block), None when unset.
    """

    job_id: int
    state: JobState
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    qos: str = ""
    priority: int = 0
    reason: str = ""
    held: bool = False
    requeue: bool = False
    array_job_id: int | None = None
    array_task_id: int | None = None
    nodes: tuple[str, ...] = ()
    node_count: int = 0
    gpus_per_node: int = 0
    gpu_type: str | None = None
    gpu_indices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    time_limit_s: int | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    comment: str = ""
    admin_comment: str = ""
    features: str = ""
    excluded_nodes: tuple[str, ...] = ()
    required_nodes: tuple[str, ...] = ()
    dependency: str = ""
    exclusive: bool = False
    restarts: int = 0
    begin_time: float | None = None
    het_job_id: int | None = None
    reservation: str = ""
    segment_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_indices", MappingProxyType(dict(self.gpu_indices)))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return _reduce(self)

    @property
    def is_active(self) -> bool:
        """The job holds nodes now (running, suspended, completing)."""
        return self.state in ACTIVE_JOB_STATES

    @property
    def is_pending(self) -> bool:
        return self.state is JobState.PENDING

    @property
    def gpus(self) -> int:
        """Total GPUs: held ones for active jobs, asked-for ones otherwise."""
        if self.is_active and self.gpu_indices:
            return sum(len(v) for v in self.gpu_indices.values())
        return self.gpus_per_node * max(self.node_count, 1 if self.gpus_per_node else 0)


@dataclass(frozen=True, slots=True)
class Partition:
    """A Slurm partition: the nodes it spans and the limits slurmopt honours."""

    name: str
    nodes: tuple[str, ...] = ()
    state: str = "UP"
    default: bool = False
    max_time_s: int | None = None
    max_nodes: int | None = None


@dataclass(frozen=True)
class ClusterSnapshot:
    """Slurm's nodes, jobs and partitions at one instant.

    Complete by construction: an adapter that cannot read every part raises
    instead of returning a partial snapshot.  The mappings are read-only.
    """

    taken_at: float
    nodes: Mapping[str, Node]
    jobs: Mapping[int, Job]
    partitions: Mapping[str, Partition]
    slurm_version: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("nodes", "jobs", "partitions"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return _reduce(self)

    @classmethod
    def build(
        cls,
        taken_at: float,
        nodes: Iterable[Node],
        jobs: Iterable[Job],
        partitions: Iterable[Partition],
        slurm_version: str = "",
        source: str = "",
    ) -> ClusterSnapshot:
        """Index lists of nodes, jobs and partitions by their names and ids."""
        return cls(
            taken_at=taken_at,
            nodes={n.name: n for n in nodes},
            jobs={j.job_id: j for j in jobs},
            partitions={p.name: p for p in partitions},
            slurm_version=slurm_version,
            source=source,
        )

    def with_started(
        self, starts: Iterable[tuple[int, Sequence[str]]], at: float
    ) -> ClusterSnapshot:
        """The snapshot once each pending job of ``starts`` runs on its nodes from ``at``.

        What a planner must see of starts Slurm has not shown yet: the
        daemon's pins in flight, and a plan's own starts when that plan then
        looks for a preemption.  Each job holds its GPUs on each node (the
        whole node when exclusive); a job not pending here, or a node not
        known, is left out.
        """
        nodes = dict(self.nodes)
        jobs = dict(self.jobs)
        changed = False
        for job_id, names in starts:
            job = jobs.get(job_id)
            if job is None or not job.is_pending:
                continue
            changed = True
            held = tuple(n for n in names if n in nodes)
            jobs[job_id] = replace(
                job, state=JobState.RUNNING, nodes=held, node_count=len(held), start_time=at
            )
            for name in held:
                node = nodes[name]
                gpus = node.gpus_total if job.exclusive else job.gpus_per_node
                nodes[name] = replace(node, gpus_alloc=min(node.gpus_total, node.gpus_alloc + gpus))
        return replace(self, nodes=nodes, jobs=jobs) if changed else self

    def active_jobs(self) -> list[Job]:
        """Jobs that hold nodes now."""
        return [j for j in self.jobs.values() if j.is_active]

    def pending_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.is_pending]

    def partition_nodes(self, partition: str) -> list[Node]:
        """Nodes of one partition, in Slurm's node order."""
        part = self.partitions.get(partition)
        if part is None:
            return []
        return [self.nodes[n] for n in part.nodes if n in self.nodes]
