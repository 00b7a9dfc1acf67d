"""Checkpoint-acknowledged preemption, carried out by the enforcing daemon.

It stays one module past 500 lines: :class:`Preempter`'s steps (ask, begin,
advance) move each victim's row through one state machine and read best
together.

One preemption makes room for one waiting managed job (the preemptor) by
stopping whole gangs of running ``preemptible`` jobs (the victims).  The
plan decides it (:func:`slurmopt.policy.preemption.preemption_for`, asked
for by :meth:`Preempter.ask`); the actuator carries it out through
:meth:`Preempter.begin`; :meth:`Preempter.advance` moves each victim on.
Each victim has a row in the store's ``preemptions`` table and moves
through the managed-job states, every step recorded before the Slurm call
it leads to::

    running --(in the plan: row + transition committed, then
               scancel --signal=SIG --batch)-------------------> signalled
    signalled --(ckpt=STEP@T in the job's comment, T >= signal)--> checkpointed
    signalled --(no ack within grace_s; default policy)---------> running
                 (row outcome ``cancelled``: the victim keeps running and
                  is not chosen again in this incarnation)
    signalled --(no ack within grace_s; ``requeue-anyway``)-----> checkpointed
                 (row outcome ``requeued_without_ack``)
    checkpointed --(Slurm still runs the acknowledging run:
                    scontrol requeuehold)----------------------> (same)
    checkpointed --(Slurm shows it pending)---------------------> waiting
                 (row outcome ``requeued``; then planned and released
                  like any managed job)
    any --(Slurm ended the victim)------------------------------> row outcome ``victim_ended``

Restarting the daemon in the middle finishes each preemption once: the
signal is sent again for a ``signalled`` row this process has not sent
(a repeated signal only re-creates the request file), and the requeue is
made only while Slurm still shows the very run that acknowledged (started
before the ack), so a run started after the requeue is never requeued.
A new preemption starts only when none is in flight.  See
``docs/preemption.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from slurmopt.config import Config
from slurmopt.errors import ConfigError, SlurmCommandError
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.policy.preemption import (
    PreemptionAsk,
    PreemptionChoice,
    PreemptionCost,
    job_gpus,
)
from slurmopt.slurm.base import SlurmClient
from slurmopt.store import (
    ManagedJob,
    ManagedJobState,
    Preemption,
    Store,
    record_transition,
)
from slurmopt.tag import checkpoint_of
from slurmopt.templates import DEFAULT_SIGNAL
from slurmopt.words import parse_bool

log = logging.getLogger(__name__)

S = ManagedJobState

#: Outcomes written to ``preemptions.outcome`` (None while in flight).
REQUEUED = "requeued"
REQUEUED_WITHOUT_ACK = "requeued_without_ack"
CANCELLED = "cancelled"
VICTIM_ENDED = "victim_ended"

KEEP_RUNNING = "keep-running"
REQUEUE_ANYWAY = "requeue-anyway"
#: An ack time is whole seconds; one earlier than the signal by less than this still counts.
ACK_SLACK_S = 1.0


@dataclass(frozen=True)
class PreemptionSettings:
    """How the daemon preempts; read from the environment (see ``docs/preemption.md``)."""

    enabled: bool = True
    signal: str = DEFAULT_SIGNAL
    grace_s: float = 120.0
    on_no_ack: str = KEEP_RUNNING
    restart_s: float = 120.0

    @property
    def cost(self) -> PreemptionCost:
        """What a preemption is taken to cost each victim GPU: the full grace, then the restart."""
        return PreemptionCost(ack_s=self.grace_s, restart_s=self.restart_s)

    @classmethod
    def from_config(
        cls, config: Config, environ: Mapping[str, str] | None = None
    ) -> PreemptionSettings:
        """The config's ``preempt_*`` keys; ``SLURMOPT_PREEMPT*`` variables override them."""
        env = os.environ if environ is None else environ
        overrides: dict[str, object] = {}
        if "SLURMOPT_PREEMPT" in env:
            # Only a false word turns preemption off; any other text leaves it on.
            overrides["preempt_enabled"] = parse_bool(
                env["SLURMOPT_PREEMPT"], what="$SLURMOPT_PREEMPT", otherwise=True
            )
        if "SLURMOPT_PREEMPT_SIGNAL" in env:
            overrides["preempt_signal"] = env["SLURMOPT_PREEMPT_SIGNAL"]
        if "SLURMOPT_PREEMPT_GRACE_S" in env:
            try:
                overrides["preempt_grace_s"] = float(env["SLURMOPT_PREEMPT_GRACE_S"])
            except ValueError:
                raise ConfigError("SLURMOPT_PREEMPT_GRACE_S: expected seconds") from None
        if "SLURMOPT_PREEMPT_ON_NO_ACK" in env:
            overrides["preempt_on_no_ack"] = env["SLURMOPT_PREEMPT_ON_NO_ACK"]
        merged = dataclasses.replace(config, **overrides) if overrides else config  # type: ignore[arg-type]
        return cls(
            enabled=merged.preempt_enabled,
            signal=merged.preempt_signal,
            grace_s=merged.preempt_grace_s,
            on_no_ack=merged.preempt_on_no_ack,
            restart_s=merged.preempt_restart_s,
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> PreemptionSettings:
        """Defaults with only the ``SLURMOPT_PREEMPT*`` variables applied."""
        return cls.from_config(Config(), environ)


@dataclass
class PreemptResult:
    """What one pass did, for logs and tests."""

    chosen: PreemptionChoice | None = None
    signalled: list[int] = field(default_factory=list)
    acknowledged: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)


