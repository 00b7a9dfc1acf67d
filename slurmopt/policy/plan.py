"""The planner's entry point: one request in, the whole decision out.

Pure: ``plan(request)`` reads only its :class:`PlanRequest` (snapshot,
fabric, policy, time, managed jobs, priorities, whether to preempt) and
returns a frozen :class:`Plan`; Slurm carries the plan out elsewhere (the
daemon's actuator).  One pass walks the managed pending jobs in Slurm's
priority order.  Each job either starts now (a :class:`Start` with the rule
that chose its nodes), gets a backfill :class:`Reservation` at the earliest
time its nodes free up, or stays :class:`Unplaced` with the cause.  A
lower-priority job starts only where it delays no reservation.  When the
request asks, the plan also names at most one preemption
(:class:`PreemptionChoice`).  ``docs/planner.md`` has the rules and
tie-breaks.  A :class:`PlannerCache` passed to consecutive passes lets each
pass redo only what changed since the last, with the same plan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from slurmopt.policy.cache import PlannerCache
from slurmopt.policy.decisions import (
    HAND_BACK_REASONS,
    Action,
    Plan,
    PreemptionChoice,
    PreemptReason,
    Reason,
    Reservation,
    Start,
    Unplaced,
)
from slurmopt.policy.decisions import PLAN_SCHEMA_VERSION as PLAN_SCHEMA_VERSION
from slurmopt.policy.knobs import Policy
from slurmopt.policy.ordering import NOT_ELIGIBLE_REASONS as NOT_ELIGIBLE_REASONS
from slurmopt.policy.ordering import default_managed, priority_order
from slurmopt.policy.place import place
from slurmopt.policy.preemption import preemption_for
from slurmopt.policy.request import PlanRequest, PreemptionAsk, PreemptionCost

log = logging.getLogger(__name__)


def plan(
    request: PlanRequest,
    *,
    cache: PlannerCache | None = None,
    clock: Callable[[], float] | None = None,
) -> Plan:
    """The whole decision for one request: starts, reservations, waits and any preemption.

    Placement first (:func:`slurmopt.policy.place.place`); then, when the
    request asks for it, the one preemption worth making now for a job the
    placement leaves waiting (:func:`slurmopt.policy.preemption.preemption_for`),
    judged on the cluster as it will be once this plan's starts are made.
    ``cache``: a :class:`PlannerCache` passed to every pass of one planning
    loop, so each pass redoes only what changed since the last; the plan is
    the same with or without it.  ``clock``: what ``Policy.plan_seconds``
    is measured by, from this call on (default the monotonic clock; tests
    pass their own, so a pass cut by the clock is deterministic there).
    """
    placed = place(request, cache, clock)
    if cache is not None and cache.check_due(request.policy.plan_check_every):
        placed = _checked(request, placed, cache)
    if request.preemption is None:
        return placed
    if not placed.complete:
        request = _planned_preemptors(request, placed)
    choice = preemption_for(request, placed)
    return placed if choice is None else replace(placed, preemptions=(choice,))


def _checked(request: PlanRequest, placed: Plan, cache: PlannerCache) -> Plan:
    """``placed`` (made with ``cache``) against a pass without it; that pass's plan wins.

    The cache only makes a pass faster, so the two must be equal; a pass cut
    by the clock is not compared (the cut falls where the clock says).
    """
    policy = request.policy
    if policy.plan_seconds and not placed.complete and placed.depth != policy.plan_budget:
        return placed
    full = place(replace(request, policy=replace(policy, plan_seconds=0.0)))
    if full == placed:
        return full
    cache.mismatches += 1
    cache.clear()
    log.error(
        "planner: a pass made with the PlannerCache differs from the same pass made without "
        "it (%s; %d such passes so far); the pass without it is used and the cache starts over",
        _first_difference(placed, full),
        cache.mismatches,
    )
    return full


def _first_difference(cached: Plan, full: Plan) -> str:
    """Where two plans first differ, in a few words for the log."""
    for what in ("actions", "reservations", "unplaced"):
        for one, other in zip(getattr(cached, what), getattr(full, what), strict=False):
            if one != other:
                return f"{what}: {one} against {other}"
        if len(getattr(cached, what)) != len(getattr(full, what)):
            return f"{what}: {len(getattr(cached, what))} against {len(getattr(full, what))}"
    return "depth or completeness"


def _planned_preemptors(request: PlanRequest, placed: Plan) -> PlanRequest:
    """The request with preemptors limited to the jobs a pass cut short did plan."""
    ask = request.preemption
    assert ask is not None
    cut = {u.job_id for u in placed.unplaced if u.reason is Reason.NOT_PLANNED}
    planned = {u.job_id for u in placed.unplaced} - cut
    allowed = frozenset(planned if ask.preemptors is None else ask.preemptors - cut)
    return replace(request, preemption=replace(ask, preemptors=allowed))


__all__ = [
    "HAND_BACK_REASONS",
    "Action",
    "Plan",
    "PlanRequest",
    "PlannerCache",
    "Policy",
    "PreemptionAsk",
    "PreemptionChoice",
    "PreemptionCost",
    "PreemptReason",
    "Reason",
    "Reservation",
    "Start",
    "Unplaced",
    "default_managed",
    "plan",
    "priority_order",
]
