"""The planner: gang and single-node placement, eligibility, order, accounting, JSON."""

from __future__ import annotations

import json

from slurmopt.model import NodeState
from slurmopt.policy.fragmentation import JobShape, JobSizeDistribution
from slurmopt.policy.plan import PlanRequest, Policy, Reason, Start, plan
from tests.unit.test_plan_helpers import (
    NOW,
    busy_leaves,
    gpu_node,
    leaf_fabric,
    pending,
    running,
    snapshot,
)

EXAMPLE = {"leafA": 3, "leafB": 5, "leafC": 2, "leafD": 6}
SPREAD = Policy(require_single_leaf=False)
HALF = Policy(compact_wait_share=0.5)


def _starts(result: object) -> dict[int, Start]:
    return {a.job_id: a for a in result.actions}  # type: ignore[attr-defined]


def _unplaced(result: object) -> dict[int, object]:
    return {u.job_id: u for u in result.unplaced}  # type: ignore[attr-defined]


def _leaf_counts(nodes: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in nodes:
        leaf = n.split("n")[0]
        counts[leaf] = counts.get(leaf, 0) + 1
    return counts


def test_five_node_gang_goes_on_the_leaf_with_exactly_five_free() -> None:
    nodes, jobs, fabric = busy_leaves(EXAMPLE)
    result = plan(PlanRequest(snapshot(nodes, [*jobs, pending(1, nodes=5)]), fabric))
    start = _starts(result)[1]
    assert start.reason is Reason.GANG_FEWEST_LEAVES
    assert start.nodes == tuple(f"leafBn{i}" for i in range(5))


def test_seven_node_gang_spans_two_leaves_that_fit_exactly() -> None:
    nodes, jobs, fabric = busy_leaves(EXAMPLE)
    result = plan(PlanRequest(snapshot(nodes, [*jobs, pending(1, nodes=7)]), fabric, SPREAD))
    assert _leaf_counts(_starts(result)[1].nodes) == {"leafB": 5, "leafC": 2}


def _one_leaf_frees_in(ends_in: float | None) -> tuple[object, object]:
    """EXAMPLE's leaves; leafD (6 of 8 free) gets a seventh node after ``ends_in`` s."""
    nodes, jobs, fabric = busy_leaves(EXAMPLE)
    jobs = [j for j in jobs if j.nodes != ("leafDn6",)]
    jobs.append(running(99_999, ["leafDn6"], ends_in=ends_in))
    return snapshot(nodes, [*jobs, pending(1, nodes=7)]), fabric  # limit 3600 s


def test_seven_node_gang_waits_for_one_leaf_within_the_bound() -> None:
    snap, fabric = _one_leaf_frees_in(600.0)  # 600 s <= 0.5 x 3600 s
    result = plan(PlanRequest(snap, fabric, HALF))  # type: ignore[arg-type]
    assert not result.actions
    (held,) = result.reservations
    assert held.job_id == 1 and held.start_time == NOW + 600
    assert _leaf_counts(held.nodes) == {"leafD": 7}
    assert _unplaced(result)[1].reason is Reason.WAITS_FOR_RESERVATION  # type: ignore[attr-defined]


def test_seven_node_gang_spreads_when_one_leaf_frees_too_late() -> None:
    snap, fabric = _one_leaf_frees_in(3000.0)  # 3000 s > 0.5 x 3600 s
    start = _starts(plan(PlanRequest(snap, fabric, HALF)))[1]  # type: ignore[arg-type]
    assert _leaf_counts(start.nodes) == {"leafB": 5, "leafC": 2}
    assert "one leaf only from now+3000 s, over the 1800 s bound" in start.detail


def test_seven_node_gang_spreads_when_no_leaf_is_known_to_free() -> None:
    snap, fabric = _one_leaf_frees_in(None)  # running jobs without a limit
    start = _starts(plan(PlanRequest(snap, fabric)))[1]  # type: ignore[arg-type]
    assert _leaf_counts(start.nodes) == {"leafB": 5, "leafC": 2}
    assert "one leaf only never" in start.detail


def test_seven_node_gang_waits_for_one_leaf_without_a_bound() -> None:
    snap, fabric = _one_leaf_frees_in(3000.0)
    result = plan(PlanRequest(snap, fabric, Policy(compact_wait_share=None)))  # type: ignore[arg-type]
    assert not result.actions
    assert _leaf_counts(result.reservations[0].nodes) == {"leafD": 7}
    snap, fabric = _one_leaf_frees_in(None)
    result = plan(PlanRequest(snap, fabric, Policy(compact_wait_share=None)))  # type: ignore[arg-type]
    unplaced = _unplaced(result)[1]
    assert unplaced.reason is Reason.NEEDS_NODES_IN_ONE_LEAF  # type: ignore[attr-defined]
    assert "16 free across 4 leaves, at most 6 on one" in unplaced.detail  # type: ignore[attr-defined]


def test_gang_reservation_on_one_leaf_or_at_the_earliest_block() -> None:
    # Every node busy. Leaf a: a0 frees in 100 s, the rest in 5000 s. Leaf b: b0 in 200 s,
    # b1 in 3000 s, the rest in 5000 s. A 2-node gang's first one-leaf block is b0+b1 at
    # 3000 s; the first block anywhere is a0+b0 at 200 s.
    ends = {"a0": 100.0, "b0": 200.0, "b1": 3000.0}
    names = ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]
    nodes = [gpu_node(n, alloc=8) for n in names]
    jobs = [running(100 + i, [n], ends_in=ends.get(n, 5000.0)) for i, n in enumerate(names)]
    snap = snapshot(nodes, [*jobs, pending(1, nodes=2)])
    fabric = leaf_fabric({"a": names[:4], "b": names[4:]})
    (held,) = plan(PlanRequest(snap, fabric)).reservations
    assert (held.start_time, sorted(held.nodes)) == (NOW + 3000, ["b0", "b1"])
    (held,) = plan(PlanRequest(snap, fabric, Policy(reserve_one_leaf=False))).reservations
    assert (held.start_time, sorted(held.nodes)) == (NOW + 200, ["a0", "b0"])


