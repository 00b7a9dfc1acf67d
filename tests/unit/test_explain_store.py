"""The store's read helpers behind ``slurmopt explain``: the newest plan about a job, its lines."""

from __future__ import annotations

from slurmopt.policy.plan import Plan, Reason, Reservation, Start, Unplaced
from slurmopt.store import ManagedJobState, Store, register_job

T0 = 1_700_000_000.0



def test_an_empty_store_has_no_plan_decision_or_record(store: Store) -> None:
    assert store.latest_plan() is None
    assert store.latest_decisions_for(1) is None
    assert store.managed_job(1) is None


def test_latest_decisions_come_from_the_newest_plan_that_mentions_the_job(store: Store) -> None:
    first = Plan(
        actions=(Start(5, ("gpu001",), Reason.BEST_FIT_NODE),),
        reservations=(Reservation(6, ("gpu002", "gpu003"), T0 + 600, Reason.RESERVED, "held"),),
        unplaced=(Unplaced(6, Reason.WAITS_FOR_RESERVATION, "waits", T0 + 600),),
        now=T0,
    )
    second = Plan((), (), (Unplaced(6, Reason.WAITS_FOR_RESOURCES, "no room"),), now=T0 + 60)
    third = Plan((), (), (), now=T0 + 120)
    ids = [store.record_plan(p, p.now, 0.01) for p in (first, second, third)]

    newest = store.latest_plan()
    assert newest is not None and newest.id == ids[2] and newest.planned_at == T0 + 120

    found_5 = store.latest_decisions_for(5)
    assert found_5 is not None
    record, lines = found_5
    assert record.id == ids[0]
    assert [(d.kind, d.nodes) for d in lines] == [("start", "gpu001")]

    found_6 = store.latest_decisions_for(6)
    assert found_6 is not None
    record, lines = found_6
    assert record.id == ids[1]
    assert [(d.kind, d.reason, d.detail) for d in lines] == [
        ("unplaced", Reason.WAITS_FOR_RESOURCES, "no room")
    ]
    assert store.latest_decisions_for(7) is None


def test_both_lines_of_a_reserved_job_come_back_in_plan_order(store: Store) -> None:
    made = Plan(
        actions=(),
        reservations=(Reservation(6, ("gpu002",), T0 + 600, Reason.RESERVED, "held"),),
        unplaced=(Unplaced(6, Reason.WAITS_FOR_RESERVATION, "waits", T0 + 600),),
        now=T0,
    )
    store.record_plan(made, T0, 0.0)
    found = store.latest_decisions_for(6)
    assert found is not None
    assert [(d.kind, d.start_time) for d in found[1]] == [
        ("reservation", T0 + 600),
        ("unplaced", T0 + 600),
    ]


def test_managed_job_returns_the_current_record(store: Store) -> None:
    with store.begin() as session:
        register_job(session, 9, T0, key="9:hold", priority_before_hold=40, now=T0)
    record = store.managed_job(9)
    assert record is not None
    assert (record.state, record.priority_before_hold) == (ManagedJobState.WAITING, 40)
