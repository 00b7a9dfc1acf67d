"""Bounded history: how long the store keeps plans, samples and ended jobs, and the pruning.

Pruning deletes in transactions of at most :data:`BATCH_ROWS` rows, so on
SQLite the daemon's own writes (and a second process's) never wait long for
the write lock, and one call stops after ``max_rows``: a store far over its
retention (an upgrade from a version that never pruned) is brought back
over several calls instead of in one long stall.

Plans are stored as changes (see :meth:`Store.record_plan`): a job's lines
are written when they differ from the previous plan's, so an old row may
still be a job's current line.  A decision row goes only once a newer row
for the same job exists at or before the oldest plan kept; a plan record
goes once no row refers to it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import and_, delete, exists, func, select
from sqlalchemy.orm import Session, aliased

from slurmopt.store.models import (
    FINAL_STATES,
    Decision,
    FragmentationSample,
    JobTransition,
    ManagedJob,
    PlanRecord,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager

    from sqlalchemy.sql import Select

#: Rows one pruning transaction deletes at most.
BATCH_ROWS = 2_000

#: Decision kind of a job that left the plan (its last lines are in an earlier plan).
GONE = "gone"

DAY_S = 86400.0


class RetentionSettings(Protocol):
    """The ``retain_*`` keys, as :class:`~slurmopt.config.Config` has them."""

    @property
    def retain_plans_s(self) -> float: ...
    @property
    def retain_samples_s(self) -> float: ...
    @property
    def retain_finished_jobs_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Retention:
    """Seconds each kind of history is kept; live managed jobs are always kept."""

    plans_s: float = 7 * DAY_S
    samples_s: float = 30 * DAY_S
    finished_jobs_s: float = 30 * DAY_S

    @classmethod
    def of(cls, config: RetentionSettings) -> Retention:
        """The ``retain_*`` keys of a :class:`~slurmopt.config.Config`."""
        return cls(config.retain_plans_s, config.retain_samples_s, config.retain_finished_jobs_s)


@dataclass(slots=True)
class PruneCounts:
    """Rows one pruning deleted, by table; ``more``: it stopped at its bound with rows left."""

    plans: int = 0
    decisions: int = 0
    samples: int = 0
    jobs: int = 0
    transitions: int = 0
    more: bool = False

    @property
    def total(self) -> int:
        return self.plans + self.decisions + self.samples + self.jobs + self.transitions

    def describe(self) -> str:
        parts = [f"{f.name} {getattr(self, f.name)}" for f in fields(self) if f.name != "more"]
        return ", ".join(parts) + (" (more left)" if self.more else "")


def _delete_ids(session: Session, model: type, ids: Select[Any]) -> int:
    """Delete the rows of ``model`` whose id ``ids`` selects; how many went."""
    found = list(session.scalars(ids))
    if found:
        session.execute(
            delete(model).where(model.id.in_(found)).execution_options(synchronize_session=False)  # type: ignore[attr-defined]
        )
    return len(found)


def _oldest_kept_plan(session: Session, cutoff: float) -> int | None:
    """The id of the oldest plan inside retention; the newest plan is always kept."""
    kept = session.scalar(select(func.min(PlanRecord.id)).where(PlanRecord.taken_at >= cutoff))
    return kept if kept is not None else session.scalar(select(func.max(PlanRecord.id)))


def _superseded_decisions(keep_from: int, limit: int) -> Select[Any]:
    """Rows of plans before ``keep_from`` that a newer row of the same job replaced by then."""
    newer = aliased(Decision)
    return (
        select(Decision.id)
        .where(
            Decision.plan_id < keep_from,
            exists().where(
                newer.job_id == Decision.job_id,
                newer.plan_id > Decision.plan_id,
                newer.plan_id <= keep_from,
            ),
        )
        .limit(limit)
    )


def _spent_gone_markers(keep_from: int, limit: int) -> Select[Any]:
    """ "Left the plan" rows before ``keep_from`` with no older row left to point back to."""
    older = aliased(Decision)
    return (
        select(Decision.id)
        .where(
            Decision.plan_id < keep_from,
            Decision.kind == GONE,
            ~exists().where(older.job_id == Decision.job_id, older.plan_id < Decision.plan_id),
        )
        .limit(limit)
    )


def _empty_plans(keep_from: int, limit: int) -> Select[Any]:
    return (
        select(PlanRecord.id)
        .where(
            PlanRecord.id < keep_from,
            ~exists().where(Decision.plan_id == PlanRecord.id),
        )
        .limit(limit)
    )


def _old_samples(cutoff: float, limit: int) -> Select[Any]:
    return select(FragmentationSample.id).where(FragmentationSample.at < cutoff).limit(limit)


def _orphan_transitions(cutoff: float, limit: int) -> Select[Any]:
    """Old transitions of job incarnations that no longer have a record."""
    record = and_(
        ManagedJob.job_id == JobTransition.job_id,
        ManagedJob.slurm_submit_time == JobTransition.slurm_submit_time,
    )
    return (
        select(JobTransition.id)
        .where(JobTransition.at < cutoff, ~exists().where(record))
        .limit(limit)
    )


def prune(
    begin: Callable[[], AbstractContextManager[Session]],
    now: float,
    retention: Retention,
    max_rows: int,
    batch_rows: int = BATCH_ROWS,
) -> PruneCounts:
    """Delete history older than ``retention`` at ``now``: at most ``max_rows`` rows.

    ``begin`` opens one transaction (:meth:`Store.begin`); each batch is its own.
    """
    counts = PruneCounts()
    budget = max(0, max_rows)
    plan_cutoff = now - retention.plans_s
    job_cutoff = now - retention.finished_jobs_s

    def run(step: Callable[[Session, int], int]) -> Iterator[int]:
        nonlocal budget
        while budget > 0:
            with begin() as session:
                gone = step(session, min(batch_rows, budget))
            budget -= gone
            yield gone
            if gone < batch_rows:
                return

    def decisions(session: Session, limit: int) -> int:
        keep_from = _oldest_kept_plan(session, plan_cutoff)
        if keep_from is None:
            return 0
        n = _delete_ids(session, Decision, _superseded_decisions(keep_from, limit))
        if n < limit:
            n += _delete_ids(session, Decision, _spent_gone_markers(keep_from, limit - n))
        return n

    def plans(session: Session, limit: int) -> int:
        keep_from = _oldest_kept_plan(session, plan_cutoff)
        return (
            0
            if keep_from is None
            else _delete_ids(session, PlanRecord, _empty_plans(keep_from, limit))
        )

    def samples(session: Session, limit: int) -> int:
        return _delete_ids(
            session, FragmentationSample, _old_samples(now - retention.samples_s, limit)
        )

    def jobs(session: Session, limit: int) -> int:
        ended = (
            select(ManagedJob.job_id)
            .where(ManagedJob.state.in_(FINAL_STATES), ManagedJob.updated_at < job_cutoff)
            .limit(limit)
        )
        found = list(session.scalars(ended))
        if found:
            session.execute(
                delete(ManagedJob)
                .where(ManagedJob.job_id.in_(found))
                .execution_options(synchronize_session=False)
            )
        return len(found)

    def transitions(session: Session, limit: int) -> int:
        return _delete_ids(session, JobTransition, _orphan_transitions(job_cutoff, limit))

    counts.decisions = sum(run(decisions))
    counts.plans = sum(run(plans))
    counts.samples = sum(run(samples))
    counts.jobs = sum(run(jobs))
    counts.transitions = sum(run(transitions))
    counts.more = budget <= 0
    return counts


__all__ = ["BATCH_ROWS", "GONE", "PruneCounts", "Retention", "prune"]
