"""A bounded pass: ``plan_budget`` plans the head of the queue in full and nothing past it.

The budget counts jobs in priority order, not seconds, so these tests are
deterministic.  A job's decision depends only on the jobs above it, so the
head of a cut pass is exactly the head of a whole one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurmopt.fabric.generators import fat_tree
from slurmopt.metrics import DaemonMetrics
from slurmopt.policy.plan import (
    Plan,
    PlannerCache,
    PlanRequest,
    Policy,
    PreemptionAsk,
    PreemptionCost,
    Reason,
    plan,
    priority_order,
)
from slurmopt.sim import read_trace, simulate
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.schedulers import parse_variant
from tests.unit.test_plan_cache import FakeCluster
from tests.unit.test_plan_helpers import NOW, gpu_node, leaf_fabric, pending, running, snapshot
from tests.unit.test_sim_variants import OFF, SHORT_BUT_ASKS_LONG

PRE = "slurmopt:managed,preemptible"


def _request(policy: Policy, seed: int = 3) -> PlanRequest:
    fabric = fat_tree(64, 8, 4)
    cluster = FakeCluster(fabric, extra_nodes=3, seed=seed)
    return PlanRequest(cluster.snapshot(), fabric, policy, cluster.now)


def _decisions(result: Plan) -> dict[int, tuple[str, ...]]:
    """Each job's decision: started where, reserved where and from when, or why it waits."""
    out: dict[int, tuple[str, ...]] = {}
    for a in result.actions:
        out[a.job_id] = ("start", *a.nodes, a.reason.value, a.detail)
    for u in result.unplaced:
        out[u.job_id] = ("wait", u.reason.value, u.detail, repr(u.expected_start))
    for r in result.reservations:
        out[r.job_id] += ("reserve", *r.nodes, repr(r.start_time))
    return out


def test_no_budget_plans_every_job_and_the_json_is_unchanged() -> None:
    request = _request(Policy())
    result = plan(request)
    jobs = [j for j in request.snapshot.jobs.values() if request.is_managed(j)]
    assert result.complete and result.depth == len(jobs)
    assert "complete" not in result.to_json() and "depth" not in result.to_json()
    assert not any(u.reason is Reason.NOT_PLANNED for u in result.unplaced)
    assert plan(dataclasses.replace(request, policy=Policy(plan_budget=len(jobs)))) == result


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("budget", [1, 5, 17, 40])
def test_the_head_of_a_cut_pass_is_the_head_of_a_whole_pass(seed: int, budget: int) -> None:
    whole_request = _request(Policy(), seed)
    whole = _decisions(plan(whole_request))
    request = _request(Policy(plan_budget=budget), seed)
    cut = plan(request)
    order = priority_order(
        [j for j in request.snapshot.jobs.values() if request.is_managed(j)],
        preemptible_last=True,
    )
    head, tail = order[:budget], order[budget:]
    assert cut.depth == len(head) and cut.complete is (not tail)
    decisions = _decisions(cut)
    for job in head:
        assert decisions[job.job_id] == whole[job.job_id]
    tail_ids = {j.job_id for j in tail}
    assert not tail_ids & {a.job_id for a in cut.actions}
    assert not tail_ids & {r.job_id for r in cut.reservations}
    for u in cut.unplaced:
        if u.job_id in tail_ids:
            assert u.reason is Reason.NOT_PLANNED and u.expected_start is None
            assert f"budget of {budget} jobs" in u.detail
    if tail:
        doc = cut.to_json()
        assert doc["complete"] is False and doc["depth"] == budget


def test_a_cut_pass_with_a_cache_is_the_cut_pass_without() -> None:
    cache = PlannerCache()
    for budget in (3, 0, 10, 3):
        request = _request(Policy(plan_budget=budget))
        assert plan(request, cache=cache) == plan(request)


def test_a_job_past_the_cut_never_starts_even_where_it_would_fit() -> None:
    # Job 1 (first) waits for both nodes; job 2 would backfill on the free node b for 100 s,
    # which delays no reservation of job 1.  With a budget of one job it is not looked at.
    fabric = leaf_fabric({"l1": ["a", "b"]})
    jobs = [
        running(9, ["a"], ends_in=3000),
        pending(1, nodes=2, priority=500),
        pending(2, priority=100, time_limit_s=100),
    ]
    snap = snapshot([gpu_node("a", alloc=8), gpu_node("b")], jobs)
    whole = plan(PlanRequest(snap, fabric, Policy(), NOW))
    assert [a.job_id for a in whole.actions] == [2]
    cut = plan(PlanRequest(snap, fabric, Policy(plan_budget=1), NOW))
    assert cut.actions == () and [r.job_id for r in cut.reservations] == [1]
    assert {u.job_id: u.reason for u in cut.unplaced} == {
        1: Reason.WAITS_FOR_RESERVATION,
        2: Reason.NOT_PLANNED,
    }
    assert cut.depth == 1 and not cut.complete


