"""Victim choice: whole gangs, least lost work, then fewest victims, checked by the planner."""

from __future__ import annotations

import dataclasses

from slurmopt.model import Job, Node
from slurmopt.policy.preemption import (
    PreemptReason,
    choose_victims,
    is_preemptible,
    lost_work,
    without,
)
from tests.unit.test_plan_helpers import (
    NOW,
    gpu_node,
    leaf_fabric,
    pending,
    running,
    snapshot,
)

PRE = "slurmopt:managed,preemptible"
LEAVES = {"a": ["a0", "a1", "a2", "a3"], "b": ["b0", "b1", "b2", "b3"]}


def job(job_id: int, nodes: list[str], comment: str = PRE, started_ago: float = 100.0) -> Job:
    return dataclasses.replace(
        running(job_id, nodes),
        comment=comment,
        admin_comment=comment.split(",ckpt=")[0],
        start_time=NOW - started_ago,
    )


def full_cluster(jobs: list[Job]) -> list[Node]:
    """Every node of both leaves fully allocated (``jobs`` say by whom)."""
    return [gpu_node(n, alloc=8) for names in LEAVES.values() for n in names]


def test_least_lost_work_wins_and_the_whole_gang_goes() -> None:
    jobs = [
        job(1, ["a0", "a1"], started_ago=1000),
        job(2, ["a2", "a3"], comment=PRE + f",ckpt=40@{int(NOW - 5)}", started_ago=1000),
        job(3, ["b0", "b1", "b2", "b3"], comment="slurmopt:managed", started_ago=10),
        pending(10, nodes=2, admin_comment="slurmopt:managed"),
    ]
    snap = snapshot(full_cluster(jobs), jobs)
    choice = choose_victims(snap, leaf_fabric(LEAVES), 10, NOW)
    assert choice.reason is PreemptReason.PREEMPT_LEAST_LOST_WORK, choice.detail
    assert [v.job_id for v in choice.victims] == [2]
    victim = choice.victims[0]
    assert victim.nodes == ("a2", "a3") and victim.last_checkpoint_step == 40
    assert victim.lost_gpu_seconds == 5 * 16
    assert set(choice.nodes) == {"a2", "a3"}


def test_fewest_victims_break_a_tie_in_lost_work() -> None:
    jobs = [
        job(1, ["a0"], started_ago=50),
        job(2, ["a1"], started_ago=50),
        job(3, ["a2", "a3"], started_ago=25),
        job(4, ["b0", "b1", "b2", "b3"], comment="", started_ago=10),
        pending(10, nodes=2, admin_comment="slurmopt:managed"),
    ]
    snap = snapshot(full_cluster(jobs), jobs)
    choice = choose_victims(snap, leaf_fabric(LEAVES), 10, NOW)
    assert [v.job_id for v in choice.victims] == [3]


def test_several_small_victims_when_cheaper_than_one_big() -> None:
    jobs = [
        job(1, ["a0"], started_ago=10),
        job(2, ["a1"], started_ago=10),
        job(3, ["a2", "a3"], started_ago=1000),
        job(4, ["b0", "b1", "b2", "b3"], comment="", started_ago=10),
        pending(10, nodes=2, admin_comment="slurmopt:managed"),
    ]
    choice = choose_victims(snapshot(full_cluster(jobs), jobs), leaf_fabric(LEAVES), 10, NOW)
    assert [v.job_id for v in choice.victims] == [1, 2]
    assert choice.lost_gpu_seconds == 2 * 10 * 8