def test_gang_larger_than_free_waits_with_counts() -> None:
    nodes, jobs, fabric = busy_leaves(EXAMPLE)
    result = plan(PlanRequest(snapshot(nodes, [*jobs, pending(1, nodes=17)]), fabric, SPREAD))
    assert not result.actions
    unplaced = _unplaced(result)[1]
    assert unplaced.reason is Reason.WAITS_FOR_RESOURCES  # type: ignore[attr-defined]


def test_twelve_nodes_over_three_leaves() -> None:
    nodes, jobs, fabric = busy_leaves(EXAMPLE)
    result = plan(PlanRequest(snapshot(nodes, [*jobs, pending(1, nodes=12)]), fabric, SPREAD))
    assert _leaf_counts(_starts(result)[1].nodes) == {"leafB": 5, "leafC": 2, "leafD": 5}


def test_gangs_in_priority_order_account_for_each_other() -> None:
    nodes, jobs, fabric = busy_leaves(EXAMPLE)
    # 5 -> leafB; the next 5 -> leafD (6 free, the only leaf left with 5); 3 -> leafA.
    jobs += [pending(1, nodes=5), pending(2, nodes=5), pending(3, nodes=3), pending(4, nodes=3)]
    policy = Policy(backfill_depth=0, compact_wait_share=None)
    starts = _starts(plan(PlanRequest(snapshot(nodes, jobs), fabric, policy)))
    assert _leaf_counts(starts[1].nodes) == {"leafB": 5}
    assert _leaf_counts(starts[2].nodes) == {"leafD": 5}
    assert _leaf_counts(starts[3].nodes) == {"leafA": 3}
    assert 4 not in starts  # 1 + 2 left on two leaves; one leaf required
    used = [n for s in starts.values() for n in s.nodes]
    assert len(used) == len(set(used))


def test_two_gpu_job_fills_the_gap_beside_other_jobs() -> None:
    nodes = [gpu_node("a", alloc=6), gpu_node("b")]
    result = plan(
        PlanRequest(snapshot(nodes, [pending(1, gpus=2)]), leaf_fabric({"l1": ["a", "b"]}))
    )
    start = _starts(result)[1]
    assert start.nodes == ("a",)
    assert start.reason is Reason.BEST_FIT_NODE


def test_single_node_choice_minimises_unusable_gpus() -> None:
    # Shapes: 4-GPU and 3-GPU single-node jobs.  Free: c 4, d 3, e 2.
    # From e (2 -> 0): the 2 stranded GPUs disappear, unusable falls by 4: best.
    # Without e: from c (4 -> 2) both shapes lose GPUs (+4); from d (3 -> 1) -1.
    nodes = [gpu_node("c", alloc=4), gpu_node("d", alloc=5), gpu_node("e", alloc=6)]
    sizes = JobSizeDistribution("test", (JobShape(1, 4, 1.0), JobShape(1, 3, 1.0)))
    policy = Policy(job_sizes=sizes)
    fabric = leaf_fabric({"l1": ["c", "d", "e"]})
    result = plan(PlanRequest(snapshot(nodes, [pending(1, gpus=2)]), fabric, policy))
    assert _starts(result)[1].nodes == ("e",)
    result = plan(PlanRequest(snapshot(nodes[:2], [pending(1, gpus=2)]), fabric, policy))
    assert _starts(result)[1].nodes == ("d",)