def test_no_preemption_is_chosen_for_a_job_past_the_cut() -> None:
    # Job 1 cannot use the preemptible victim's node (it runs exclusive elsewhere); job 2,
    # below it, could preempt the victim.  A cut after job 1 leaves job 2 unplanned, so no
    # preemption is made for it.
    fabric = leaf_fabric({"l1": ["a", "b"]})
    victim = dataclasses.replace(running(9, ["a"], ends_in=3000), comment=PRE, admin_comment=PRE)
    jobs = [
        victim,
        pending(1, priority=500, partition="other"),
        pending(2, nodes=2, priority=100),
    ]
    snap = snapshot(
        [gpu_node("a", alloc=8), gpu_node("b"), gpu_node("c", partitions=("other",))],
        jobs,
        partitions={"gpu": ["a", "b"], "other": ["c"]},
    )
    free = PreemptionAsk(cost=PreemptionCost(ack_s=0.0, restart_s=0.0))
    whole = plan(PlanRequest(snap, fabric, Policy(), NOW, preemption=free))
    assert [p.for_job_id for p in whole.preemptions] == [2]
    cut = plan(PlanRequest(snap, fabric, Policy(plan_budget=1), NOW, preemption=free))
    assert [a.job_id for a in cut.actions] == [1]
    assert cut.preemptions == () and not cut.complete


def test_the_budget_is_a_simulator_variant() -> None:
    policy, _, _ = parse_variant("slurmopt:plan_budget=25")
    assert policy.plan_budget == 25


def test_the_daemon_metric_reports_the_depth() -> None:
    metrics = DaemonMetrics(())
    result = plan(_request(Policy(plan_budget=7)))
    metrics.observe_plan(result, 0.01)
    assert metrics.registry.get_sample_value("slurmopt_plan_depth") == 7


def test_a_simulation_with_a_budget_of_one_job_starts_the_head_first(tmp_path: Path) -> None:
    # Job 1 holds 3 of 4 nodes until 100; job 2 needs all 4 from then until 150; job 3 (one
    # node, 10 s) backfills at once in a whole pass.  With one job a pass no pass reaches it
    # while job 2 waits, so it starts only once job 2 is done with the nodes.
    path = tmp_path / "trace.csv"
    path.write_text(SHORT_BUT_ASKS_LONG)
    trace = read_trace(path, "csv")
    fabric = parse_fabric_spec("fat-tree:4:4")
    whole = simulate(trace, fabric, "slurmopt:runtime=oracle", OFF, bf_interval_s=0)
    cut = simulate(trace, fabric, "slurmopt:runtime=oracle,plan_budget=1", OFF, bf_interval_s=0)
    starts = {o.job.job_id: o.start for o in whole.outcomes}
    assert starts == {1: 0.0, 2: 100.0, 3: 2.0}
    assert {o.job.job_id: o.start for o in cut.outcomes} == {1: 0.0, 2: 100.0, 3: 150.0}


class Ticks:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return float(self.reads)


@pytest.mark.parametrize("seconds", [0.5, 5.5, 16.0])
def test_a_pass_cut_by_the_clock_is_the_pass_cut_at_the_same_depth(seconds: float) -> None:
    # The clock is read once as the pass starts and once before each job but the first, so
    # with one tick a read, a budget of s seconds plans ceil(s) jobs (at least one).
    depth = max(1, -int(-seconds // 1))
    clocked = plan(_request(Policy(plan_seconds=seconds)), clock=Ticks())
    counted = plan(_request(Policy(plan_budget=depth)))
    assert clocked.depth == depth and not clocked.complete
    assert clocked.actions == counted.actions and clocked.reservations == counted.reservations
    cut = {u.job_id for u in counted.unplaced if u.reason is Reason.NOT_PLANNED}
    assert cut == {u.job_id for u in clocked.unplaced if u.reason is Reason.NOT_PLANNED}
    for u in clocked.unplaced:
        if u.job_id in cut:
            assert f"budget of {seconds:g} s (plan_seconds)" in u.detail
        else:
            assert u in counted.unplaced


def test_the_count_budget_cuts_first_when_it_is_shorter() -> None:
    result = plan(_request(Policy(plan_budget=3, plan_seconds=100.0)), clock=Ticks())
    assert result.depth == 3
    assert any("budget of 3 jobs" in u.detail for u in result.unplaced)


def test_no_clock_is_read_without_a_seconds_budget() -> None:
    def no_clock() -> float:
        raise AssertionError("clock read")

    request = _request(Policy())
    assert plan(request, clock=no_clock) == plan(request)


def test_a_generous_seconds_budget_leaves_the_pass_whole() -> None:
    request = _request(Policy())
    clocked = plan(dataclasses.replace(request, policy=Policy(plan_seconds=1e6)), clock=Ticks())
    assert clocked.complete and clocked == plan(request)
