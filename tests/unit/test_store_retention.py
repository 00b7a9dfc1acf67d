"""Bounded history: plans stored as changes, and pruning past each retention."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from slurmopt.policy.plan import Plan, Reason, Reservation, Start, Unplaced
from slurmopt.store import (
    Decision,
    Fence,
    FragmentationSample,
    JobTransition,
    LeaseLost,
    ManagedJob,
    ManagedJobState,
    PlanRecord,
    Store,
    register_job,
    transition,
)
from slurmopt.store.db import WAITING_REWRITE_S
from slurmopt.store.retention import Retention

T0 = 1_700_000_000.0
DAY = 86400.0



def _waiting(*job_ids: int, now: float) -> Plan:
    return Plan(
        (), (), tuple(Unplaced(j, Reason.WAITS_FOR_RESOURCES, "no room") for j in job_ids), now=now
    )


def _rows(store: Store, model: type) -> int:
    with store.begin() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_an_unchanged_plan_writes_no_lines_and_still_reads_back_whole(store: Store) -> None:
    first = store.record_plan(_waiting(1, 2, 3, now=T0), T0, 0.0)
    second = store.record_plan(_waiting(1, 2, 3, now=T0 + 5), T0 + 5, 0.0)
    assert _rows(store, Decision) == 3
    assert [d.job_id for d in store.decisions(second)] == [1, 2, 3]
    found = store.latest_decisions_for(2)
    assert found is not None and found[0].id == second and found[1][0].detail == "no room"
    with store.begin() as session:
        stored = {r.id: r.stored_lines for r in session.scalars(select(PlanRecord))}
    assert stored == {first: 3, second: 0}


def test_only_the_changed_job_and_the_one_that_left_are_written(store: Store) -> None:
    store.record_plan(_waiting(1, 2, now=T0), T0, 0.0)
    moved = Plan((Start(1, ("gpu001",), Reason.BEST_FIT_NODE),), (), (), now=T0 + 5)
    plan_id = store.record_plan(moved, T0 + 5, 0.0)
    with store.begin() as session:
        kinds = sorted(
            (d.job_id, d.kind)
            for d in session.scalars(select(Decision).where(Decision.plan_id == plan_id))
        )
    assert kinds == [(1, "start"), (2, "gone")]
    assert [d.job_id for d in store.decisions(plan_id)] == [1]
    # Job 2 left: explain shows the plan before, with its last line.
    found = store.latest_decisions_for(2)
    assert found is not None and found[0].id == plan_id - 1 and found[1][0].kind == "unplaced"


def test_a_restarted_store_diffs_against_what_is_stored(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    one = Store.open(url)
    one.record_plan(_waiting(1, 2, now=T0), T0, 0.0)
    one.close()
    two = Store.open(url)
    try:
        two.record_plan(_waiting(1, 2, now=T0 + 5), T0 + 5, 0.0)
        assert _rows(two, Decision) == 2
    finally:
        two.close()


def test_change_only_off_writes_every_line(store: Store) -> None:
    store.change_only = False
    store.record_plan(_waiting(1, 2, now=T0), T0, 0.0)
    store.record_plan(_waiting(1, 2, now=T0 + 5), T0 + 5, 0.0)
    assert _rows(store, Decision) == 4


def test_prune_drops_old_plans_but_keeps_lines_a_kept_plan_still_reads(store: Store) -> None:
    reserved = Plan(
        (),
        (Reservation(9, ("gpu002",), T0 + 600, Reason.RESERVED, "held"),),
        (Unplaced(9, Reason.WAITS_FOR_RESERVATION, "waits", T0 + 600),),
        now=T0,
    )
    store.record_plan(reserved, T0, 0.0)  # job 9's lines never change after this
    for day in range(1, 10):
        store.record_plan(
            Plan(
                reserved.actions,
                reserved.reservations,
                reserved.unplaced + (Unplaced(100 + day, Reason.WAITS_FOR_RESOURCES, "no room"),),
                now=T0 + day * DAY,
            ),
            T0 + day * DAY,
            0.0,
        )
    now = T0 + 9 * DAY
    counts = store.prune(now, Retention(plans_s=3 * DAY))
    assert not counts.more and counts.plans > 0 and counts.decisions > 0
    with store.begin() as session:
        oldest_kept = session.scalar(select(func.min(PlanRecord.taken_at)))
        assert oldest_kept == T0  # the first plan stays: job 9's current lines live in it
        kept = {r.taken_at for r in session.scalars(select(PlanRecord))}
    assert kept == {T0, *(T0 + d * DAY for d in range(6, 10))}
    latest = store.latest_plan()
    assert latest is not None
    assert sorted({d.job_id for d in store.decisions(latest.id)}) == [9, 109]
    found = store.latest_decisions_for(9)
    assert found is not None and found[0].id == latest.id
    assert [d.kind for d in found[1]] == ["reservation", "unplaced"]
    assert store.latest_decisions_for(101) is None  # left the plan more than 3 days ago
    assert store.prune(now, Retention(plans_s=3 * DAY)).total == 0


def test_prune_is_bounded_and_says_when_rows_are_left(store: Store) -> None:
    for i in range(30):
        with store.begin() as session:
            session.add(
                FragmentationSample(
                    at=T0 + i,
                    partition=None,
                    total_gpus=8,
                    allocated_gpus=0,
                    unavailable_gpus=0,
                    free_gpus=8,
                    stranded_gpus=0,
                    fragmentation_index=0.0,
                    largest_job_nodes=1,
                    largest_single_leaf_job_nodes=1,
                    fgd_unusable_share=None,
                )
            )
    old = Retention(samples_s=1.0)
    first = store.prune(T0 + 100, old, max_rows=20)
    assert (first.samples, first.more) == (20, True)
    second = store.prune(T0 + 100, old, max_rows=20)
    assert (second.samples, second.more) == (10, False)
    assert _rows(store, FragmentationSample) == 0


def test_prune_keeps_live_jobs_and_recent_ends_and_drops_old_ends(store: Store) -> None:
    with store.begin() as session:
        for job_id in (1, 2, 3):
            register_job(session, job_id, T0, key=f"{job_id}:hold", now=T0)
        transition(session, 1, ManagedJobState.CANCELLED, "gone", "", "1:end", now=T0 + 1)
        transition(session, 2, ManagedJobState.DONE, "done", "", "2:end", now=T0 + 20 * DAY)
    counts = store.prune(T0 + 31 * DAY, Retention(finished_jobs_s=30 * DAY))
    assert (counts.jobs, counts.transitions) == (1, 2)
    with store.begin() as session:
        assert session.get(ManagedJob, 1) is None
        assert session.get(ManagedJob, 2) is not None  # ended 11 days ago
        assert session.get(ManagedJob, 3) is not None  # live: kept however old
        left = sorted(session.scalars(select(JobTransition.job_id)))
    assert left == [2, 2, 3]


def test_the_daemon_prunes_after_a_cycle_and_waits_before_the_next(tmp_path: Path) -> None:
    from slurmopt.daemon.loop import PRUNE_EVERY_S, Daemon
    from tests.fakes.slurm import FakeSlurm
    from tests.unit.test_daemon_fakes import config, held_job, two_leaves

    nodes, fabric = two_leaves()
    client = FakeSlurm(nodes, [held_job(7)])
    cfg = config(tmp_path, enforce=False, retain_samples_s=60.0)
    store = Store.open(cfg.db)
    try:
        daemon = Daemon(
            cfg, client, store, clock=lambda: client.clock, fabric_loader=lambda _c, _s: fabric
        )
        daemon.cycle()
        assert len(store.fragmentation_history()) == 1
        client.clock += 120  # the first sample is now past its 60 s retention
        daemon.cycle()
        assert len(store.fragmentation_history()) == 2  # pruned at the first cycle only
        client.clock += PRUNE_EVERY_S
        daemon.cycle()
        assert [s.at for s in store.fragmentation_history()] == [client.clock]
    finally:
        store.close()


def test_figures_that_move_with_the_clock_are_not_changes_and_read_back_current(
    store: Store,
) -> None:
    def reserved(now: float, fitting: int) -> Plan:
        wait = T0 + 600 - now
        return Plan(
            (),
            (Reservation(6, ("gpu002",), T0 + 600, Reason.RESERVED, "held"),),
            (
                Unplaced(
                    6,
                    Reason.WAITS_FOR_RESERVATION,
                    f"needs 1 node(s) with 8 free GPUs; {fitting} in partition gpu; "
                    f"reserved 1 node(s) from now+{wait:.0f} s",
                    T0 + 600,
                ),
            ),
            now=now,
        )

    store.record_plan(reserved(T0, 0), T0, 0.0)
    later = store.record_plan(reserved(T0 + 100, 2), T0 + 100, 0.0)
    assert _rows(store, Decision) == 2  # nothing but the clock and a count moved
    found = store.latest_decisions_for(6)
    assert found is not None and found[0].id == later
    assert found[1][1].detail.endswith("from now+500 s")  # counted from the newest plan
    with store.begin() as session:  # the stored row keeps what was written
        stored = session.scalar(select(Decision.detail).where(Decision.kind == "unplaced"))
    assert stored is not None and stored.endswith("now+600 s")
    # A moved reservation is a change.
    moved = Plan(
        (), (Reservation(6, ("gpu003",), T0 + 600, Reason.RESERVED, "held"),), (), now=T0 + 105
    )
    store.record_plan(moved, T0 + 105, 0.0)
    assert _rows(store, Decision) == 3


def test_a_waiting_job_that_keeps_waiting_is_rewritten_at_most_every_ten_minutes(
    store: Store,
) -> None:
    def plan(now: float, reason: Reason, detail: str) -> Plan:
        return Plan((), (), (Unplaced(1, reason, detail), Unplaced(2, reason, detail)), now=now)

    store.record_plan(plan(T0, Reason.WAITS_FOR_RESOURCES, "needs a node"), T0, 0.0)
    # The reason flips every cycle, as it does when one node fills and frees: not rewritten.
    for i in range(1, 10):
        reason = Reason.RESERVED if i % 2 else Reason.WAITS_FOR_RESOURCES
        store.record_plan(plan(T0 + 5 * i, reason, f"flip {i}"), T0 + 5 * i, 0.0)
    assert _rows(store, Decision) == 2
    # Ten minutes on, the current reason is written once more.
    later = T0 + WAITING_REWRITE_S + 1
    store.record_plan(plan(later, Reason.RESERVED, "reserved"), later, 0.0)
    found = store.latest_decisions_for(1)
    assert found is not None and found[1][0].reason is Reason.RESERVED
    assert _rows(store, Decision) == 4
    # A start, or gaining a reservation, is written at once.
    now = later + 5
    gains = Plan(
        (Start(1, ("gpu001",), Reason.BEST_FIT_NODE),),
        (Reservation(2, ("gpu002",), now + 60, Reason.WAITS_FOR_RESOURCES),),
        (Unplaced(2, Reason.WAITS_FOR_RESERVATION, "reserved"),),
        now=now,
    )
    store.record_plan(gains, now, 0.0)
    assert _rows(store, Decision) == 4 + 3


def test_a_daemon_that_lost_the_lease_prunes_nothing(store: Store) -> None:
    for day in range(5):
        store.record_plan(_waiting(1, now=T0 + day * DAY), T0 + day * DAY, 0.0)
    clock = T0 + 5 * DAY
    token = store.acquire_token("daemon", "host:1", 30, clock)
    assert token is not None
    store.fence = Fence("daemon", "host:1", token, 30, lambda: clock)
    # Another daemon takes the lease once this one's has run out (a pause, a partition).
    assert store.acquire_token("daemon", "host:2", 30, clock + 31) is not None
    before = _rows(store, PlanRecord)
    with pytest.raises(LeaseLost):
        store.prune(clock + 31, Retention(plans_s=DAY))
    assert _rows(store, PlanRecord) == before == 5
