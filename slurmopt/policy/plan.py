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
from slurmopt.policy.gang import GangPlacement
from slurmopt.policy.knobs import Policy
from slurmopt.policy.ordering import NOT_ELIGIBLE_REASONS as NOT_ELIGIBLE_REASONS
from slurmopt.policy.ordering import default_managed, priority_order
from slurmopt.policy.reserve import Reservations
from slurmopt.policy.single import SingleNodePlacement


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
