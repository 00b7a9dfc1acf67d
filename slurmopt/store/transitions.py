"""Managed-job transitions: their errors, the lease's fence, idempotency keys and history.

Every change of a managed job's state goes through :func:`transition` (or
:func:`register_job` for its first), which checks the session's fence inside
its own transaction and appends one :class:`~slurmopt.store.models.JobTransition`
under an idempotency key, so a retried action is recorded once.  The caller
commits before it calls Slurm (see :mod:`slurmopt.store.db`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from slurmopt.errors import SlurmoptError
from slurmopt.hostlist import fold
from slurmopt.store.models import JobTransition, Lease, ManagedJob, ManagedJobState


# -- errors --------------------------------------------------------------------------------------
class UnknownJob(SlurmoptError):
    """A transition for a job the store has no record of."""

    exit_code = 70  # EX_SOFTWARE


class IllegalTransition(SlurmoptError):
    """A state change that :data:`~slurmopt.store.models.TRANSITIONS` does not allow."""

    exit_code = 70  # EX_SOFTWARE

    def __init__(self, job_id: int, from_state: ManagedJobState, to_state: ManagedJobState) -> None:
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(f"job {job_id}: illegal transition {from_state} -> {to_state}")


class KeyConflict(SlurmoptError):
    """An idempotency key already recorded for a different job or target state."""

    exit_code = 70  # EX_SOFTWARE


class JobIdReused(SlurmoptError):
    """Slurm reused a job id whose previous job slurmopt still records as live."""

    exit_code = 70  # EX_SOFTWARE


class LeaseLost(SlurmoptError):
    """This process no longer holds the lease its fencing token names: it must not act."""

    exit_code = 75  # EX_TEMPFAIL


# -- fencing -------------------------------------------------------------------------------------
#: Key of :attr:`Session.info` that carries the fence every transition in the session checks.
FENCE_INFO = "slurmopt.fence"


class Fence:
    """Proof that this process still holds lease ``name`` under fencing ``token``.

    The daemon makes one when it acquires the lease and sets it on the store
    (:attr:`Store.fence`); from then on every managed-job transition checks
    it inside its own transaction (a compare on holder, token and expiry),
    and :meth:`Store.guard` checks and extends it right before each Slurm
    write.  A holder that paused past its lease, and whose lease another
    daemon took, fails both checks and acts on nothing.
    """

    __slots__ = ("clock", "holder", "name", "token", "ttl_s")

    def __init__(
        self, name: str, holder: str, token: int, ttl_s: float, clock: Callable[[], float]
    ) -> None:
        self.name = name
        self.holder = holder
        self.token = token
        self.ttl_s = ttl_s
        self.clock = clock

    def check(self, session: Session, extend: bool = False) -> None:
        """Raise :class:`LeaseLost` unless the lease is still ours, unexpired, same token.

        One conditional UPDATE: on PostgreSQL it also locks the lease row
        until the transaction ends, so a takeover cannot commit in between.
        """
        now = self.clock()
        values: dict[str, Any] = {"token": self.token}
        if extend:
            values["expires_at"] = now + self.ttl_s
        held = session.execute(
            update(Lease)
            .where(
                Lease.name == self.name,
                Lease.holder == self.holder,
                Lease.token == self.token,
                Lease.expires_at > now,
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if held.rowcount != 1:  # type: ignore[attr-defined]
            raise LeaseLost(
                f"lease {self.name!r} is no longer held by {self.holder} under token "
                f"{self.token}: acting on nothing"
            )


def check_fence(session: Session) -> None:
    """Check the fence the session carries, if any (a no-op for unfenced writers)."""
    fence = session.info.get(FENCE_INFO)
    if fence is not None:
        fence.check(session)


def idempotency_key(job_id: int, slurm_submit_time: float, action: str, attempt: int = 0) -> str:
    """The key of one action on one job incarnation: ``job:submit:action:attempt``.

    ``attempt`` counts repeats of the same action on the same job (the
    second pin after a re-plan is attempt 1), so a retried call reuses its
    key and a new decision gets a new one.
    """
    return f"{job_id}:{slurm_submit_time:.0f}:{action}:{attempt}"


# -- transitions ---------------------------------------------------------------------------------
def _existing(session: Session, key: str) -> JobTransition | None:
    return session.scalars(select(JobTransition).where(JobTransition.key == key)).one_or_none()


def _same_key(
    found: JobTransition, job_id: int, to_state: ManagedJobState, key: str
) -> JobTransition:
    if found.job_id != job_id or found.to_state != to_state:
        raise KeyConflict(
            f"key {key!r} already records job {found.job_id} -> {found.to_state}, "
            f"not job {job_id} -> {to_state}"
        )
    return found


def register_job(
    session: Session,
    job_id: int,
    slurm_submit_time: float,
    *,
    key: str,
    reason: str = "held",
    detail: str = "",
    priority_before_hold: int | None = None,
    preemptible: bool = False,
    elastic_min_nodes: int | None = None,
    elastic_max_nodes: int | None = None,
    now: float | None = None,
) -> JobTransition:
    """Start managing a job: a record in ``waiting`` and its first transition (from none).

    Idempotent for a repeated ``key``.  A record left by an earlier job with
    the same id (told apart by ``slurm_submit_time``) is replaced if that job
    ended; if it is still live the caller must first close it (it vanished
    from Slurm), else :class:`JobIdReused` is raised.
    """
    found = _existing(session, key)
    if found is not None:
        return _same_key(found, job_id, ManagedJobState.WAITING, key)
    check_fence(session)
    at = time.time() if now is None else now
    job = session.get(ManagedJob, job_id, with_for_update=True)
    if job is not None:
        if job.slurm_submit_time == slurm_submit_time:
            raise IllegalTransition(job_id, job.state, ManagedJobState.WAITING)
        if not job.state.is_final:
            raise JobIdReused(
                f"job {job_id} submitted at {slurm_submit_time:.0f} reuses the id of a job "
                f"submitted at {job.slurm_submit_time:.0f} that is still {job.state}"
            )
        session.delete(job)
        session.flush()
    session.add(
        ManagedJob(
            job_id=job_id,
            slurm_submit_time=slurm_submit_time,
            state=ManagedJobState.WAITING,
            nodes=None,
            reason=reason,
            detail=detail,
            expected_start=None,
            priority_before_hold=priority_before_hold,
            preemptible=preemptible,
            elastic_min_nodes=elastic_min_nodes,
            elastic_max_nodes=elastic_max_nodes,
            created_at=at,
            updated_at=at,
        )
    )
    record = JobTransition(
        job_id=job_id,
        slurm_submit_time=slurm_submit_time,
        from_state=None,
        to_state=ManagedJobState.WAITING,
        reason=reason,
        detail=detail,
        at=at,
        key=key,
    )
    session.add(record)
    session.flush()
    return record


def transition(
    session: Session,
    job_id: int,
    to_state: ManagedJobState,
    reason: str,
    detail: str,
    key: str,
    *,
    nodes: Sequence[str] | None = None,
    expected_start: float | None = None,
    now: float | None = None,
) -> JobTransition:
    """Move a managed job to ``to_state`` and append the transition; returns the record.

    A ``key`` already recorded returns that record and writes nothing, even
    if the job has moved on since, so a retried action is harmless; the same
    key for another job or target state is a :class:`KeyConflict`.  A move
    :data:`~slurmopt.store.models.TRANSITIONS` forbids raises
    :class:`IllegalTransition` and writes nothing.  ``nodes`` records the
    planned nodes (entering ``waiting`` clears them).  The row is flushed;
    the caller commits before it calls Slurm.
    """
    found = _existing(session, key)
    if found is not None:
        return _same_key(found, job_id, to_state, key)
    check_fence(session)
    job = session.get(ManagedJob, job_id, with_for_update=True)
    if job is None:
        raise UnknownJob(f"job {job_id} is not a managed job")
    if not job.state.can_become(to_state):
        raise IllegalTransition(job_id, job.state, to_state)
    at = time.time() if now is None else now
    record = JobTransition(
        job_id=job_id,
        slurm_submit_time=job.slurm_submit_time,
        from_state=job.state,
        to_state=to_state,
        reason=reason,
        detail=detail,
        at=at,
        key=key,
    )
    job.state = to_state
    job.reason = reason
    job.detail = detail
    job.updated_at = at
    if to_state is ManagedJobState.WAITING:
        job.nodes = None
    if nodes is not None:
        job.nodes = fold(nodes) or None
    if expected_start is not None:
        job.expected_start = expected_start
    session.add(record)
    session.flush()
    return record


def next_attempt(session: Session, job_id: int, submit_time: float, action: str) -> int:
    """How many times ``action`` was already recorded for this job incarnation."""
    prefix = idempotency_key(job_id, submit_time, action, 0).rsplit(":", 1)[0] + ":"
    count = session.scalar(
        select(func.count()).select_from(JobTransition).where(JobTransition.key.like(prefix + "%"))
    )
    return int(count or 0)


def record_transition(
    session: Session,
    job_id: int,
    slurm_submit_time: float,
    to_state: ManagedJobState,
    action: str,
    reason: str,
    detail: str,
    now: float,
    *,
    nodes: Collection[str] | None = None,
) -> JobTransition:
    """:func:`transition` under the key of ``action``'s next attempt on this job incarnation.

    The one way the daemon records a decision: a new decision gets a new
    key, so it is never mistaken for a retry of an earlier one.  The fence
    is checked inside :func:`transition`, as for every transition.
    """
    attempt = next_attempt(session, job_id, slurm_submit_time, action)
    key = idempotency_key(job_id, slurm_submit_time, action, attempt)
    planned = list(nodes) if nodes is not None else None
    return transition(session, job_id, to_state, reason, detail, key, nodes=planned, now=now)


def history(session: Session, job_id: int) -> list[JobTransition]:
    """Every recorded transition of a job id (all its incarnations), oldest first."""
    stmt = select(JobTransition).where(JobTransition.job_id == job_id).order_by(JobTransition.id)
    return list(session.scalars(stmt))


__all__ = [
    "FENCE_INFO",
    "Fence",
    "IllegalTransition",
    "JobIdReused",
    "KeyConflict",
    "LeaseLost",
    "UnknownJob",
    "check_fence",
    "history",
    "idempotency_key",
    "next_attempt",
    "record_transition",
    "register_job",
    "transition",
]
