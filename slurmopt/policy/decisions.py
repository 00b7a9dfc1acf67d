"""What a planning pass decides: the plan and its parts, as the daemon, store and CLI read them.

Kept apart from the pass itself so that readers of plans (actuator, store,
metrics, ``explain``) depend on these small frozen types alone, and the
stored JSON shape (``PLAN_SCHEMA_VERSION``) has one home.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

#: 2: plans carry ``preemptions``.
PLAN_SCHEMA_VERSION = 2


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
    NEEDS_NODES_IN_ONE_DOMAIN = "NEEDS_NODES_IN_ONE_DOMAIN"
    # never, as things stand
    TOO_BIG_FOR_PARTITION = "TOO_BIG_FOR_PARTITION"
    NODES_UNAVAILABLE = "NODES_UNAVAILABLE"
    NOT_ELIGIBLE = "NOT_ELIGIBLE"
    UNSUPPORTED_REQUEST = "UNSUPPORTED_REQUEST"
    # not looked at: past the pass's budget (``Policy.plan_budget`` or ``plan_seconds``),
    # planned in a later pass
    NOT_PLANNED = "NOT_PLANNED"


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


#: A start: what ``Plan.actions`` holds.  Preemptions are a list of their own
#: (:class:`PreemptionChoice`), since each stops several jobs for one.
Action = Start


class PreemptReason(StrEnum):
    """Why victims were chosen, or why none were."""

    PREEMPT_LEAST_LOST_WORK = "PREEMPT_LEAST_LOST_WORK"
    NO_PREEMPTIBLE_JOBS = "NO_PREEMPTIBLE_JOBS"
    NOT_ENOUGH_EVEN_IF_PREEMPTED = "NOT_ENOUGH_EVEN_IF_PREEMPTED"
    NOT_A_CANDIDATE = "NOT_A_CANDIDATE"


@dataclass(frozen=True, slots=True)
class Victim:
    """One running job to checkpoint and requeue, and the work it would lose."""

    job_id: int
    nodes: tuple[str, ...]
    gpus: int
    lost_gpu_seconds: float
    last_checkpoint_step: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "nodes": list(self.nodes),
            "gpus": self.gpus,
            "lost_gpu_seconds": self.lost_gpu_seconds,
            "last_checkpoint_step": self.last_checkpoint_step,
        }


@dataclass(frozen=True, slots=True)
class PreemptionChoice:
    """The victims for ``for_job_id`` (empty when none), with the reason and its detail.

    In a plan's ``preemptions``: stop these victims (signal, checkpoint,
    requeue) so that ``for_job_id`` can start on ``nodes`` once they are gone.
    """

    kind: ClassVar[str] = "preempt"
    for_job_id: int
    victims: tuple[Victim, ...]
    reason: PreemptReason
    detail: str = ""
    #: Where the planner would start the preemptor once the victims are gone.
    nodes: tuple[str, ...] = ()

    @property
    def lost_gpu_seconds(self) -> float:
        return sum(v.lost_gpu_seconds for v in self.victims)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "for_job_id": self.for_job_id,
            "victims": [v.to_json() for v in self.victims],
            "reason": self.reason.value,
            "detail": self.detail,
            "nodes": list(self.nodes),
        }


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
    #: At most one preemption (one in flight at a time), asked for by the request.
    preemptions: tuple[PreemptionChoice, ...] = ()
    #: How many of the managed jobs, in priority order, the pass planned (None: not counted,
    #: as in a plan made by hand); the rest are ``NOT_PLANNED``.
    depth: int | None = None
    #: False when the pass stopped at its budget (``Policy.plan_budget`` or
    #: ``plan_seconds``) before the last job.
    complete: bool = True

    def to_json(self) -> dict[str, Any]:
        out = {
            "schema_version": self.schema_version,
            "now": self.now,
            "actions": [a.to_json() for a in self.actions],
            "reservations": [r.to_json() for r in self.reservations],
            "unplaced": [u.to_json() for u in self.unplaced],
            "preemptions": [p.to_json() for p in self.preemptions],
        }
        if not self.complete:  # a whole pass reads as before: no key is added
            out["complete"] = False
            out["depth"] = self.depth
        return out