def test_eight_gpu_job_needs_a_fully_free_node_and_accounts_it() -> None:
    nodes = [gpu_node("a", alloc=1), gpu_node("b")]
    jobs = [pending(1), pending(2)]
    result = plan(
        PlanRequest(
            snapshot(nodes, jobs), leaf_fabric({"l1": ["a", "b"]}), Policy(backfill_depth=0)
        )
    )
    assert _starts(result)[1].nodes == ("b",)
    assert 2 not in _starts(result)
    assert _unplaced(result)[2].reason is Reason.WAITS_FOR_RESOURCES  # type: ignore[attr-defined]


def test_slurm_ineligible_jobs_never_start() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(8)]
    jobs = [
        pending(1, dependency="afterok:77(unfulfilled)"),
        pending(2, begin_time=NOW + 600),
        pending(3, reason="QOSMaxGRESPerUser"),
        pending(4, reason="AssocGrpGRES"),
        pending(5, reason="Licenses"),
        pending(6, reservation="maint"),
        pending(7, het_job_id=7),
        pending(8, reason="Priority", begin_time=NOW - 5),
    ]
    result = plan(PlanRequest(snapshot(nodes, jobs), leaf_fabric({"l1": [n.name for n in nodes]})))
    assert set(_starts(result)) == {8}
    unplaced = _unplaced(result)
    for job_id in (1, 2, 3, 4, 5, 6):
        assert unplaced[job_id].reason is Reason.NOT_ELIGIBLE  # type: ignore[attr-defined]
    assert unplaced[7].reason is Reason.UNSUPPORTED_REQUEST  # type: ignore[attr-defined]
    assert "QOSMaxGRESPerUser" in unplaced[3].detail  # type: ignore[attr-defined]


def test_priority_order_and_held_job_override() -> None:
    nodes = [gpu_node("a")]
    fabric = leaf_fabric({"l1": ["a"]})
    low = pending(1, priority=10)
    high = pending(2, priority=20)
    held = pending(3, priority=0, held=True, reason="JobHeldUser")
    result = plan(PlanRequest(snapshot(nodes, [low, high, held]), fabric, Policy(backfill_depth=0)))
    assert set(_starts(result)) == {2}
    result = plan(
        PlanRequest(
            snapshot(nodes, [low, high, held]), fabric, Policy(backfill_depth=0), priorities={3: 50}
        )
    )
    assert set(_starts(result)) == {3}


def test_equal_priority_goes_by_submit_time_then_id() -> None:
    nodes = [gpu_node("a")]
    fabric = leaf_fabric({"l1": ["a"]})
    jobs = [
        pending(5, priority=1, submit_time=NOW - 10),
        pending(6, priority=1, submit_time=NOW - 20),
    ]
    assert set(
        _starts(plan(PlanRequest(snapshot(nodes, jobs), fabric, Policy(backfill_depth=0))))
    ) == {6}


def test_node_constraints_are_honoured() -> None:
    nodes = [
        gpu_node("a", features=frozenset({"h100"})),
        gpu_node("b", features=frozenset({"h100", "ib"})),
        gpu_node("c", features=frozenset({"a100"})),
        gpu_node("d", flags=frozenset({"DRAIN"})),
        gpu_node("e"),
    ]
    fabric = leaf_fabric({"l1": [n.name for n in nodes]})
    cases = {
        1: (pending(1, features="h100&ib"), ("b",)),
        2: (pending(2, features="a100|v100"), ("c",)),
        3: (pending(3, excluded_nodes=("a", "b", "c")), ("e",)),
        4: (pending(4, nodes=2, required_nodes=("a",)), None),
    }
    for job_id, (job, expected) in cases.items():
        result = plan(PlanRequest(snapshot(nodes, [job]), fabric))
        if expected is not None:
            assert _starts(result)[job_id].nodes == expected
    gang = _starts(plan(PlanRequest(snapshot(nodes, [cases[4][0]]), fabric)))[4]
    assert "a" in gang.nodes and "d" not in gang.nodes and len(gang.nodes) == 2
    only_drained = plan(
        PlanRequest(snapshot(nodes, [pending(9, required_nodes=("d",), nodes=1)]), fabric)
    )
    assert 9 not in _starts(only_drained)


