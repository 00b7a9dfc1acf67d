"""The indexes that make a pass linear decide exactly what the scans they replace decided.

End alignment walks a per-pool end index instead of scanning a free-GPU
bucket; its answer, ties included (the first equally near node in the
bucket's heap), must be the scan's.  The planning order kept in the cache
must follow changed priorities.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from benchmarks.synthetic import next_cycle, synthetic_snapshot
from slurmopt.fabric.generators import fat_tree
from slurmopt.policy.plan import PlannerCache, PlanRequest, Policy, plan
from slurmopt.policy.planner import Ask
from slurmopt.policy.single import Fits, SingleNodePlacement
from tests.unit.test_plan_cache import FakeCluster


def _scan_closest_end(
    self: SingleNodePlacement,
    ask: Ask,
    heap: list[int],
    first: str,
    free: int,
    fits: Fits,
    bound: float = float("inf"),
) -> str:
    """The scan the end index replaced: every node of the bucket, in the heap's list order."""
    end = ask.end
    gap = self._end_gap(first, end)
    if gap is None:
        return first
    best = (gap, first)
    for name in map(ask.pool.layout.name_of, heap):
        if self.timeline.free[name] != free:
            continue
        other = self._end_gap(name, end)
        if other is None or other >= best[0]:
            continue
        if self._fits_now(ask, self.snapshot.nodes[name], respect=True):
            best = (other, name)
    return best[1]


def _requests(seed: int) -> list[PlanRequest]:
    """Passes over a changing cluster, and one busy synthetic cluster whose starts tie on ends."""
    fabric = fat_tree(96, 8, 4)
    cluster = FakeCluster(fabric, extra_nodes=5, seed=seed)
    requests = []
    for _ in range(6):
        requests.append(PlanRequest(cluster.snapshot(), fabric, Policy(), cluster.now))
        cluster.step(plan(requests[-1]))
    busy = fat_tree(256, 16, 4)
    snap = synthetic_snapshot(sorted(busy.compute_nodes), 190, 1200, seed)
    requests.append(PlanRequest(snap, busy))
    return requests


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_end_index_chooses_what_the_bucket_scan_chose(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = _requests(seed)
    indexed = [plan(request) for request in requests]
    monkeypatch.setattr(SingleNodePlacement, "_closest_end", _scan_closest_end)
    scanned = [plan(request) for request in requests]
    assert indexed == scanned
    assert sum(len(p.actions) for p in indexed) > 0


def test_a_kept_planning_order_follows_changed_priorities() -> None:
    fabric = fat_tree(64, 8, 4)
    cluster = FakeCluster(fabric, extra_nodes=0, seed=5)
    request = PlanRequest(cluster.snapshot(), fabric, Policy(), cluster.now)
    cache = PlannerCache()
    assert plan(request, cache=cache) == plan(request)
    pending = sorted(j.job_id for j in request.snapshot.jobs.values() if j.is_pending)
    flipped = dataclasses.replace(
        request, priorities={job_id: i for i, job_id in enumerate(pending)}
    )
    assert plan(flipped, cache=cache) == plan(flipped)
    assert plan(request, cache=cache) == plan(request)


@pytest.mark.parametrize("seed", [1, 2])
def test_consecutive_synthetic_cycles_with_the_cache_equal_full_passes(seed: int) -> None:
    # The benchmark's cycles (starts made, jobs ended and arrived), some long enough that
    # running jobs overrun: the cached pass must be the full pass at every step.
    fabric = fat_tree(256, 16, 4)
    snap = synthetic_snapshot(sorted(fabric.compute_nodes), 190, 1200, seed)
    rng = random.Random(seed)
    cache = PlannerCache()
    result = plan(PlanRequest(snap, fabric), cache=cache)
    reservations = 0
    for step in range(8):
        starts = [(a.job_id, a.nodes) for a in result.actions]
        snap = next_cycle(snap, starts, rng, step_s=(30.0, 5000.0)[step % 2], ends=step * 3)
        result = plan(PlanRequest(snap, fabric), cache=cache)
        assert result == plan(PlanRequest(snap, fabric)), f"cycle {step}"
        reservations += len(result.reservations)
    assert reservations > 0
