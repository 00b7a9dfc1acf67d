"""The planner: which managed jobs start now, on which nodes, and which wait for what.

Pure: ``plan(snapshot, fabric, policy, now)`` reads only its arguments and
returns a frozen :class:`Plan`; Slurm carries the plan out elsewhere.  One
pass walks the managed pending jobs in Slurm's priority order.  Each job
either starts now (a :class:`Start` with the rule that chose its nodes),
gets a backfill :class:`Reservation` at the earliest time its nodes free
up, or stays :class:`Unplaced` with the cause.  A lower-priority job
starts only where it delays no reservation.  ``docs/planner.md`` has the
rules and tie-breaks.  A :class:`PlannerCache` passed to consecutive passes
lets each pass redo only what changed since the last, with the same plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.policy.cache import PlannerCache
from slurmopt.policy.decisions import (
    HAND_BACK_REASONS,
    Action,
    Plan,
    Reason,
    Reservation,
    Start,
    Unplaced,
)
from slurmopt.policy.decisions import PLAN_SCHEMA_VERSION as PLAN_SCHEMA_VERSION
from slurmopt.policy.elastic import ElasticStarts
from slurmopt.policy.fragmentation import JobSizeDistribution
from slurmopt.policy.gang import GangPlacement
from slurmopt.policy.ordering import NOT_ELIGIBLE_REASONS as NOT_ELIGIBLE_REASONS
from slurmopt.policy.ordering import default_managed, priority_order
from slurmopt.policy.reserve import Reservations
from slurmopt.policy.single import SingleNodePlacement


@dataclass(frozen=True, slots=True)
class Policy:
    """The planner's knobs.

    ``backfill_depth``: how many jobs that cannot start get a reservation
    (Slurm's ``bf_max_job_test`` plays the same role); jobs past it simply
    wait and may not delay any reservation.  ``require_single_leaf``: a gang
    that fits on one leaf switch waits for one rather than spreading;
    ``compact_wait_share`` bounds that wait (compare Slurm's ``bf_topopt``;
    0 by default: the gang's reservation is on one leaf, but it starts now
    on the fewest leaves when it can):
    when one leaf frees up only later than this share of the job's time
    limit from now, the gang starts now on the fewest leaves instead (None:
    wait however long it takes).
    ``reserve_one_leaf``: a gang that cannot start now, and fits one leaf, is
    reserved on the leaf that frees up first, however much later than a block
    over several leaves (off: the earliest block on the fewest leaves it then
    needs, as Slurm's backfill reserves; gangs wait less, the jobs behind them
    more).
    ``align_ends``: when FGD picks a partly used node for a single-node job,
    the job goes instead to the partly used node it fits on whose running
    jobs end closest to its own time limit, so that nodes empty at once
    rather than leaving a few free GPUs stranded while one job runs on.
    ``elastic``: a job tagged ``elastic=MIN:MAX`` that cannot start on MAX
    nodes now starts on the most nodes between MIN and MAX that are free
    now, when it would finish sooner that way than by waiting for MAX (its
    time limit is the budget at MIN nodes; the work is taken to scale with
    the nodes).
    ``partitions``: the partitions slurmopt places jobs in (None: all).
    ``job_sizes``: the distribution the FGD measure uses (None: the queue).
    """

    backfill_depth: int = 100
    require_single_leaf: bool = True
    compact_wait_share: float | None = 0.0
    reserve_one_leaf: bool = True
    align_ends: bool = True
    elastic: bool = True
    partitions: frozenset[str] | None = None
    job_sizes: JobSizeDistribution | None = None


class _Planner(SingleNodePlacement, GangPlacement, Reservations, ElasticStarts):
    """One pass: the core's state and walk (``planner``) with every placement concern mixed in."""


def plan(
    snapshot: ClusterSnapshot,
    fabric: Fabric,
    policy: Policy | None = None,
    now: float | None = None,
    managed: Callable[[Job], bool] = default_managed,
    priorities: Mapping[int, int] | None = None,
    *,
    cache: PlannerCache | None = None,
) -> Plan:
    """Decide which managed pending jobs start now and where; see the module docstring.

    ``managed`` picks the pending jobs to plan (default: every pending GPU
    job); every other job still holds what Slurm says it holds.
    ``priorities`` overrides Slurm's priority per job id (held jobs show 0).
    ``now`` defaults to the snapshot's time.  ``cache``: a
    :class:`PlannerCache` passed to every pass of one planning loop, so each
    pass redoes only what changed since the last; the plan is the same with
    or without it.
    """
    policy = policy or Policy()
    at = snapshot.taken_at if now is None else now
    state = PlannerCache() if cache is None else cache
    state.refresh(snapshot, fabric)
    jobs = [j for j in state.pending_jobs() if managed(j)]
    order = priority_order(jobs, priorities, preemptible_last=True)
    return _Planner(snapshot, fabric, policy, at, order, state).run()


__all__ = [
    "HAND_BACK_REASONS",
    "Action",
    "Plan",
    "PlannerCache",
    "Policy",
    "Reason",
    "Reservation",
    "Start",
    "Unplaced",
    "default_managed",
    "plan",
    "priority_order",
]