class PreemptionMetrics(Protocol):
    """Where the preempter reports each ended preemption (``DaemonMetrics`` does)."""

    def record_preemption(self, outcome: str, ack_seconds: float | None = None) -> None: ...


class Preempter:
    """Starts and advances preemptions; see the module docstring for the states."""

    def __init__(
        self,
        store: Store,
        client: SlurmClient,
        settings: PreemptionSettings | None = None,
        metrics: PreemptionMetrics | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.settings = settings or PreemptionSettings()
        self.metrics = metrics
        #: Preemption rows whose signal this process has sent.
        self._sent: set[int] = set()
        #: GPUs each victim held when last seen running (a pending job shows none).
        self._gpus: dict[int, int] = {}

    # -- queries --------------------------------------------------------------------------------
    def in_flight(self) -> list[Preemption]:
        """The preemptions this daemon carries on, oldest first: none while preemption is off.

        Read once per cycle and handed to :meth:`ask` and :meth:`advance`.
        """
        if not self.settings.enabled:
            return []
        with self.store.begin() as session:
            rows = session.scalars(
                select(Preemption).where(Preemption.outcome.is_(None)).order_by(Preemption.id)
            ).all()
            session.expunge_all()
        return list(rows)

    def _no_ack_victims(self) -> frozenset[tuple[int, int]]:
        with self.store.begin() as session:
            rows = session.execute(
                select(Preemption.victim_job_id, Preemption.victim_submit_time).where(
                    Preemption.outcome == CANCELLED
                )
            ).all()
        return frozenset((int(job), round(submit)) for job, submit in rows)

    # -- the pass -------------------------------------------------------------------------------
    def ask(
        self, records: Mapping[int, ManagedJob], in_flight: Sequence[Preemption]
    ) -> PreemptionAsk | None:
        """What the plan may preempt this cycle: None while disabled or while one is in flight.

        Victims: the jobs recorded running, less those that already let a
        grace time pass without a checkpoint (this incarnation).  Preemptors:
        the jobs recorded waiting.
        """
        if not self.settings.enabled or in_flight:
            return None
        refused = self._no_ack_victims()
        victims = frozenset(
            job_id
            for job_id, r in records.items()
            if r.state is S.RUNNING and (job_id, round(r.slurm_submit_time)) not in refused
        )
        waiting = frozenset(job_id for job_id, r in records.items() if r.state is S.WAITING)
        return PreemptionAsk(cost=self.settings.cost, victims=victims, preemptors=waiting)

    def begin(
        self,
        choice: PreemptionChoice,
        records: Mapping[int, ManagedJob],
        now: float,
        plan_id: int | None,
    ) -> PreemptResult:
        """A plan's preemption, carried out by the actuator: each victim's first step.

        For each victim: its row and ``running -> signalled`` are committed,
        then the signal is sent.  A victim the store no longer records
        running is left out (the plan was made from a snapshot a moment old).
        """
        result = PreemptResult(chosen=choice)
        log.info(
            "preempting for job %d: %s [%s] %s",
            choice.for_job_id,
            ",".join(str(v.job_id) for v in choice.victims),
            choice.reason.value,
            choice.detail,
        )
        for victim in choice.victims:
            record = records.get(victim.job_id)
            if record is None or record.state is not S.RUNNING:
                result.failed[victim.job_id] = "no longer recorded running"
                continue
            row_id = self._record_signal(
                record, choice.for_job_id, victim.lost_gpu_seconds, now, plan_id
            )
            self._signal(row_id, victim.job_id, result)
        return result

    def advance(
        self,
        snapshot: ClusterSnapshot,
        now: float,
        in_flight: Sequence[Preemption],
        may_act: Callable[[], bool] = lambda: True,
    ) -> PreemptResult:
        """Advance each of ``in_flight`` by what ``snapshot`` shows (acks, requeues, ends)."""
        result = PreemptResult()
        for row in in_flight:
            if not may_act():
                return result
            self._advance(row, snapshot, now, result)
        return result

    def _advance(
        self, row: Preemption, snapshot: ClusterSnapshot, now: float, result: PreemptResult
    ) -> None:
        victim = row.victim_job_id
        job = snapshot.jobs.get(victim)
        record = self.store.managed_job(victim)
        if job is not None and self._requeued_as_new(row, job):
            # Slurm gives a requeued job a new submit time, so the reconciler has
            # already closed the old record and registered the job afresh as waiting.
            self._finish_requeue(row, job, now, None)
            return
        if record is None or record.state.is_final or job is None:
            self._close(row.id, VICTIM_ENDED)
            log.info("preemption %d: victim %d ended", row.id, victim)
            return
        if abs(row.victim_submit_time - record.slurm_submit_time) > 1:
            self._close(row.id, VICTIM_ENDED)
            return
        if job.is_active:
            self._gpus[row.id] = job_gpus(job)
        if record.state is S.SIGNALLED:
            self._signalled(row, record, job, now, result)
            record = self.store.managed_job(victim) or record
        if record.state is S.CHECKPOINTED:
            self._checkpointed(row, record, job, now, result)
        elif record.state in (S.RUNNING, S.WAITING, S.PINNED) and row.outcome is None:
            # Moved on outside this machine (a grace time-out already recorded, or an operator).
            fresh = self._row(row.id)
            if fresh is not None and fresh.outcome is None:
                self._close(row.id, CANCELLED if record.state is S.RUNNING else REQUEUED)

    def _believable_ack(self, row: Preemption, job: Job, now: float) -> tuple[int, float] | None:
        """The job's acknowledgement, if it can be believed for this preemption.

        The owner writes it into the job's comment, so it counts only when it
        is dated between the signal and now (never in the future) and its step
        is not below a checkpoint the job acknowledged before.
        """
        ack = checkpoint_of(job.comment)
        if ack is None:
            return None
        step, at = ack
        if not row.signalled_at - ACK_SLACK_S <= at <= now + ACK_SLACK_S:
            return None
        with self.store.begin() as session:
            before = session.scalar(
                select(func.max(Preemption.checkpoint_step)).where(
                    Preemption.victim_job_id == row.victim_job_id,
                    Preemption.id != row.id,
                    Preemption.checkpoint_step.is_not(None),
                )
            )
        if before is not None and step < before:
            log.warning(
                "preemption %d: job %d acknowledged step %d, below its earlier step %d; ignored",
                row.id,
                job.job_id,
                step,
                before,
            )
            return None
        return ack

    def _signalled(
        self, row: Preemption, record: ManagedJob, job: Job, now: float, result: PreemptResult
    ) -> None:
        ack = self._believable_ack(row, job, now)
        if ack is not None:
            step, at = ack
            with self.store.begin() as session:
                self._transition(
                    session,
                    record,
                    S.CHECKPOINTED,
                    "preempt-ack",
                    "ack",
                    f"checkpoint at step {step}",
                    now,
                )
                stored = session.get(Preemption, row.id)
                assert stored is not None
                stored.ack_at = at
                stored.checkpoint_step = step
            result.acknowledged.append(job.job_id)
            log.info("preemption %d: job %d acknowledged step %d", row.id, job.job_id, step)
            return
        if now - row.signalled_at > self.settings.grace_s:
            if self.settings.on_no_ack == REQUEUE_ANYWAY:
                with self.store.begin() as session:
                    self._transition(
                        session,
                        record,
                        S.CHECKPOINTED,
                        "preempt-ack",
                        "no_ack",
                        "no checkpoint within the grace time; requeued anyway",
                        now,
                    )
                log.warning(
                    "preemption %d: job %d did not acknowledge; requeuing anyway",
                    row.id,
                    job.job_id,
                )
                return
            with self.store.begin() as session:
                self._transition(
                    session,
                    record,
                    S.RUNNING,
                    "preempt-cancel",
                    "no_ack",
                    f"no checkpoint within {self.settings.grace_s:.0f} s; kept",
                    now,
                )
                stored = session.get(Preemption, row.id)
                assert stored is not None
                stored.outcome = CANCELLED
                stored.lost_gpu_seconds = 0.0
            result.cancelled.append(job.job_id)
            log.warning(
                "preemption %d: job %d did not acknowledge in %.0f s; left running",
                row.id,
                job.job_id,
                self.settings.grace_s,
            )
            return
        if row.id not in self._sent:
            self._signal(row.id, job.job_id, result)

    def _checkpointed(
        self, row: Preemption, record: ManagedJob, job: Job, now: float, result: PreemptResult
    ) -> None:
        if job.is_active:
            acked_run = row.ack_at is None or (
                job.start_time is not None and job.start_time <= row.ack_at + ACK_SLACK_S
            )
            if not acked_run:
                return
            try:
                self.client.requeue(job.job_id, hold=True)
            except SlurmCommandError as exc:
                result.failed[job.job_id] = str(exc)
                log.warning("preemption %d: requeuehold %d failed: %s", row.id, job.job_id, exc)
                if self.metrics is not None:
                    self.metrics.record_preemption("failed")
                return
            result.requeued.append(job.job_id)
            log.info("preemption %d: job %d requeued held", row.id, job.job_id)
            return
        if job.is_pending:
            self._finish_requeue(row, job, now, record)

    def _requeued_as_new(self, row: Preemption, job: Job) -> bool:
        """Slurm shows the victim pending under a submit time set by a requeue after our signal."""
        return (
            job.is_pending
            and job.restarts > 0
            and job.submit_time is not None
            and job.submit_time > row.victim_submit_time + ACK_SLACK_S
            and job.submit_time >= row.signalled_at - ACK_SLACK_S
        )

    def _finish_requeue(
        self, row: Preemption, job: Job, now: float, record: ManagedJob | None
    ) -> None:
        """Close the row as requeued, with the work lost since the checkpoint (or the start)."""
        outcome = REQUEUED if row.ack_at is not None else REQUEUED_WITHOUT_ACK
        since = row.ack_at if row.ack_at is not None else row.signalled_at
        gpus = self._gpus.get(row.id) or job_gpus(job) or 1
        with self.store.begin() as session:
            if record is not None:
                self._transition(
                    session,
                    record,
                    S.WAITING,
                    "preempt-requeued",
                    "preempted",
                    f"requeued for job {row.for_job_id}",
                    now,
                )
            stored = session.get(Preemption, row.id)
            assert stored is not None
            stored.outcome = outcome
            stored.lost_gpu_seconds = max(0.0, now - since) * gpus
        log.info("preemption %d: job %d is waiting again (%s)", row.id, job.job_id, outcome)
        if self.metrics is not None:
            acked = row.ack_at is not None
            self.metrics.record_preemption(
                "acknowledged" if acked else "not_acknowledged",
                (row.ack_at - row.signalled_at) if row.ack_at is not None else None,
            )

    def _record_signal(
        self, record: ManagedJob, for_job: int, estimate: float, now: float, plan_id: int | None
    ) -> int:
        with self.store.begin() as session:
            self._transition(
                session,
                record,
                S.SIGNALLED,
                "preempt-signal",
                "preempt",
                f"for job {for_job}; {estimate:.0f} GPU-s since last checkpoint",
                now,
            )
            row = Preemption(
                plan_id=plan_id,
                victim_job_id=record.job_id,
                victim_submit_time=record.slurm_submit_time,
                for_job_id=for_job,
                signal=self.settings.signal,
                signalled_at=now,
            )
            session.add(row)
            session.flush()
            return int(row.id)

    def _signal(self, row_id: int, job_id: int, result: PreemptResult) -> None:
        try:
            self.client.signal(job_id, self.settings.signal, batch_only=True)
        except SlurmCommandError as exc:
            result.failed[job_id] = str(exc)
            log.warning("preemption %d: signal to job %d failed: %s", row_id, job_id, exc)
            return
        self._sent.add(row_id)
        result.signalled.append(job_id)
        log.info("preemption %d: sent %s to job %d", row_id, self.settings.signal, job_id)

    # -- store helpers --------------------------------------------------------------------------
    def _transition(
        self,
        session: Session,
        record: ManagedJob,
        to_state: ManagedJobState,
        action: str,
        reason: str,
        detail: str,
        now: float,
    ) -> None:
        record_transition(
            session, record.job_id, record.slurm_submit_time, to_state, action, reason, detail, now
        )

    def _row(self, row_id: int) -> Preemption | None:
        with self.store.begin() as session:
            row = session.get(Preemption, row_id)
            if row is not None:
                session.expunge(row)
            return row

    def _close(self, row_id: int, outcome: str) -> None:
        with self.store.begin() as session:
            row = session.get(Preemption, row_id)
            if row is not None and row.outcome is None:
                row.outcome = outcome


__all__ = [
    "CANCELLED",
    "KEEP_RUNNING",
    "REQUEUED",
    "REQUEUED_WITHOUT_ACK",
    "REQUEUE_ANYWAY",
    "VICTIM_ENDED",
    "PreemptResult",
    "PreemptionSettings",
    "Preempter",
]
