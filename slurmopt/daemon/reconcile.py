"""Reconciliation: bring the store's record of each managed job in line with what Slurm shows.

Runs at the start of every enforcing cycle (so also right after a restart or
a crash), on the cycle's fresh, complete snapshot.  Slurm is the truth about
what happened; the store is the truth about what slurmopt decided.  Rules,
for each job the store records as live:

* gone from Slurm, or its id now belongs to a newer job: pending ones
  become ``cancelled``, started ones ``done`` (Slurm no longer says how it
  ended);
* ended in Slurm: ``done``, ``failed`` or ``cancelled`` as Slurm says;
* running in Slurm: ``running``, whatever was recorded (``waiting`` too:
  someone released it, Slurm started it, slurmopt follows);
* pending, recorded ``running``: requeued by Slurm, back to ``waiting``;
* pending and still under slurmopt's hold, recorded ``pinned``, Slurm
  showing the recorded nodes: the pin was made but the release was not
  (the daemon stopped or lost its lease between the two); it is released;
* pending and still under slurmopt's hold, recorded ``pinned``, nodes not
  set, for longer than a Slurm call can take (``PIN_IN_FLIGHT_S``): the
  daemon stopped between recording the pin and the Slurm calls (or someone
  held it again).  The pin is withdrawn in the store (``pinned -> waiting``,
  its own key) and the job is planned afresh in this same cycle, so a pin
  is carried out under a new key at most once more and never twice under
  one.  Sooner than that the pin may still be in flight from a daemon that
  lost its lease mid-call, and the job is left alone;
* pending, released, recorded ``pinned`` for longer than ``pin_timeout_s``:
  Slurm started something else on its nodes.  ``pinned -> waiting`` is
  recorded, then the job is held again, and planned next cycle;
* pending, released, recorded ``waiting`` after such a time-out: the hold
  was recorded but the daemon stopped before it was made; it is made now;
* pending, released, recorded ``waiting`` otherwise: someone else released
  it; slurmopt follows Slurm and leaves it alone until it starts.

Then every managed pending job under an admin hold that the store does not
know yet is registered as ``waiting``.  A job changed here is not acted on
again in the same cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from sqlalchemy import select

from slurmopt.daemon.managed import (
    LEFT_TO_SLURM,
    awaits_admin_hold,
    held_by_slurmopt,
    is_user_held,
    registrable,
    same_incarnation,
    trusted_tag,
)
from slurmopt.errors import SlurmCommandError, SlurmoptError
from slurmopt.hostlist import expand, fold
from slurmopt.model import ClusterSnapshot, Job, JobState
from slurmopt.slurm.base import SlurmClient
from slurmopt.store import (
    FINAL_STATES,
    LeaseLost,
    ManagedJob,
    ManagedJobState,
    Store,
    idempotency_key,
    next_attempt,
    record_transition,
    register_job,
)

log = logging.getLogger(__name__)

S = ManagedJobState

#: Reason recorded when a pinned job did not start in time and is held again.
PIN_TIMEOUT = "pin_timeout"
#: Reason recorded when a recorded pin is found not carried out (job still held).
PIN_NOT_APPLIED = "pin_not_applied"
#: Seconds a recorded pin may still be in flight (longer than any one Slurm call may take):
#: only after that is a pin that Slurm does not show withdrawn and planned again.
PIN_IN_FLIGHT_S = 40.0

#: Slurm's end states and the final state each maps to.
_ENDED: dict[JobState, ManagedJobState] = {
    JobState.COMPLETED: S.DONE,
    JobState.CANCELLED: S.CANCELLED,
    JobState.FAILED: S.FAILED,
    JobState.TIMEOUT: S.FAILED,
    JobState.NODE_FAIL: S.FAILED,
    JobState.PREEMPTED: S.FAILED,
    JobState.BOOT_FAIL: S.FAILED,
    JobState.DEADLINE: S.FAILED,
    JobState.OUT_OF_MEMORY: S.FAILED,
}


def move(
    store: Store,
    record: ManagedJob,
    to_state: ManagedJobState,
    action: str,
    reason: str,
    detail: str,
    now: float,
    nodes: Collection[str] | None = None,
) -> str:
    """Record one transition under the next key for ``action``; committed on return."""
    with store.begin() as session:
        key = record_transition(
            session,
            record.job_id,
            record.slurm_submit_time,
            to_state,
            action,
            reason,
            detail,
            now,
            nodes=nodes,
        ).key
    record.state = to_state
    record.reason = reason
    record.updated_at = now
    return key


def with_pins_in_flight(
    snapshot: ClusterSnapshot, records: Mapping[int, ManagedJob], now: float
) -> ClusterSnapshot:
    """The snapshot as the planner must see it: a pinned job Slurm has not started holds its nodes.

    Between a pin and Slurm's start of the job (a moment, or a pin the
    reconciler has just finished for a daemon that stopped after it) the
    nodes look free in Slurm's counts; planning another job there would
    have Slurm start one of the two and leave the other to time out and be
    pinned again.  Each such job is shown running on its recorded nodes
    from ``now`` for its time limit, with its GPUs counted on them.
    """
    pins = []
    for record in records.values():
        job = snapshot.jobs.get(record.job_id)
        if (
            record.state is S.PINNED
            and record.nodes
            and job is not None
            and job.is_pending
            and same_incarnation(record, job)
        ):
            pins.append((job.job_id, expand(record.nodes)))
    return snapshot.with_started(pins, now)


def live_records(store: Store) -> list[ManagedJob]:
    """Every managed job the store records in a state that is not final."""
    with store.begin() as session:
        stmt = select(ManagedJob).where(ManagedJob.state.not_in(list(FINAL_STATES)))
        return list(session.scalars(stmt.order_by(ManagedJob.job_id)))


@dataclass
class ReconcileResult:
    """What one reconciliation changed: ``touched`` jobs are not acted on again this cycle."""

    touched: set[int] = field(default_factory=set)
    registered: list[int] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


class Reconciler:
    """Applies the module's rules; holds through ``client`` only while ``may_hold()`` is true."""

    def __init__(
        self,
        store: Store,
        client: SlurmClient,
        managed_partitions: Collection[str] = (),
        pin_timeout_s: float = 300.0,
        may_hold: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.client = client
        self.managed_partitions = tuple(managed_partitions)
        self.pin_timeout_s = pin_timeout_s
        self.may_hold = may_hold

    def run(self, snapshot: ClusterSnapshot, now: float) -> ReconcileResult:
        """Reconcile every live record with ``snapshot``, then register new held jobs."""
        result = ReconcileResult()
        known: set[int] = set()
        for record in live_records(self.store):
            job = snapshot.jobs.get(record.job_id)
            try:
                self._one(record, job, now, result)
            except SlurmCommandError as exc:
                self._note(result, record.job_id, f"Slurm refused: {exc}", logging.WARNING)
            if not record.state.is_final:
                known.add(record.job_id)
        for job in snapshot.jobs.values():
            if job.job_id in known or not registrable(job):
                continue
            self._register(job, now, result)
        return result

    # -- one record ------------------------------------------------------------------------
    def _note(
        self, result: ReconcileResult, job_id: int, text: str, level: int = logging.INFO
    ) -> None:
        line = f"job {job_id}: {text}"
        result.lines.append(line)
        log.log(level, "reconcile: %s", line)

    def _move(
        self,
        result: ReconcileResult,
        record: ManagedJob,
        to_state: ManagedJobState,
        action: str,
        reason: str,
        detail: str,
        now: float,
        nodes: Collection[str] | None = None,
    ) -> None:
        before = record.state
        move(self.store, record, to_state, action, reason, detail, now, nodes)
        result.touched.add(record.job_id)
        self._note(result, record.job_id, f"{before} -> {to_state} ({reason}: {detail})")

    def _one(
        self, record: ManagedJob, job: Job | None, now: float, result: ReconcileResult
    ) -> None:
        state = record.state
        if job is None or not same_incarnation(record, job):
            gone = "no longer in Slurm" if job is None else "its id now names a newer job"
            started = state not in (S.WAITING, S.PINNED)
            to_state = S.DONE if started else S.CANCELLED
            self._move(result, record, to_state, "end", "vanished", gone, now)
            return
        if job.state in _ENDED:
            to_state = _ENDED[job.state]
            self._move(
                result,
                record,
                to_state,
                "end",
                "slurm_" + job.state.value.lower(),
                job.reason or job.state.value,
                now,
            )
            return
        if job.is_active:
            if state in (S.WAITING, S.PINNED):
                planned = record.nodes or "-"
                self._move(
                    result,
                    record,
                    S.RUNNING,
                    "run",
                    "started",
                    f"Slurm started it (planned {planned})",
                    now,
                    nodes=job.nodes,
                )
            return
        if not job.is_pending:
            return
        if state is S.RUNNING:
            self._move(result, record, S.WAITING, "requeued", "requeued", "Slurm requeued it", now)
            return
        if state is S.PINNED:
            self._pinned_pending(record, job, now, result)
        elif state is S.WAITING:
            self._waiting_pending(record, job, result)

    def _pinned_pending(
        self, record: ManagedJob, job: Job, now: float, result: ReconcileResult
    ) -> None:
        if held_by_slurmopt(job) and record.nodes and fold(job.required_nodes) == record.nodes:
            # The pin reached Slurm but the release did not (the daemon stopped, or lost its
            # lease, between the two): finish this decision instead of pinning again.
            if self.may_hold():
                self.client.release(job.job_id)
                result.touched.add(job.job_id)
                self._note(result, job.job_id, f"recorded pin to {record.nodes} found; released")
            return
        if held_by_slurmopt(job):
            if now - record.updated_at < PIN_IN_FLIGHT_S:
                # The pin may still be on its way (another daemon's slow call): wait for it.
                result.touched.add(record.job_id)
                return
            self._move(
                result,
                record,
                S.WAITING,
                "unpin",
                PIN_NOT_APPLIED,
                f"recorded pin to {record.nodes} not carried out; planned again",
                now,
            )
            # Planned again in this same cycle, from this same fresh snapshot.
            result.touched.discard(record.job_id)
            return
        if is_user_held(job):
            return
        waited = now - record.updated_at
        if waited <= self.pin_timeout_s:
            return
        if not self.may_hold():
            return
        self._move(
            result,
            record,
            S.WAITING,
            "unpin",
            PIN_TIMEOUT,
            f"not started {waited:.0f} s after the pin to {record.nodes}; held again",
            now,
        )
        self.client.hold(job.job_id)
        self._note(result, job.job_id, "held again for a new plan")

    def _waiting_pending(self, record: ManagedJob, job: Job, result: ReconcileResult) -> None:
        if record.reason != LEFT_TO_SLURM and awaits_admin_hold(job):
            self._admin_hold(job, result)
            return
        if job.held or record.reason != PIN_TIMEOUT:
            return
        if not self.may_hold():
            return
        # The hold after a pin time-out was recorded, but never made.
        self.client.hold(job.job_id)
        result.touched.add(job.job_id)
        self._note(result, job.job_id, "recorded hold after a pin time-out was not made; held")

    def _admin_hold(self, job: Job, result: ReconcileResult) -> None:
        """Turn the plugin's ``priority=0`` (which the owner could release) into an admin hold.

        The record (``waiting``) is already committed, so a crash before this
        call only leaves the job under the plugin's hold, which the next
        cycle turns again.  Until then the owner could release it; Slurm
        then simply schedules it (see docs/plugin.md).
        """
        if not self.may_hold():
            return
        try:
            self.client.hold(job.job_id)
        except SlurmCommandError as exc:
            self._note(result, job.job_id, f"admin hold failed: {exc}", logging.WARNING)
            return
        self._note(result, job.job_id, "plugin's hold made an admin hold")

    def _register(self, job: Job, now: float, result: ReconcileResult) -> None:
        submit = job.submit_time if job.submit_time is not None else now
        # The plugin capped the elastic range at the submitted node count when it copied it.
        tag = trusted_tag(job)
        elastic = tag.elastic if tag is not None else None
        try:
            with self.store.begin() as session:
                register_job(
                    session,
                    job.job_id,
                    submit,
                    key=idempotency_key(job.job_id, submit, "register", 0),
                    reason="held",
                    detail=job.reason,
                    priority_before_hold=None,
                    preemptible=bool(tag and tag.preemptible),
                    elastic_min_nodes=elastic[0] if elastic else None,
                    elastic_max_nodes=elastic[1] if elastic else None,
                    now=now,
                )
        except LeaseLost:
            raise  # not the leader any more: the cycle stops here
        except SlurmoptError as exc:
            self._note(result, job.job_id, f"not registered: {exc}", logging.WARNING)
            return
        result.registered.append(job.job_id)
        result.touched.discard(job.job_id)  # a new submission: plannable at once
        self._note(result, job.job_id, "new held job -> waiting")
        if awaits_admin_hold(job):
            self._admin_hold(job, result)


__all__ = [
    "LEFT_TO_SLURM",
    "same_incarnation",
    "PIN_NOT_APPLIED",
    "PIN_TIMEOUT",
    "ReconcileResult",
    "Reconciler",
    "live_records",
    "move",
    "next_attempt",
]
