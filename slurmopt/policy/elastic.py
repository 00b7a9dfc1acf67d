"""Elastic starts: a job tagged ``elastic=MIN:MAX`` may start now on fewer nodes than MAX.

It does when that finishes sooner than waiting for MAX nodes, taking the
work to scale with the nodes.  Kept apart because it is a policy over the
other placements (it retries them at smaller sizes), not a placement rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from slurmopt.model import Job
from slurmopt.policy.backfill import INFINITY
from slurmopt.policy.decisions import Reason
from slurmopt.policy.planner import Ask, PlannerCore
from slurmopt.tag import elastic_range


class ElasticStarts(PlannerCore):
    """Starts elastic jobs smaller when that finishes sooner; mixed into the planner by ``plan``."""

    def _elastic_span(self, job: Job) -> tuple[int, int] | None:
        """``(MIN, MAX)`` nodes of an elastic job the planner may start smaller; else None."""
        if not self.policy.elastic or job.required_nodes:
            return None
        span = elastic_range(job.admin_comment)
        if span is None or span[0] >= span[1] or not span[0] <= job.node_count <= span[1]:
            return None
        return span

    def _start_elastic(self, asks: Sequence[Ask], low: int) -> bool:
        """Start an elastic job on fewer nodes now if that finishes before waiting for all.

        Its time limit is the budget at ``low`` nodes, so on ``n`` nodes it
        is expected to run ``limit * low / n``; the full size would start at
        its earliest block (never, when none frees up).  The timeline keeps
        the whole limit on the nodes taken, so no reservation is delayed.
        """
        job = asks[0].job
        limit = asks[0].end - self.now
        if limit >= INFINITY:
            return False
        k = job.node_count
        blocks = (self._earliest_block(ask) for ask in asks)
        full = min((b[0] for b in blocks if b is not None), default=INFINITY)
        finish_full = full + limit * low / k
        for n in range(k - 1, low - 1, -1):
            if self.now + limit * low / n >= finish_full:
                return False  # fewer nodes would finish later still
            smaller = replace(job, node_count=n)
            for ask in asks:
                if self._try_start(replace(ask, job=smaller)) is None:
                    started = self.actions[-1]
                    wait = "never" if full >= INFINITY else f"from now+{full - self.now:.0f} s"
                    detail = f"elastic {low}:{k}: {n} of {k} nodes now ({k} {wait}); "
                    self.actions[-1] = replace(
                        started, reason=Reason.ELASTIC_START, detail=detail + started.detail
                    )
                    return True
        return False
