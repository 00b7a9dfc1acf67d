"""The actuator: carries out a plan in Slurm, recording each step first.

It is the one executor of plans: starts (below), hand-backs, waiting
jobs' comments, and the plan's preemption, whose first step (each
victim's row and signal) it asks the preempter to take
(:meth:`slurmopt.daemon.preempt.Preempter.begin`); the preempter then
moves the victims on at every cycle.

For each ``Start(job, nodes)`` of a managed job that slurmopt holds, in the
same fresh snapshot the plan was made from:

1. check the job is still pending under slurmopt's hold and recorded
   ``waiting`` (never act on what the snapshot does not show);
2. record ``waiting -> pinned`` with the nodes, under the key
   ``job:submit:pin:attempt`` (attempt = pins recorded before), and commit;
3. ``pin`` (``scontrol update JobId=N NodeList=...``), then ``release``; an
   elastic job started on fewer nodes than it asks for first gets its node
   count set to match (``shrink``: ``NumNodes=``).

A crash after 2 leaves a ``pinned`` record of a job Slurm still holds; the
reconciler withdraws that pin and the job is planned again under the next
attempt's key, so no pin is made twice under one decision and none is lost.

Jobs the plan leaves waiting get their admin comment set to the reason and
expected start, only when that text changes.  Jobs slurmopt can never
place (an unsupported request, too big for the partition) are handed back
to Slurm: recorded as ``left_to_slurm`` first, then released, once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from slurmopt.daemon.managed import ours
from slurmopt.daemon.reconcile import LEFT_TO_SLURM, move
from slurmopt.errors import SlurmCommandError
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.policy.plan import HAND_BACK_REASONS, Plan, PreemptionChoice, Start, Unplaced
from slurmopt.slurm.base import SlurmClient
from slurmopt.store import ManagedJob, ManagedJobState, Store
from slurmopt.tag import with_status

if TYPE_CHECKING:
    from slurmopt.daemon.preempt import PreemptResult

log = logging.getLogger(__name__)

#: Prefix of the status slurmopt writes after the tag in the admin comment of a waiting job.
COMMENT_PREFIX = "waits: "


def waiting_comment(unplaced: Unplaced) -> str:
    """The status for a waiting job's admin comment: its reason and, if known, its start."""
    text = f"{COMMENT_PREFIX}{unplaced.reason.value}"
    if unplaced.expected_start is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M", time.localtime(unplaced.expected_start))
        text += f", expected start {stamp}"
    return text


@dataclass
class ActResult:
    """What one pass of the actuator did."""

    started: list[int] = field(default_factory=list)
    handed_back: list[int] = field(default_factory=list)
    commented: list[int] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    #: Victims of the plan's preemption that were signalled.
    signalled: list[int] = field(default_factory=list)


class PreemptionStarter(Protocol):
    """Takes a planned preemption's first step (:class:`~slurmopt.daemon.preempt.Preempter`)."""

    def begin(
        self,
        choice: PreemptionChoice,
        records: Mapping[int, ManagedJob],
        now: float,
        plan_id: int | None,
    ) -> PreemptResult: ...