def test_nothing_preemptible_or_not_enough() -> None:
    jobs = [
        job(1, ["a0", "a1", "a2", "a3"], comment="slurmopt:managed"),
        job(2, ["b0"]),
        job(3, ["b1", "b2", "b3"], comment=""),
        pending(10, nodes=2, admin_comment="slurmopt:managed"),
    ]
    snap = snapshot(full_cluster(jobs), jobs)
    choice = choose_victims(snap, leaf_fabric(LEAVES), 10, NOW)
    assert choice.reason is PreemptReason.NOT_ENOUGH_EVEN_IF_PREEMPTED
    assert choice.victims == ()
    no_pre = [j for j in jobs if j.job_id != 2]
    choice = choose_victims(snapshot(full_cluster(no_pre), no_pre), leaf_fabric(LEAVES), 10, NOW)
    assert choice.reason is PreemptReason.NO_PREEMPTIBLE_JOBS


def test_a_preemptible_job_preempts_only_lower_priority() -> None:
    jobs = [
        job(1, ["a0", "a1", "a2", "a3"]),
        job(2, ["b0", "b1", "b2", "b3"], comment=""),
        pending(10, nodes=2, admin_comment=PRE),
    ]
    snap = snapshot(full_cluster(jobs), jobs)
    fabric = leaf_fabric(LEAVES)
    assert not choose_victims(snap, fabric, 10, NOW, {10: 5, 1: 5}).victims
    assert [v.job_id for v in choose_victims(snap, fabric, 10, NOW, {10: 6, 1: 5}).victims] == [1]
    assert choose_victims(snap, fabric, 99, NOW).reason is PreemptReason.NOT_A_CANDIDATE


def test_lost_work_ignores_an_ack_from_before_the_current_run() -> None:
    old_ack = job(1, ["a0"], comment=PRE + f",ckpt=7@{int(NOW - 500)}", started_ago=100)
    assert lost_work(old_ack, NOW) == (100 * 8, None)
    assert is_preemptible(old_ack)
    assert not is_preemptible(job(2, ["a1"], comment="slurmopt:oops"))


def test_without_frees_the_victims_gpus() -> None:
    jobs = [job(1, ["a0", "a1"]), job(2, ["a2"])]
    snap = snapshot([gpu_node("a0", alloc=8), gpu_node("a1", alloc=8), gpu_node("a2", 8)], jobs)
    freed = without(snap, [jobs[0]])
    assert freed.nodes["a0"].gpus_free == 8 and freed.nodes["a2"].gpus_free == 0
    assert set(freed.jobs) == {2}


def test_worth_preempting_weighs_the_gain_against_checkpoint_and_restart() -> None:
    from slurmopt.policy.preemption import (
        PreemptionChoice,
        PreemptionCost,
        PreemptReason,
        Victim,
        worth_preempting,
    )

    cost = PreemptionCost(ack_s=60, restart_s=120)
    choice = PreemptionChoice(
        1, (Victim(9, ("n0",), 8, 0.0, None),), PreemptReason.PREEMPT_LEAST_LOST_WORK
    )
    # 8 victim GPUs x 180 s = 1440 GPU-s against 8 GPUs x (start - now - 60).
    assert not worth_preempting(choice, 8, 1000.0 + 60 + 180, 1000.0, cost)
    assert worth_preempting(choice, 8, 1000.0 + 60 + 181, 1000.0, cost)
    assert worth_preempting(choice, 8, None, 1000.0, cost)  # no start in sight
    empty = PreemptionChoice(1, (), PreemptReason.NO_PREEMPTIBLE_JOBS)
    assert not worth_preempting(empty, 8, None, 1000.0, cost)


def test_planner_orders_preemptible_jobs_after_all_others() -> None:
    from slurmopt.model import Job, JobState
    from slurmopt.policy.plan import priority_order
    from slurmopt.tag import JobTag, format_comment

    tagged = format_comment(JobTag(preemptible=True))

    def job(job_id: int, priority: int, comment: str = "") -> Job:
        return Job(
            job_id=job_id, state=JobState.PENDING, priority=priority, submit_time=float(job_id),
            admin_comment=comment,
        )  # fmt: skip

    jobs = [job(1, 100, tagged), job(2, 1), job(3, 50, tagged), job(4, 5)]
    assert [j.job_id for j in priority_order(jobs)] == [1, 3, 4, 2]
    assert [j.job_id for j in priority_order(jobs, preemptible_last=True)] == [4, 2, 1, 3]


