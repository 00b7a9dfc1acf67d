"""What Slurm does to a job when it is held, released or requeued: pure, no I/O.

Every stand-in for slurmctld (the simulator's :class:`~slurmopt.sim.slurm.SimSlurmClient`,
the tests' shared fake) applies the same field changes, so the daemon sees the same job
whichever of them it drives; the values are those measured on the sandbox's Slurm 22.05
(``docs/plugin.md``: an admin hold shows ``JobHeldAdmin`` and priority 0).
"""

from __future__ import annotations

import dataclasses

from slurmopt.model import Job, JobState

#: Pending reason of a job under ``scontrol hold`` (kept equal to
#: :data:`slurmopt.daemon.managed.ADMIN_HOLD_REASON`; the daemon package is not imported here).
ADMIN_HOLD = "JobHeldAdmin"


def held(job: Job) -> Job:
    """``scontrol hold``: an administrator's hold, priority 0."""
    return dataclasses.replace(job, held=True, reason=ADMIN_HOLD, priority=0)


def released(job: Job) -> Job:
    """``scontrol release``: no hold, and a priority above 0 again."""
    return dataclasses.replace(job, held=False, reason="", priority=1)


def requeued(job: Job, now: float, hold: bool = True) -> Job:
    """``scontrol requeue[hold]``: pending again, no nodes, one restart more, a new submit time."""
    return dataclasses.replace(
        job,
        state=JobState.PENDING,
        nodes=(),
        held=hold,
        reason=ADMIN_HOLD if hold else "",
        priority=0 if hold else 1,
        restarts=job.restarts + 1,
        start_time=None,
        submit_time=now,
    )


__all__ = ["ADMIN_HOLD", "held", "released", "requeued"]
