"""Which pending jobs the planner sees, in which order, and which Slurm itself would not start.

Separate from placement: these rules read one job at a time (its state,
priority, tag and pending reason), never the nodes, and callers outside
the pass (the simulator's baselines, preemption) use the same order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slurmopt.model import Job
from slurmopt.tag import is_preemptible_comment

#: Pending reasons (prefixes) for which Slurm itself will not start the job now.
NOT_ELIGIBLE_REASONS = (
    "Dependency",
    "BeginTime",
    "QOS",
    "Assoc",
    "Licenses",
    "Reservation",
    "Partition",
    "Invalid",
    "AccountNotAllowed",
    "BadConstraints",
    "JobArrayTaskLimit",
    "DeadLine",
    "MaxJobs",
    "MaxGRES",
)


def default_managed(job: Job) -> bool:
    """Every pending GPU job."""
    return job.is_pending and job.gpus_per_node > 0


def priority_order(
    jobs: Sequence[Job],
    priorities: Mapping[int, int] | None = None,
    *,
    preemptible_last: bool = False,
) -> list[Job]:
    """Highest Slurm priority first, then earliest submit, then lowest id.

    ``priorities`` overrides a job's own figure: a held job shows priority
    0, so the caller passes the priority recorded before it held the job.
    With ``preemptible_last`` (the planner's order) jobs tagged preemptible
    come after all others: any of those may preempt them, so they must not
    take first the nodes a preemption freed for one.
    """
    overrides = priorities or {}

    def key(job: Job) -> OrderKey:
        return order_key(job, overrides.get(job.job_id, job.priority), preemptible_last)

    return sorted(jobs, key=key)


#: Where a job stands in :func:`priority_order`: lower first; unique (the job id is last).
OrderKey = tuple[bool, int, float, int]


def order_key(job: Job, priority: int, preemptible_last: bool) -> OrderKey:
    """The job's place in :func:`priority_order` when its priority is ``priority``."""
    submitted = job.submit_time if job.submit_time is not None else math.inf
    tier = preemptible_last and is_preemptible_comment(job.admin_comment)
    return (tier, -priority, submitted, job.job_id)


def not_eligible(job: Job, now: float) -> str | None:
    """Why Slurm would not start this job now, or None."""
    if job.begin_time is not None and job.begin_time > now:
        return f"begin time {job.begin_time:.0f} is {job.begin_time - now:.0f} s away"
    if job.dependency and job.dependency != "(null)":
        return f"dependency {job.dependency}"
    if job.reservation:
        return f"runs in Slurm reservation {job.reservation}; left to Slurm"
    if job.reason.startswith(NOT_ELIGIBLE_REASONS):
        return f"Slurm reason {job.reason}"
    return None
