"""Backfill: reservations for jobs that cannot start, and starts that delay none of them."""

from __future__ import annotations

from slurmopt.policy.backfill import INFINITY, Timeline
from slurmopt.policy.plan import PlanRequest, Policy, Reason, plan
from tests.unit.test_plan_helpers import NOW, gpu_node, leaf_fabric, pending, running, snapshot

FOUR = ["n1", "n2", "n3", "n4"]


def _cluster(extra_jobs: list, ends_in: float = 100) -> tuple:  # type: ignore[type-arg]
    """Four whole-node 8-GPU nodes on one leaf; a job on n1+n2 ends ``ends_in`` s from now."""
    nodes = [gpu_node(n, alloc=8 if n in ("n1", "n2") else 0) for n in FOUR]
    jobs = [running(50, ["n1", "n2"], ends_in=ends_in), *extra_jobs]
    return snapshot(nodes, jobs), leaf_fabric({"leaf1": FOUR})


def test_blocked_job_reserves_nodes_and_short_jobs_backfill() -> None:
    snap, fabric = _cluster(
        [
            pending(1, nodes=4, priority=100, time_limit_s=1000),
            pending(2, nodes=1, priority=50, time_limit_s=50),  # ends before the reservation
            pending(3, nodes=1, priority=40, time_limit_s=500),  # would delay it
            pending(4, nodes=1, priority=30, time_limit_s=None),  # unlimited: would delay it
        ]
    )
    result = plan(PlanRequest(snap, fabric, Policy(backfill_depth=1)))
    (reservation,) = result.reservations
    assert reservation.job_id == 1
    assert reservation.nodes == ("n1", "n2", "n3", "n4")
    assert reservation.start_time == NOW + 100
    starts = {a.job_id: a for a in result.actions}
    assert set(starts) == {2}
    assert starts[2].reason is Reason.BACKFILL
    unplaced = {u.job_id: u for u in result.unplaced}
    assert unplaced[1].reason is Reason.WAITS_FOR_RESERVATION
    assert unplaced[1].expected_start == NOW + 100
    assert unplaced[3].reason is Reason.RESERVED
    assert unplaced[4].reason is Reason.RESERVED
    # With room for more reservations, job 3 is promised a node once job 1 ends.
    deeper = plan(PlanRequest(snap, fabric))
    assert [(r.job_id, r.start_time) for r in deeper.reservations][:2] == [
        (1, NOW + 100),
        (3, NOW + 1100),
    ]
    assert {a.job_id for a in deeper.actions} == {2}


def test_without_reservations_lower_priority_jobs_take_the_free_nodes() -> None:
    snap, fabric = _cluster(
        [pending(1, nodes=4, priority=100), pending(3, nodes=1, priority=40, time_limit_s=500)]
    )
    result = plan(PlanRequest(snap, fabric, Policy(backfill_depth=0)))
    assert not result.reservations
    assert {a.job_id for a in result.actions} == {3}
    assert {u.job_id: u.reason for u in result.unplaced}[1] is Reason.WAITS_FOR_RESOURCES


def test_unreserved_nodes_take_any_job() -> None:
    # The 3-node job reserves the latest-ready nodes (n1, n2, then n3): n4 stays free
    # even for a job without a time limit.
    snap, fabric = _cluster(
        [
            pending(1, nodes=3, priority=100, time_limit_s=1000),
            pending(2, nodes=1, priority=50, time_limit_s=None),
        ]
    )
    result = plan(PlanRequest(snap, fabric))
    assert result.reservations[0].nodes == ("n1", "n2", "n3")
    (start,) = result.actions
    assert start.job_id == 2 and start.nodes == ("n4",)


def test_backfill_depth_limits_reservations_and_later_jobs_do_not_use_reserved_nodes() -> None:
    snap, fabric = _cluster(
        [
            pending(1, nodes=4, priority=100, time_limit_s=1000),
            pending(2, nodes=3, priority=90, time_limit_s=1000),
            pending(3, nodes=1, priority=10, time_limit_s=5000),
        ]
    )
    result = plan(PlanRequest(snap, fabric, Policy(backfill_depth=1)))
    assert [r.job_id for r in result.reservations] == [1]
    unplaced = {u.job_id: u for u in result.unplaced}
    assert unplaced[2].reason is Reason.WAITS_FOR_RESOURCES  # 2 of 3 nodes free
    assert unplaced[2].expected_start is None
    assert unplaced[3].reason is Reason.RESERVED
    assert not result.actions


def test_second_reservation_starts_after_the_first_ends() -> None:
    snap, fabric = _cluster(
        [
            pending(1, nodes=4, priority=100, time_limit_s=1000),
            pending(2, nodes=4, priority=90, time_limit_s=1000),
        ]
    )
    result = plan(PlanRequest(snap, fabric))
    assert [(r.job_id, r.start_time) for r in result.reservations] == [
        (1, NOW + 100),
        (2, NOW + 1100),
    ]


def test_no_reservation_behind_jobs_without_limits() -> None:
    snap, fabric = _cluster([pending(1, nodes=4)], ends_in=None)  # type: ignore[arg-type]
    result = plan(PlanRequest(snap, fabric))
    assert not result.reservations
    assert result.unplaced[0].expected_start is None


def test_timeline_interval_test_and_available_from() -> None:
    tl = Timeline(now=0.0)
    tl.add_node("a", 4, [(100.0, 4)])  # 4 free now, 8 from t=100
    assert tl.available_from("a", 8) == 100.0
    assert tl.available_from("a", 4) == 0.0
    tl.reserve("a", 8, 100.0, 200.0)
    assert tl.fits_now("a", 4, 100.0)  # ends as the reservation starts
    assert not tl.fits_now("a", 4, 150.0)
    assert tl.available_from("a", 8) == 200.0
    tl.occupy("a", 4, INFINITY)
    assert tl.free["a"] == 0
    assert tl.available_from("a", 8) == INFINITY
