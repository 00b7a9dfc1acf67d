"""Why a job waits, or where it was placed: the planner's stored decision beside Slurm's view.

Pure: :func:`explain_job` takes what the store holds about one job (the
newest plan that mentions it and its lines there, the newest plan overall,
the managed-job record), what Slurm shows now (or why Slurm could not be
read), a fabric if one is known, and the current time; it returns a frozen
:class:`Explanation`.  The ``slurmopt explain`` command does the reading;
keeping it out of here lets the tests feed real recorded plans without a
Slurm or a clock.  ``docs/explain.md`` describes the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurmopt.errors import FabricError, SlurmoptError
from slurmopt.fabric import Fabric
from slurmopt.hostlist import expand, fold
from slurmopt.model import Job
from slurmopt.policy.plan import Reason
from slurmopt.store.models import Decision, ManagedJob, PlanRecord

EXPLAIN_SCHEMA_VERSION = 1

#: What each planner reason means, in a few words, for people reading ``explain``.
REASON_MEANING: dict[Reason, str] = {
    Reason.GANG_FEWEST_LEAVES: "a multi-node job on the fewest leaf switches, fewest hops apart",
    Reason.BEST_FIT_NODE: "a one-node job on the node where it leaves the least fragmentation",
    Reason.ELASTIC_START: "an elastic job on fewer nodes than it asked for, finishing sooner so",
    Reason.BACKFILL: "started ahead of higher-priority jobs without delaying their reservations",
    Reason.RESERVED: "enough GPUs are free now, but they are held for higher-priority jobs",
    Reason.WAITS_FOR_RESERVATION: "has a backfill reservation and starts when its nodes free up",
    Reason.WAITS_FOR_RESOURCES: "not enough free GPUs where it may run",
    Reason.NEEDS_NODES_IN_ONE_LEAF: "fits under one leaf switch and waits for one to free up",
    Reason.NEEDS_NODES_IN_ONE_DOMAIN: "asks for one NVLink domain (or segments of one) and waits",
    Reason.TOO_BIG_FOR_PARTITION: "larger than its partition: it cannot start as things stand",
    Reason.NODES_UNAVAILABLE: "too many of the nodes it could use are out of service",
    Reason.NOT_ELIGIBLE: "Slurm itself would not start it now",
    Reason.UNSUPPORTED_REQUEST: "asks for something slurmopt does not plan; left to Slurm",
}


class JobNotExplained(SlurmoptError):
    """The store has no decision and no record for the job: the daemon never saw it."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class PlanInfo:
    """A stored planning pass: its id, its snapshot's time, its own time and how long it took."""

    id: int
    taken_at: float
    planned_at: float
    duration_s: float

    @classmethod
    def of(cls, record: PlanRecord) -> PlanInfo:
        return cls(record.id, record.taken_at, record.planned_at, record.duration_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "taken_at": self.taken_at,
            "planned_at": self.planned_at,
            "duration_s": self.duration_s,
        }


@dataclass(frozen=True, slots=True)
class FabricView:
    """Where a set of nodes sits on the fabric (:meth:`Fabric.span`) and which fabric says so."""

    leaves: tuple[str, ...]
    max_hops: int
    slowest_link_gbps: float | None
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "leaves": list(self.leaves),
            "num_leaves": len(self.leaves),
            "max_hops": self.max_hops,
            "slowest_link_gbps": self.slowest_link_gbps,
            "source": self.source,
        }

    def describe(self) -> str:
        leaves = f"{len(self.leaves)} leaf switch(es) ({', '.join(self.leaves)})"
        link = (
            ""
            if self.slowest_link_gbps is None
            else f", slowest link {self.slowest_link_gbps:g} Gb/s"
        )
        return f"{leaves}, at most {self.max_hops} hops apart{link} [{self.source or 'fabric'}]"