class Actuator:
    """Turns a plan into Slurm calls, each recorded before it is made."""

    def __init__(
        self,
        store: Store,
        client: SlurmClient,
        managed_partitions: Collection[str] = (),
        preempter: PreemptionStarter | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.managed_partitions = tuple(managed_partitions)
        self.preempter = preempter
        #: Admin comment last set per job, so an unchanged one is not set again.
        self._comments: dict[int, str] = {}

    def apply(
        self,
        plan: Plan,
        snapshot: ClusterSnapshot,
        records: dict[int, ManagedJob],
        now: float,
        skip: Collection[int] = (),
        may_act: Callable[[], bool] = lambda: True,
        plan_id: int | None = None,
    ) -> ActResult:
        """Carry out ``plan``; ``records`` are the live store records by job id.

        ``plan_id``: the stored plan, which a preemption's rows point to.
        """
        result = ActResult()
        for action in plan.actions:
            if not may_act():
                result.skipped[action.job_id] = "no longer allowed to act"
                continue
            self._start(action, snapshot, records, now, skip, result)
        for unplaced in plan.unplaced:
            job = snapshot.jobs.get(unplaced.job_id)
            record = records.get(unplaced.job_id)
            if job is None or record is None or unplaced.job_id in skip:
                continue
            if not self._ours(job, record):
                continue
            if unplaced.reason in HAND_BACK_REASONS:
                if may_act():
                    self._hand_back(job, record, unplaced, now, result)
                continue
            self._comment(job, waiting_comment(unplaced), result)
        for choice in plan.preemptions:
            if self.preempter is None or not may_act():
                break
            done = self.preempter.begin(choice, records, now, plan_id)
            result.signalled.extend(done.signalled)
            result.failed.update(done.failed)
        for job_id in list(self._comments):
            if job_id not in records:
                del self._comments[job_id]
        return result

    @staticmethod
    def _ours(job: Job, record: ManagedJob) -> bool:
        """Pending under our recorded hold (see :func:`slurmopt.daemon.managed.ours`)."""
        return ours(job, record)

    @staticmethod
    def _too_many_nodes(job: Job, record: ManagedJob, nodes: int) -> bool:
        """More nodes than the job was submitted with (or its recorded elastic maximum)."""
        most = max(job.node_count, record.elastic_max_nodes or 0)
        return nodes > most

    def _start(
        self,
        action: Start,
        snapshot: ClusterSnapshot,
        records: dict[int, ManagedJob],
        now: float,
        skip: Collection[int],
        result: ActResult,
    ) -> None:
        job_id = action.job_id
        job = snapshot.jobs.get(job_id)
        record = records.get(job_id)
        why = None
        if job_id in skip:
            why = "changed by reconciliation this cycle"
        elif job is None or record is None:
            why = "not a job slurmopt holds"
        elif not self._ours(job, record):
            why = f"not waiting under slurmopt's hold (Slurm: {job.state} {job.reason or '-'})"
        elif self._too_many_nodes(job, record, len(action.nodes)):
            why = (
                f"{len(action.nodes)} nodes planned, more than the {job.node_count} "
                "it was submitted with"
            )
        if why is not None or record is None or job is None:
            result.skipped[job_id] = why or "no record"
            log.info("job %d: start skipped: %s", job_id, why)
            return
        nodes = ",".join(action.nodes)
        key = move(
            self.store,
            record,
            ManagedJobState.PINNED,
            "pin",
            action.reason.value,
            action.detail,
            now,
            nodes=action.nodes,
        )
        log.info("job %d: pin recorded (%s) -> %s [%s]", job_id, key, nodes, action.reason.value)
        try:
            if len(action.nodes) != job.node_count:
                # An elastic start: on fewer nodes than asked, or on all of them again
                # after an earlier smaller start that never ran.
                self.client.shrink(job_id, len(action.nodes))
            self.client.pin(job_id, action.nodes)
            self.client.release(job_id)
        except SlurmCommandError as exc:
            # The record says pinned; the reconciler sees what Slurm did and follows it.
            result.failed[job_id] = str(exc)
            log.warning("job %d: pin/release failed: %s", job_id, exc)
            return
        self._comments.pop(job_id, None)
        result.started.append(job_id)
        log.info("job %d: pinned to %s and released (%s)", job_id, nodes, action.reason.value)

    def _hand_back(
        self, job: Job, record: ManagedJob, unplaced: Unplaced, now: float, result: ActResult
    ) -> None:
        with self.store.begin() as session:
            row = session.get(ManagedJob, job.job_id)
            if row is None:
                return
            row.reason = LEFT_TO_SLURM
            row.detail = f"{unplaced.reason.value}: {unplaced.detail}"[:1000]
            row.updated_at = now
        record.reason = LEFT_TO_SLURM
        try:
            self.client.release(job.job_id)
        except SlurmCommandError as exc:
            result.failed[job.job_id] = str(exc)
            log.warning("job %d: release to Slurm failed: %s", job.job_id, exc)
            return
        result.handed_back.append(job.job_id)
        log.info(
            "job %d: left to Slurm and released (%s: %s)",
            job.job_id,
            unplaced.reason.value,
            unplaced.detail,
        )

    def _comment(self, job: Job, status: str, result: ActResult) -> None:
        """Set the status after the tag in the admin comment (the tag itself is kept)."""
        job_id = job.job_id
        text = with_status(job.admin_comment, status)
        if self._comments.get(job_id) == text or job.admin_comment == text:
            self._comments[job_id] = text
            return
        try:
            self.client.set_comment(job_id, text, admin=True)
        except SlurmCommandError as exc:
            log.warning("job %d: cannot set admin comment: %s", job_id, exc)
            return
        self._comments[job_id] = text
        result.commented.append(job_id)


__all__ = ["COMMENT_PREFIX", "HAND_BACK_REASONS", "ActResult", "Actuator", "waiting_comment"]
