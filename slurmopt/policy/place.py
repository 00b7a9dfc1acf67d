"""One placement pass: the planner's core with every placement concern mixed in.

Apart from :mod:`slurmopt.policy.plan` so that preemption's fit test
(:func:`slurmopt.policy.preemption.placement_after`) can run a pass without
importing the entry point that itself asks preemption for a choice.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from slurmopt.policy.cache import PlannerCache
from slurmopt.policy.decisions import Plan
from slurmopt.policy.elastic import ElasticStarts
from slurmopt.policy.gang import GangPlacement
from slurmopt.policy.request import PlanRequest
from slurmopt.policy.reserve import Reservations
from slurmopt.policy.single import SingleNodePlacement


class _Planner(SingleNodePlacement, GangPlacement, Reservations, ElasticStarts):
    """One pass: the core's state and walk (``planner``) with every placement concern mixed in."""


def place(
    request: PlanRequest,
    cache: PlannerCache | None = None,
    clock: Callable[[], float] | None = None,
) -> Plan:
    """Starts, reservations and waits for the request's managed pending jobs; no preemption.

    ``cache``: a :class:`PlannerCache` passed to every pass of one planning
    loop, so each pass redoes only what changed since the last; the plan is
    the same with or without it.  ``clock``: what ``Policy.plan_seconds`` is
    measured by (default the monotonic clock; read only when that is set).
    """
    seconds = request.policy.plan_seconds
    deadline = None
    if seconds > 0:
        clock = clock or time.monotonic
        deadline = (clock, clock() + seconds)
    state = PlannerCache() if cache is None else cache
    collecting = gc.isenabled()
    # A pass makes many small objects, none of them cyclic; the cyclic collector, set off by
    # their number, would walk the whole snapshot and cache again and again (a fifth of a
    # large pass).  It runs once the pass is over instead.
    gc.disable()
    try:
        state.refresh(request.snapshot, request.fabric)
        jobs = [j for j in state.pending_jobs() if request.is_managed(j)]
        order = state.planning_order(jobs, request.priorities)
        return _Planner(
            request.snapshot, request.fabric, request.policy, request.at, order, state, deadline
        ).run()
    finally:
        if collecting:
            gc.enable()


__all__ = ["place"]