def test_exclusive_job_takes_a_whole_idle_node() -> None:
    nodes = [gpu_node("a", alloc=4), gpu_node("b")]
    jobs = [pending(1, gpus=1, exclusive=True), pending(2, gpus=1)]
    result = plan(PlanRequest(snapshot(nodes, jobs), leaf_fabric({"l1": ["a", "b"]})))
    assert _starts(result)[1].nodes == ("b",)
    assert _starts(result)[2].nodes == ("a",)  # b is wholly taken


def test_partition_limits() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    nodes[3] = gpu_node("n3", flags=frozenset({"DRAIN"}))
    fabric = leaf_fabric({"l1": [n.name for n in nodes]})
    parts = {"gpu": ["n0", "n1", "n2", "n3"], "small": ["n0"]}
    jobs = [
        pending(1, nodes=5),
        pending(2, nodes=4),
        pending(3, nodes=2, partition="small"),
        pending(4, gpus=16),
        pending(5, partition="small"),
    ]
    result = plan(PlanRequest(snapshot(nodes, jobs, parts), fabric))
    unplaced = _unplaced(result)
    assert unplaced[1].reason is Reason.TOO_BIG_FOR_PARTITION  # type: ignore[attr-defined]
    assert unplaced[2].reason is Reason.NODES_UNAVAILABLE  # type: ignore[attr-defined]
    assert unplaced[3].reason is Reason.TOO_BIG_FOR_PARTITION  # type: ignore[attr-defined]
    assert unplaced[4].reason is Reason.TOO_BIG_FOR_PARTITION  # type: ignore[attr-defined]
    assert _starts(result)[5].nodes == ("n0",)
    down = plan(PlanRequest(snapshot(nodes, [pending(6)], state="DOWN"), fabric))
    assert _unplaced(down)[6].reason is Reason.NOT_ELIGIBLE  # type: ignore[attr-defined]


def test_managed_selects_jobs_and_others_still_hold_nodes() -> None:
    nodes = [gpu_node("a", alloc=8), gpu_node("b")]
    jobs = [running(50, ["a"]), pending(1), pending(2, gpus=0)]
    result = plan(
        PlanRequest(snapshot(nodes, jobs), leaf_fabric({"l1": ["a", "b"]}), managed=frozenset({1}))
    )
    assert _starts(result)[1].nodes == ("b",)
    assert {u.job_id for u in result.unplaced} == set()


def test_down_node_state_is_never_used() -> None:
    nodes = [gpu_node("a").__class__(name="a", state=NodeState.DOWN, gpus_total=8), gpu_node("b")]
    result = plan(
        PlanRequest(snapshot(nodes, [pending(1), pending(2)]), leaf_fabric({"l1": ["a", "b"]}))
    )
    assert _starts(result)[1].nodes == ("b",)
    assert 2 not in _starts(result)


def test_plan_to_json_is_plain_json() -> None:
    nodes, jobs, fabric = busy_leaves(EXAMPLE)
    result = plan(
        PlanRequest(snapshot(nodes, [*jobs, pending(1, nodes=5), pending(2, nodes=40)]), fabric)
    )
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["actions"][0] == {
        "kind": "start",
        "job_id": 1,
        "nodes": [f"leafBn{i}" for i in range(5)],
        "reason": "GANG_FEWEST_LEAVES",
        "detail": result.actions[0].detail,
    }
    assert doc["unplaced"][0]["job_id"] == 2
    assert doc["now"] == NOW


def _two_half_used_nodes(job_limit_s: int) -> tuple[object, object]:
    """n0 and n1 each run a 4-GPU job, ending in 1000 s and 20000 s; a 4-GPU job waits."""
    nodes = [gpu_node("n0", alloc=4), gpu_node("n1", alloc=4), gpu_node("n2")]
    jobs = [
        running(901, ["n0"], gpus=4, ends_in=1000.0),
        running(902, ["n1"], gpus=4, ends_in=20_000.0),
        pending(1, gpus=4, time_limit_s=job_limit_s),
    ]
    return snapshot(nodes, jobs), leaf_fabric({"leaf": ["n0", "n1", "n2"]})


def test_single_node_job_joins_the_node_whose_jobs_end_nearest_its_own_end() -> None:
    for limit, expected in ((1200, "n0"), (18_000, "n1")):
        snap, fabric = _two_half_used_nodes(limit)
        assert _starts(plan(PlanRequest(snap, fabric)))[1].nodes == (expected,)  # type: ignore[arg-type]