def test_may_pay_bounds_worth_preempting_by_the_smallest_victim() -> None:
    from slurmopt.policy.preemption import PreemptionCost, may_pay

    cost = PreemptionCost(ack_s=60, restart_s=120)
    # 8 GPUs gain 8 x (start - now - 60); the smallest victim (4 GPUs) loses 4 x 180 = 720.
    assert not may_pay(8, 1000.0 + 60 + 90, 1000.0, cost, 4)
    assert may_pay(8, 1000.0 + 60 + 91, 1000.0, cost, 4)
    assert may_pay(8, None, 1000.0, cost, 64)


def test_waiting_for_room_leaves_out_starts_and_jobs_handed_back() -> None:
    from slurmopt.policy.plan import Plan, Reason, Reservation, Start, Unplaced
    from slurmopt.policy.preemption import waiting_for_room

    result = Plan(
        actions=(Start(1, ("a0",), Reason.BEST_FIT_NODE),),
        reservations=(Reservation(2, ("a1",), 500.0, Reason.WAITS_FOR_RESOURCES),),
        unplaced=(
            Unplaced(2, Reason.WAITS_FOR_RESERVATION, expected_start=500.0),
            Unplaced(3, Reason.WAITS_FOR_RESOURCES),
            Unplaced(4, Reason.TOO_BIG_FOR_PARTITION),
            Unplaced(1, Reason.WAITS_FOR_RESOURCES),
        ),
        now=0.0,
    )
    assert waiting_for_room(result) == {2: 500.0, 3: None}


def test_first_worth_preempting_serves_the_first_waiting_job_it_pays_for() -> None:
    from slurmopt.policy.preemption import (
        MAX_PREEMPTORS,
        PreemptionChoice,
        PreemptionCost,
        first_worth_preempting,
    )

    jobs = [
        job(1, ["a0", "a1", "a2", "a3"], started_ago=1000),
        job(3, ["b0"], started_ago=1000),
        job(2, ["b1", "b2", "b3"], comment="slurmopt:managed", started_ago=10),
        pending(10, nodes=2, admin_comment="slurmopt:managed"),
        pending(11, nodes=2, admin_comment="slurmopt:managed"),
    ]
    snap = snapshot(full_cluster(jobs), jobs)
    fabric = leaf_fabric(LEAVES)
    cost = PreemptionCost(ack_s=60, restart_s=120)
    # Job 10's reservation is due in 200 s: its 16 GPUs gain 16 x 140 s, more than the
    # smallest victim (job 3, 8 GPUs) would lose (8 x 180 s), so victims are searched; but
    # only job 1 (32 GPUs, 32 x 180 s) makes room, which does not pay: declined. Job 11 has
    # no start in sight and gets the preemption.
    declined: list[tuple[int, PreemptionChoice]] = []
    choice = first_worth_preempting(
        snap, fabric, [(10, NOW + 200), (11, None)], NOW, cost, declined=declined
    )
    assert choice is not None and choice.for_job_id == 11
    assert [v.job_id for v in choice.victims] == [1]
    assert [(j, [v.job_id for v in c.victims]) for j, c in declined] == [(10, [1])]
    # A job that is not pending, or one past the first MAX_PREEMPTORS pending ones, is not tried.
    assert first_worth_preempting(snap, fabric, [(1, None)], NOW, cost) is None
    queue = [(10, NOW + 200)] * MAX_PREEMPTORS + [(11, None)]
    assert first_worth_preempting(snap, fabric, queue, NOW, cost) is None
    # Excluded victims are not taken (job 3 alone is not enough room).
    only_3 = first_worth_preempting(snap, fabric, [(11, None)], NOW, cost, exclude=frozenset({1}))
    assert only_3 is None
