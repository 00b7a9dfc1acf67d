"""The tables of slurmopt's store, and the state machine of a managed job.

Every time is a float of seconds since the Unix epoch (UTC), the same clock
the snapshots and plans use, so the simulator's virtual clock writes the
same columns as the daemon.  Enum columns hold the enum's value as a plain
string (no database enum type), so adding a state or a reason needs no
migration.  ``migrations/versions`` must match these classes; a unit test
compares them with alembic's ``compare_metadata``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from slurmopt.policy.plan import Reason

#: Constraint names fixed by convention, so migrations name them the same on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: Width of the string columns that hold enum values; room for values added later.
ENUM_LENGTH = 40


class ManagedJobState(StrEnum):
    """Where a managed job is in its life, as slurmopt records it.

    The states, and what Slurm shows for each:

    * ``waiting``: pending and held by slurmopt (priority 0); the planner
      decides when and where it starts.
    * ``pinned``: the plan chose nodes; slurmopt set the node list and
      released the hold, and Slurm is expected to start it there.
    * ``running``: Slurm runs it.
    * ``signalled``: chosen as a preemption victim and sent the checkpoint
      signal; slurmopt waits for the job to acknowledge.
    * ``checkpointed``: the job acknowledged a finished checkpoint; it is
      about to be requeued held.
    * ``done``, ``failed``, ``cancelled``: final; Slurm ended the job.

    The transitions (:data:`TRANSITIONS` is the table the code checks)::

        (new) --(held and tagged)--> waiting
        waiting --(plan: start)--> pinned --(Slurm starts it)--> running
        waiting --(Slurm started it without a plan, seen on reconcile)--> running
        pinned --(not started in time: re-planned)--> waiting
        running --(preemption chosen)--> signalled --(ack)--> checkpointed
        checkpointed --(requeued held)--> waiting
        signalled --(no ack by the deadline)--> running
        running --(requeued by Slurm: node failure, operator)--> waiting
        any state but a final one --> done | failed | cancelled

    A final state has no way out: a job id that Slurm hands out again is a
    new job (told apart by its submit time) and gets a new record.  A job
    may end from any live state because Slurm can cancel or fail a job at
    any time, and a short job can start and finish between two reads.
    """

    WAITING = "waiting"
    PINNED = "pinned"
    RUNNING = "running"
    SIGNALLED = "signalled"
    CHECKPOINTED = "checkpointed"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        """True for done, failed and cancelled: nothing follows."""
        return self in FINAL_STATES

    def can_become(self, to_state: ManagedJobState) -> bool:
        """Whether :data:`TRANSITIONS` allows going from this state to ``to_state``."""
        return to_state in TRANSITIONS[self]


#: States that end a managed job's record.
FINAL_STATES = frozenset({ManagedJobState.DONE, ManagedJobState.FAILED, ManagedJobState.CANCELLED})

_ENDS = FINAL_STATES

#: The allowed transitions: from each state, the states it may move to.
TRANSITIONS: dict[ManagedJobState, frozenset[ManagedJobState]] = {
    ManagedJobState.WAITING: frozenset({ManagedJobState.PINNED, ManagedJobState.RUNNING}) | _ENDS,
    ManagedJobState.PINNED: frozenset({ManagedJobState.RUNNING, ManagedJobState.WAITING}) | _ENDS,
    ManagedJobState.RUNNING: frozenset({ManagedJobState.SIGNALLED, ManagedJobState.WAITING})
    | _ENDS,
    ManagedJobState.SIGNALLED: frozenset({ManagedJobState.CHECKPOINTED, ManagedJobState.RUNNING})
    | _ENDS,
    ManagedJobState.CHECKPOINTED: frozenset({ManagedJobState.WAITING}) | _ENDS,
    ManagedJobState.DONE: frozenset(),
    ManagedJobState.FAILED: frozenset(),
    ManagedJobState.CANCELLED: frozenset(),
}


def _enum_column(enum: type[StrEnum], name: str) -> Enum:
    """A VARCHAR holding the enum's values, not its names, with no CHECK constraint."""
    return Enum(
        enum,
        name=name,
        native_enum=False,
        create_constraint=False,
        length=ENUM_LENGTH,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


STATE_TYPE = _enum_column(ManagedJobState, "managed_job_state")
REASON_TYPE = _enum_column(Reason, "plan_reason")


class Base(DeclarativeBase):
    """Declarative base; its metadata is what the migrations must reproduce."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {
        float: Double(),
        str: Text(),
        ManagedJobState: STATE_TYPE,
        Reason: REASON_TYPE,
    }


class ManagedJob(Base):
    """One Slurm job slurmopt manages: its current state and what the plan gave it.

    ``job_id`` is Slurm's; Slurm reuses ids (after ``MaxJobId`` wraps, or a
    controller that lost its state), so ``slurm_submit_time`` tells the
    incarnations apart.  ``priority_before_hold`` is the priority the job had
    before slurmopt held it (a held job shows 0), which the planner orders by.
    """

    __tablename__ = "managed_jobs"

    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    slurm_submit_time: Mapped[float]
    state: Mapped[ManagedJobState] = mapped_column(index=True)
    #: Planned nodes as a folded hostlist (``gpu[001-004]``); None when none are planned.
    nodes: Mapped[str | None]
    reason: Mapped[str] = mapped_column(String(ENUM_LENGTH), default="")
    detail: Mapped[str] = mapped_column(default="")
    expected_start: Mapped[float | None]
    priority_before_hold: Mapped[int | None] = mapped_column(BigInteger)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=False)
    elastic_min_nodes: Mapped[int | None] = mapped_column(Integer)
    elastic_max_nodes: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[float]
    updated_at: Mapped[float]


class JobTransition(Base):
    """One change of a managed job's state; rows are only ever added.

    ``key`` makes a repeated action harmless: a daemon that restarts and
    retries an action it had already recorded finds the key and writes
    nothing.  No foreign key to ``managed_jobs``: the log outlives a record
    that a reused job id replaces, and ``slurm_submit_time`` says which
    incarnation a row belongs to.
    """

    __tablename__ = "job_transitions"
    __table_args__ = (Index("ix_job_transitions_job", "job_id", "slurm_submit_time", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger)
    slurm_submit_time: Mapped[float]
    from_state: Mapped[ManagedJobState | None]
    to_state: Mapped[ManagedJobState]
    reason: Mapped[str] = mapped_column(String(ENUM_LENGTH))
    detail: Mapped[str] = mapped_column(default="")
    at: Mapped[float]
    key: Mapped[str] = mapped_column(String(255), unique=True)


class PlanRecord(Base):
    """One planning pass: when its snapshot was taken, how long it took, what it decided.

    Its lines are stored as changes: a job's lines are written when they
    differ from the previous plan's, so a plan's full content is, for each
    job, its newest rows at or before the plan (``gone``: not in it).
    """

    __tablename__ = "plans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: When the snapshot the plan was made from was taken.
    taken_at: Mapped[float] = mapped_column(index=True)
    #: The plan's own ``now`` (the simulator's clock may differ from ``taken_at``).
    planned_at: Mapped[float]
    duration_s: Mapped[float]
    starts: Mapped[int] = mapped_column(Integer)
    reservations: Mapped[int] = mapped_column(Integer)
    unplaced: Mapped[int] = mapped_column(Integer)
    schema_version: Mapped[int] = mapped_column(Integer)
    #: Decision rows written for this plan: only the jobs whose lines changed since the
    #: previous plan, and a ``gone`` row per job that left it (None: written before 0003).
    stored_lines: Mapped[int | None] = mapped_column(Integer)


class Decision(Base):
    """One line of a plan: a start, a reservation or an unplaced job, with its reason."""

    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_job_plan", "job_id", "plan_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    #: Indexed with ``plan_id`` (``ix_decisions_job_plan``): a job's newest rows are one seek.
    job_id: Mapped[int] = mapped_column(BigInteger)
    #: ``start``, ``reservation``, ``unplaced``, or ``gone``: the job left the plan
    #: (its reason is that of its last line).
    kind: Mapped[str] = mapped_column(String(ENUM_LENGTH))
    reason: Mapped[Reason]
    detail: Mapped[str] = mapped_column(default="")
    #: Folded hostlist of the nodes started on or reserved; None for an unplaced job.
    nodes: Mapped[str | None]
    #: Reservation start, or an unplaced job's expected start.
    start_time: Mapped[float | None]
    at: Mapped[float]


class FragmentationSample(Base):
    """The headline figures of one fragmentation report, for history and trends."""

    __tablename__ = "fragmentation_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(index=True)
    #: The partition measured; None for the whole cluster.
    partition: Mapped[str | None] = mapped_column(String(255))
    total_gpus: Mapped[int] = mapped_column(Integer)
    allocated_gpus: Mapped[int] = mapped_column(Integer)
    unavailable_gpus: Mapped[int] = mapped_column(Integer)
    free_gpus: Mapped[int] = mapped_column(Integer)
    stranded_gpus: Mapped[int] = mapped_column(Integer)
    fragmentation_index: Mapped[float]
    largest_job_nodes: Mapped[int] = mapped_column(Integer)
    largest_single_leaf_job_nodes: Mapped[int] = mapped_column(Integer)
    fgd_unusable_share: Mapped[float | None]


class Preemption(Base):
    """One victim of one preemption, from the signal to the outcome (one row per victim)."""

    __tablename__ = "preemptions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"))
    victim_job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    victim_submit_time: Mapped[float]
    #: The job the preemption makes room for.
    for_job_id: Mapped[int | None] = mapped_column(BigInteger)
    signal: Mapped[str] = mapped_column(String(ENUM_LENGTH))
    signalled_at: Mapped[float]
    ack_at: Mapped[float | None]
    checkpoint_step: Mapped[int | None] = mapped_column(BigInteger)
    #: ``checkpointed``, ``no_ack``, ``cancelled``, ...; None while in flight.
    outcome: Mapped[str | None] = mapped_column(String(ENUM_LENGTH))
    lost_gpu_seconds: Mapped[float | None]


class NodeHealth(Base):
    """One health observation of one node (NVML, DCGM or Slurm's own view)."""

    __tablename__ = "node_health"
    __table_args__ = (Index("ix_node_health_node_at", "node", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(255))
    at: Mapped[float]
    source: Mapped[str] = mapped_column(String(ENUM_LENGTH))
    status: Mapped[str] = mapped_column(String(ENUM_LENGTH))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    xid: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(default="")
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Lease(Base):
    """A named lease: only its holder may act until ``expires_at`` (one daemon at a time).

    ``token`` is the fencing token: it grows by one each time the lease
    passes to a new holder (or is taken again after it expired), so a
    holder that paused and lost the lease cannot act on its old token.
    """

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    acquired_at: Mapped[float]
    expires_at: Mapped[float]
    token: Mapped[int] = mapped_column(BigInteger, server_default="0")


class Heartbeat(Base):
    """The last sign of life of one named component (``daemon``), for liveness checks."""

    __tablename__ = "heartbeat"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    at: Mapped[float]
    detail: Mapped[str] = mapped_column(default="")


__all__ = [
    "FINAL_STATES",
    "TRANSITIONS",
    "Base",
    "Decision",
    "FragmentationSample",
    "Heartbeat",
    "JobTransition",
    "Lease",
    "ManagedJob",
    "ManagedJobState",
    "NodeHealth",
    "PlanRecord",
    "Preemption",
]