def test_without_align_ends_the_first_node_of_the_bucket_is_taken() -> None:
    snap, fabric = _two_half_used_nodes(18_000)
    result = plan(PlanRequest(snap, fabric, Policy(align_ends=False)))  # type: ignore[arg-type]
    assert _starts(result)[1].nodes == ("n0",)


def test_aligned_node_may_fit_less_well_than_the_best_fit() -> None:
    # n1 (2 free) is the exact fit for a 2-GPU job, but its job runs 20000 s; n0 (4 free)
    # empties after 1000 s. A 1200 s job goes to n0 so that both of n0's jobs end together.
    nodes = [gpu_node("n0", alloc=4), gpu_node("n1", alloc=6), gpu_node("n2")]
    jobs = [
        running(901, ["n0"], gpus=4, ends_in=1000.0),
        running(902, ["n1"], gpus=6, ends_in=20_000.0),
    ]
    fabric = leaf_fabric({"leaf": ["n0", "n1", "n2"]})
    for limit, expected in ((1200, "n0"), (18_000, "n1")):
        snap = snapshot(nodes, [*jobs, pending(1, gpus=2, time_limit_s=limit)])
        assert _starts(plan(PlanRequest(snap, fabric)))[1].nodes == (expected,)
    snap = snapshot(nodes, [*jobs, pending(1, gpus=2, time_limit_s=1200)])
    assert _starts(plan(PlanRequest(snap, fabric, Policy(align_ends=False))))[1].nodes == ("n1",)


# -- elastic jobs -------------------------------------------------------------------------------
def _elastic_case(frees_in: float | None, free: int = 6) -> tuple[object, object]:
    """One leaf of 8 nodes, ``free`` idle; the rest end after ``frees_in`` s (None: never known).

    Job 1 asks for 8 nodes, elastic 4:8, with a 3600 s budget at 4 nodes.
    """
    from slurmopt.tag import JobTag, format_comment

    nodes, jobs, fabric = busy_leaves({"leafA": free})
    if frees_in is not None:
        jobs = [running(j.job_id, j.nodes, ends_in=frees_in) for j in jobs]
    job = pending(1, nodes=8, admin_comment=format_comment(JobTag(elastic=(4, 8))))
    return snapshot(nodes, [*jobs, job]), fabric


def test_elastic_job_starts_on_the_nodes_free_now_when_all_never_free() -> None:
    snap, fabric = _elastic_case(None)
    start = _starts(plan(PlanRequest(snap, fabric)))[1]  # type: ignore[arg-type]
    assert start.reason is Reason.ELASTIC_START
    assert start.nodes == tuple(f"leafAn{i}" for i in range(6))
    assert start.detail.startswith("elastic 4:8: 6 of 8 nodes now (8 never)")


def test_elastic_job_waits_for_all_nodes_when_that_finishes_sooner() -> None:
    # On 6 nodes: 3600 x 4/6 = 2400 s. All 8 from now+100 s: 100 + 3600 x 4/8 = 1900 s.
    snap, fabric = _elastic_case(100.0)
    result = plan(PlanRequest(snap, fabric))  # type: ignore[arg-type]
    assert not result.actions
    assert result.reservations[0].start_time == NOW + 100


def test_elastic_job_starts_smaller_when_all_nodes_free_too_late() -> None:
    # All 8 from now+1000 s: 1000 + 1800 = 2800 s, later than 2400 s on the 6 free now.
    snap, fabric = _elastic_case(1000.0)
    start = _starts(plan(PlanRequest(snap, fabric)))[1]  # type: ignore[arg-type]
    assert start.reason is Reason.ELASTIC_START and len(start.nodes) == 6
    assert "(8 from now+1000 s)" in start.detail


def test_elastic_job_never_starts_below_its_minimum_or_with_elastic_off() -> None:
    snap, fabric = _elastic_case(None, free=3)
    assert not plan(PlanRequest(snap, fabric)).actions  # type: ignore[arg-type]
    snap, fabric = _elastic_case(None)
    assert not plan(PlanRequest(snap, fabric, Policy(elastic=False))).actions  # type: ignore[arg-type]


def test_elastic_job_set_smaller_is_still_planned_from_its_maximum() -> None:
    # Slurm already shows NumNodes=6 (an earlier start was set but not made): all 8 free now.
    from slurmopt.tag import JobTag, format_comment

    nodes, _, fabric = busy_leaves({"leafA": 8})
    job = pending(1, nodes=6, admin_comment=format_comment(JobTag(elastic=(4, 8))))
    start = _starts(plan(PlanRequest(snapshot(nodes, [job]), fabric)))[1]
    assert len(start.nodes) == 8 and start.reason is Reason.GANG_FEWEST_LEAVES
