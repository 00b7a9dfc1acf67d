"""The planning request: everything one decision reads, in one frozen value.

:func:`slurmopt.policy.plan.plan` takes a :class:`PlanRequest` and returns a
:class:`~slurmopt.policy.plan.Plan`; it reads nothing else.  So a request
can be kept (it pickles) and replayed to get the same plan, and the daemon,
the simulator and ``slurmopt plan`` all build the same kind of value: they
differ only in which jobs they hand over and whether preemption is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.policy.knobs import Policy
from slurmopt.policy.ordering import default_managed


@dataclass(frozen=True, slots=True)
class PreemptionCost:
    """What a preemption costs each victim's GPUs: the checkpoint after the signal, the restart."""

    ack_s: float = 120.0
    restart_s: float = 120.0


@dataclass(frozen=True, slots=True)
class PreemptionAsk:
    """Asks the plan for at most one preemption, and says who may take part.

    ``victims``: the running jobs that may be preempted (None: every running
    ``preemptible`` job); the daemon passes the jobs it records as running,
    less those that already refused a checkpoint.  ``preemptors``: the waiting
    jobs that may preempt (None: every job the plan leaves waiting for room).
    """

    cost: PreemptionCost = field(default_factory=PreemptionCost)
    victims: frozenset[int] | None = None
    preemptors: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """One planning decision's whole input.

    ``managed``: the pending jobs to plan, by id (None: every pending GPU
    job); every other job holds what Slurm says it holds.  ``priorities``
    override Slurm's priority per job id (a held job shows 0).  ``now``
    defaults to the snapshot's time.  ``preemption``: None plans no
    preemption (none is allowed, or one is already in flight).
    """

    snapshot: ClusterSnapshot
    fabric: Fabric
    policy: Policy = field(default_factory=Policy)
    now: float | None = None
    managed: frozenset[int] | None = None
    priorities: Mapping[int, int] = field(default_factory=dict)
    preemption: PreemptionAsk | None = None

    @property
    def at(self) -> float:
        """The time the plan is made for."""
        return self.snapshot.taken_at if self.now is None else self.now

    def is_managed(self, job: Job) -> bool:
        """Whether ``job`` is one of the pending jobs this request plans."""
        if self.managed is None:
            return default_managed(job)
        return job.job_id in self.managed


__all__ = ["PlanRequest", "PreemptionAsk", "PreemptionCost"]