@dataclass(frozen=True, slots=True)
class Placed:
    """Nodes the plan gave the job: to start on now, or reserved from ``start_time``."""

    nodes: tuple[str, ...]
    reason: Reason
    detail: str
    start_time: float | None
    fabric: FabricView | None

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "hostlist": fold(self.nodes),
            "reason": self.reason.value,
            "meaning": REASON_MEANING.get(self.reason, ""),
            "detail": self.detail,
            "start_time": self.start_time,
            "fabric": None if self.fabric is None else self.fabric.to_json(),
        }


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why the plan did not start the job, and when it expected it to start (if it did)."""

    reason: Reason
    detail: str
    expected_start: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason.value,
            "meaning": REASON_MEANING.get(self.reason, ""),
            "detail": self.detail,
            "expected_start": self.expected_start,
        }


@dataclass(frozen=True, slots=True)
class SlurmView:
    """The job as Slurm shows it now; ``reachable`` false when Slurm could not be read."""

    reachable: bool
    error: str | None
    job: Job | None

    def to_json(self) -> dict[str, Any]:
        job = self.job
        return {
            "reachable": self.reachable,
            "error": self.error,
            "job": None
            if job is None
            else {
                "state": job.state.value,
                "reason": job.reason,
                "partition": job.partition,
                "nodes": list(job.nodes),
                "held": job.held,
                "submit_time": job.submit_time,
                "start_time": job.start_time,
            },
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything ``slurmopt explain`` says about one job; see ``docs/explain.md``.

    ``kind`` is ``start`` (the plan started it), ``reservation`` (it waits
    with nodes reserved), ``unplaced`` (it waits with none) or ``none`` (the
    daemon manages it but no stored plan mentions it).
    """

    job_id: int
    now: float
    kind: str
    plan: PlanInfo | None
    latest_plan: PlanInfo | None
    start: Placed | None
    reservation: Placed | None
    waiting: Waiting | None
    managed: ManagedJob | None
    slurm: SlurmView
    notes: tuple[str, ...]

    @property
    def is_current(self) -> bool:
        """Whether the plan that mentions the job is the newest plan recorded."""
        return (
            self.plan is not None
            and self.latest_plan is not None
            and self.plan.id == self.latest_plan.id
        )

    def to_json(self) -> dict[str, Any]:
        managed = self.managed
        return {
            "schema_version": EXPLAIN_SCHEMA_VERSION,
            "job_id": self.job_id,
            "now": self.now,
            "kind": self.kind,
            "plan": None if self.plan is None else self.plan.to_json(),
            "latest_plan": None if self.latest_plan is None else self.latest_plan.to_json(),
            "current": self.is_current,
            "start": None if self.start is None else self.start.to_json(),
            "reservation": None if self.reservation is None else self.reservation.to_json(),
            "unplaced": None if self.waiting is None else self.waiting.to_json(),
            "managed": None
            if managed is None
            else {
                "state": managed.state.value,
                "reason": managed.reason,
                "detail": managed.detail,
                "nodes": expand(managed.nodes),
                "expected_start": managed.expected_start,
                "slurm_submit_time": managed.slurm_submit_time,
                "updated_at": managed.updated_at,
            },
            "slurm": self.slurm.to_json(),
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        """The explanation for people: a headline, then one fact per line."""
        out = [self._headline()]
        if self.start is not None:
            out.extend(self._placed_lines(self.start, with_detail=True))
        if self.waiting is not None and self.waiting.detail:
            out.append(f"  why: {self.waiting.detail}")
        if self.reservation is not None:
            res = self.reservation
            when = "" if res.start_time is None else f" from {self._when(res.start_time)}"
            out.append(f"  reserved: {fold(res.nodes)}{when} ({res.reason.value})")
            # An unplaced line already repeats the reservation's detail.
            out.extend(self._placed_lines(res, with_detail=self.waiting is None))
        out.append(self._plan_line())
        if self.managed is not None:
            m = self.managed
            since = self._when(m.updated_at)
            nodes = f" on {m.nodes}" if m.nodes else ""
            why = f" ({m.reason}{': ' + m.detail if m.detail else ''})" if m.reason else ""
            out.append(f"slurmopt: {m.state.value}{nodes} since {since}{why}")
        out.append(self._slurm_line())
        out.extend(f"note: {n}" for n in self.notes)
        return out

    # -- text pieces ---------------------------------------------------------------------------
    @staticmethod
    def _placed_lines(placed: Placed, with_detail: bool) -> list[str]:
        out = [f"  why: {placed.detail}"] if with_detail and placed.detail else []
        if placed.fabric is not None:
            out.append(f"  fabric: {placed.fabric.describe()}")
        return out

    def _headline(self) -> str:
        head = f"job {self.job_id}: "
        if self.start is not None:
            reason = self.start.reason
            meaning = REASON_MEANING.get(reason, "")
            return head + f"placed on {fold(self.start.nodes)} ({reason.value}: {meaning})"
        if self.waiting is not None:
            meaning = REASON_MEANING.get(self.waiting.reason, "")
            expected = (
                "no expected start"
                if self.waiting.expected_start is None
                else f"expected to start {self._when(self.waiting.expected_start)}"
            )
            return head + f"waits ({self.waiting.reason.value}: {meaning}); {expected}"
        if self.reservation is not None:
            return head + f"waits with nodes reserved ({self.reservation.reason.value})"
        return head + "managed by slurmopt, but no stored plan mentions it"

    def _plan_line(self) -> str:
        if self.plan is None:
            if self.latest_plan is None:
                return "plan: none recorded yet"
            return f"plan: none mentions it (latest: #{self.latest_plan.id})"
        p = self.plan
        line = (
            f"plan: #{p.id}, made {self._when(p.planned_at)} in {p.duration_s:.3f} s "
            f"from a snapshot taken {format_time(p.taken_at)}"
        )
        if self.is_current:
            return line + "; the latest plan"
        if self.latest_plan is not None:
            newest = self.latest_plan
            return line + (
                f"; later plans do not mention it (latest: #{newest.id}, "
                f"{self._when(newest.planned_at)})"
            )
        return line

    def _slurm_line(self) -> str:
        view = self.slurm
        if not view.reachable:
            return f"Slurm now: unknown (cannot read Slurm: {view.error})"
        job = view.job
        if job is None:
            return "Slurm now: not in Slurm's job list (ended and purged, or never existed)"
        where = f" on {fold(job.nodes)}" if job.nodes else ""
        partition = f" in partition {job.partition}" if job.partition else ""
        reason = f" ({job.reason})" if job.reason and job.reason != "None" else ""
        held = ", held" if job.held else ""
        return f"Slurm now: {job.state.value}{where}{partition}{reason}{held}"

    def _when(self, at: float) -> str:
        return f"{format_time(at)} ({format_relative(at - self.now)})"


def format_time(at: float) -> str:
    """Epoch seconds as local ISO 8601 with its UTC offset, to the second."""
    return datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")


def format_relative(delta_s: float) -> str:
    """``in 25 min`` for a future offset, ``12 s ago`` for a past one, ``now`` within a second."""
    size = abs(delta_s)
    if size < 1:
        return "now"
    if size < 120:
        text = f"{size:.0f} s"
    elif size < 7200:
        text = f"{size / 60:.0f} min"
    elif size < 172_800:
        text = f"{size / 3600:.1f} h"
    else:
        text = f"{size / 86_400:.1f} d"
    return f"in {text}" if delta_s > 0 else f"{text} ago"


def _fabric_view(
    fabric: Fabric | None, nodes: Sequence[str], notes: list[str]
) -> FabricView | None:
    if fabric is None or not nodes:
        return None
    try:
        span = fabric.span(nodes)
    except FabricError as exc:
        notes.append(f"no fabric figures for {fold(nodes)}: {exc}")
        return None
    return FabricView(span.leaves, span.max_hops, span.slowest_link_gbps, fabric.source)


def ensure_known(
    job_id: int,
    decided: tuple[PlanRecord, Sequence[Decision]] | None,
    managed: ManagedJob | None,
    store: str = "",
) -> None:
    """Raise :class:`JobNotExplained` when neither a stored plan nor a record names the job."""
    if decided is None and managed is None:
        where = f" in {store}" if store else ""
        raise JobNotExplained(
            f"job {job_id}: unknown to slurmopt: no stored plan mentions it and no managed job "
            f"has that id{where} (never seen pending by the daemon, or it asks for no GPUs)"
        )


def explain_job(
    job_id: int,
    decided: tuple[PlanRecord, Sequence[Decision]] | None,
    latest_plan: PlanRecord | None,
    managed: ManagedJob | None,
    slurm: SlurmView,
    fabric: Fabric | None,
    now: float,
) -> Explanation:
    """Put one job's stored decision, its managed record and Slurm's view together.

    ``decided`` is :meth:`Store.latest_decisions_for`, ``latest_plan``
    :meth:`Store.latest_plan`, ``managed`` :meth:`Store.managed_job`.
    Raises :class:`JobNotExplained` when the store knows nothing of the job.
    """
    ensure_known(job_id, decided, managed)
    notes: list[str] = []
    start = reservation = None
    waiting = None
    plan = None
    kind = "none"
    if decided is not None:
        record, lines = decided
        plan = PlanInfo.of(record)
        for line in lines:
            nodes = tuple(expand(line.nodes))
            if line.kind == "start":
                view = _fabric_view(fabric, nodes, notes)
                start = Placed(nodes, line.reason, line.detail, None, view)
            elif line.kind == "reservation":
                view = _fabric_view(fabric, nodes, notes)
                reservation = Placed(nodes, line.reason, line.detail, line.start_time, view)
            else:
                waiting = Waiting(line.reason, line.detail, line.start_time)
        kind = "start" if start else "reservation" if reservation else "unplaced"
    latest = None if latest_plan is None else PlanInfo.of(latest_plan)
    notes.extend(_cross_checks(plan, managed, slurm, start))
    return Explanation(
        job_id=job_id,
        now=now,
        kind=kind,
        plan=plan,
        latest_plan=latest,
        start=start,
        reservation=reservation,
        waiting=waiting,
        managed=managed,
        slurm=slurm,
        notes=tuple(notes),
    )


def _cross_checks(
    plan: PlanInfo | None, managed: ManagedJob | None, slurm: SlurmView, start: Placed | None
) -> list[str]:
    """Where the stored story and Slurm's disagree, in words an operator can act on."""
    notes: list[str] = []
    job = slurm.job
    if job is None:
        return notes
    submitted = job.submit_time
    if managed is not None and submitted is not None and managed.slurm_submit_time != submitted:
        notes.append(
            f"Slurm's job {job.job_id} was submitted at {format_time(submitted)}, the managed "
            f"record at {format_time(managed.slurm_submit_time)}: Slurm reused the id"
        )
    elif plan is not None and submitted is not None and submitted > plan.planned_at:
        notes.append(
            f"Slurm's job {job.job_id} was submitted after plan #{plan.id} was made: "
            "the stored decision is about an earlier job with the same id"
        )
    elif start is not None and job.nodes and set(job.nodes) != set(start.nodes):
        verb = "runs" if job.is_active else "ran"
        notes.append(f"Slurm {verb} it on {fold(job.nodes)}, not on the planned nodes")
    return notes


__all__ = [
    "EXPLAIN_SCHEMA_VERSION",
    "REASON_MEANING",
    "Explanation",
    "FabricView",
    "JobNotExplained",
    "PlanInfo",
    "Placed",
    "SlurmView",
    "Waiting",
    "ensure_known",
    "explain_job",
    "format_relative",
    "format_time",
]
