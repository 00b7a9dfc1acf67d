"""Which Slurm jobs are slurmopt's, which holds it may lift, and the order held jobs keep.

Pure functions over :class:`~slurmopt.model.Job` (and the store's record of
it): the daemon, the reconciler, the actuator and ``slurmopt disable`` must
agree on these answers, so they live in one place.  They read only what a
job's owner cannot edit: the admin comment the job-submit plugin wrote,
Slurm's hold reason, and slurmopt's own records.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from slurmopt.model import Job
from slurmopt.tag import HELD_FIELD, JobTag, TagError, held_mark, parse_comment

if TYPE_CHECKING:
    from slurmopt.store import ManagedJob

#: Slurm's pending reason for a hold by root, SlurmUser or an operator (``scontrol hold``).
#: Only such a hold keeps a job from its owner's ``scontrol release``.
ADMIN_HOLD_REASON = "JobHeldAdmin"

#: Slurm's pending reason for a hold the job's owner asked for (``sbatch --hold``), and for
#: the job-submit plugin's ``priority=0`` (Slurm reads the priority after the plugin ran).
USER_HOLD_REASON = "JobHeldUser"

#: The admin-comment field the job-submit plugin adds when it holds a job for slurmopt.
PLUGIN_HELD_FIELD = HELD_FIELD

#: Reason the actuator records on a job it hands back to Slurm (slurmopt cannot place it).
LEFT_TO_SLURM = "left_to_slurm"

#: Seconds two submit times may differ and still name the same job (the store keeps floats).
SUBMIT_TOLERANCE_S = 1.0


def _partitions(job: Job) -> list[str]:
    return [p for p in job.partition.split(",") if p]


def is_tagged(job: Job) -> bool:
    """The job's *admin* comment carries a well-formed slurmopt tag.

    The owner's own comment never counts: they can edit it at any time.
    The job-submit plugin copies the submit-time tag into the admin comment.
    """
    return trusted_tag(job) is not None


def trusted_tag(job: Job) -> JobTag | None:
    """The tag in the job's admin comment (None: untagged or malformed): all slurmopt trusts."""
    try:
        tag, _ = parse_comment(job.admin_comment)
    except TagError:
        return None
    return tag


def is_managed(job: Job, managed_partitions: Collection[str] = ()) -> bool:
    """slurmopt decides where this job runs: tagged by the plugin, or in a managed partition.

    A job listing several partitions is managed when any of them is; ``*``
    among the managed partitions stands for every partition.
    """
    if is_tagged(job):
        return True
    if "*" in managed_partitions:
        return True
    return any(p in managed_partitions for p in _partitions(job))


def is_admin_held(job: Job) -> bool:
    """Pending under an administrator's hold (``scontrol hold`` by root or an operator)."""
    return job.is_pending and job.reason == ADMIN_HOLD_REASON


def plugin_held(job: Job) -> bool:
    """The job-submit plugin held this job (``held`` in the admin comment's tag)."""
    return held_mark(job.admin_comment)


def held_by_slurmopt(job: Job) -> bool:
    """Pending under a hold of the kind slurmopt places: an admin hold, or the plugin's hold.

    The plugin's ``priority=0`` shows as ``JobHeldUser``; its ``held`` field in
    the admin comment tells it from the owner's own ``--hold``.  Whether the
    hold is really slurmopt's is for :func:`ours` to say, from the store.
    """
    if not job.is_pending:
        return False
    if job.reason == ADMIN_HOLD_REASON:
        return True
    return job.reason == USER_HOLD_REASON and plugin_held(job)


def awaits_admin_hold(job: Job) -> bool:
    """Still under the plugin's ``priority=0``, which the owner could release: to be made admin."""
    return job.is_pending and job.reason == USER_HOLD_REASON and plugin_held(job)


def is_user_held(job: Job) -> bool:
    """Pending under its owner's hold, which slurmopt never lifts."""
    return job.is_pending and job.reason == USER_HOLD_REASON and not plugin_held(job)


def registrable(job: Job) -> bool:
    """A new job slurmopt should start managing: pending GPU job the plugin held and marked.

    An operator's hold on a job (even one in a managed partition) is never
    taken for slurmopt's: only the plugin's marker, which the owner cannot
    write, makes a job slurmopt's to hold and release.
    """
    return job.gpus_per_node > 0 and plugin_held(job) and held_by_slurmopt(job)


def same_incarnation(record: ManagedJob, job: Job) -> bool:
    """The record and Slurm's job are the same submission (Slurm reuses job ids)."""
    if job.submit_time is None:
        return True
    return abs(job.submit_time - record.slurm_submit_time) < SUBMIT_TOLERANCE_S


def ours(job: Job, record: ManagedJob | None) -> bool:
    """A hold slurmopt may lift: its own, as its records say.

    The job is pending under an admin hold or the plugin's marked hold, and
    the store records it ``waiting`` for slurmopt (same submission, not
    handed back to Slurm).  An operator's hold on any other job, and the
    owner's own hold, are never lifted; this one answer serves the daemon,
    the actuator and ``slurmopt disable``.
    """
    from slurmopt.store.models import ManagedJobState

    return (
        record is not None
        and held_by_slurmopt(job)
        and record.state is ManagedJobState.WAITING
        and record.reason != LEFT_TO_SLURM
        and same_incarnation(record, job)
    )


def advised(job: Job, managed_partitions: Collection[str] = ()) -> bool:
    """A job an advisory pass plans: pending, asking for GPUs, and managed (held or not)."""
    return job.is_pending and job.gpus_per_node > 0 and is_managed(job, managed_partitions)


def planning_priorities(jobs: Iterable[Job], recorded: Mapping[int, int | None]) -> dict[int, int]:
    """The priority each planned job is ordered by, since a held job shows Slurm priority 0.

    A job's priority is known when it is not held (Slurm's own figure) or
    when the store recorded it before slurmopt held the job.  If every job
    has a known priority, those are used: a multifactor site keeps its order.
    If any does not (the plugin held it at submission, before Slurm gave it
    a priority), every job gets the same figure, so the planner orders all
    of them by submit time, then job id: what priority/basic does, and the
    only order that ranks known and unknown priorities consistently.
    """
    listed = list(jobs)
    known: dict[int, int] = {}
    for job in listed:
        before = recorded.get(job.job_id)
        if before is not None and before > 0:
            known[job.job_id] = before
        elif job.priority > 0 and not job.held:
            known[job.job_id] = job.priority
    if len(known) == len(listed):
        return known
    return dict.fromkeys((j.job_id for j in listed), 0)


__all__ = [
    "ADMIN_HOLD_REASON",
    "LEFT_TO_SLURM",
    "PLUGIN_HELD_FIELD",
    "USER_HOLD_REASON",
    "advised",
    "awaits_admin_hold",
    "held_by_slurmopt",
    "is_admin_held",
    "is_managed",
    "is_tagged",
    "is_user_held",
    "ours",
    "planning_priorities",
    "plugin_held",
    "registrable",
    "same_incarnation",
    "trusted_tag",
]
