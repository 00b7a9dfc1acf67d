"""Which Slurm jobs are slurmopt's, which holds it may lift, and the order held jobs keep.

Pure functions over :class:`~slurmopt.model.Job`: the daemon, the reconciler,
the actuator and ``slurmopt disable`` must agree on these answers, so they
live in one place.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from slurmopt.model import Job
from slurmopt.submit.tag import PREFIX, TagError, parse_comment

#: Slurm's pending reason for a hold by root, SlurmUser or an operator (``scontrol hold``,
#: the job-submit plugin's ``priority=0``).  A user's own hold is ``JobHeldUser``.
ADMIN_HOLD_REASON = "JobHeldAdmin"

#: Slurm's pending reason for a hold the job's owner asked for (``sbatch --hold``).
USER_HOLD_REASON = "JobHeldUser"

#: The tag field the job-submit plugin adds when it holds a job for slurmopt.
PLUGIN_HELD_FIELD = "held"


def _partitions(job: Job) -> list[str]:
    return [p for p in job.partition.split(",") if p]


def is_tagged(job: Job) -> bool:
    """The job's comment carries a well-formed slurmopt tag (a malformed one does not count)."""
    try:
        tag, _ = parse_comment(job.comment)
    except TagError:
        return False
    return tag is not None


def is_managed(job: Job, managed_partitions: Collection[str] = ()) -> bool:
    """slurmopt decides where this job runs: it is tagged, or submitted to a managed partition.

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


def held_by_slurmopt(job: Job) -> bool:
    """Pending under a hold slurmopt placed: an admin hold, or the plugin's marked hold.

    The job-submit plugin holds by setting ``priority=0`` at submission,
    which Slurm 22.05 reports as ``JobHeldUser`` whoever submitted; its
    ``held`` tag field tells that hold from the user's own ``--hold`` (which
    the plugin leaves unmarked).
    """
    if not job.is_pending:
        return False
    if job.reason == ADMIN_HOLD_REASON:
        return True
    return job.reason == USER_HOLD_REASON and plugin_held(job)


def is_user_held(job: Job) -> bool:
    """Pending under its owner's hold, which slurmopt never lifts."""
    return job.is_pending and job.reason == USER_HOLD_REASON and not plugin_held(job)


def holds_for_us(job: Job, managed_partitions: Collection[str] = ()) -> bool:
    """A hold slurmopt may lift: its own hold on a managed job (``slurmopt disable`` lifts these).

    The plugin and the daemon hold only managed jobs, the daemon only as an
    administrator, so an admin hold on a managed job is taken as slurmopt's;
    an operator who wants a managed job kept back holds it as its user
    (``scontrol hold`` run by the user) or removes the tag.
    """
    return held_by_slurmopt(job) and is_managed(job, managed_partitions)


def plugin_held(job: Job) -> bool:
    """The job-submit plugin held this job (it adds ``held`` to the tag when it does)."""
    if not job.comment.startswith(PREFIX):
        return False
    body = job.comment[len(PREFIX) :].partition(" | ")[0]
    return PLUGIN_HELD_FIELD in body.split(",")


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
    "PLUGIN_HELD_FIELD",
    "USER_HOLD_REASON",
    "held_by_slurmopt",
    "holds_for_us",
    "is_admin_held",
    "is_managed",
    "is_tagged",
    "is_user_held",
    "planning_priorities",
    "plugin_held",
]
