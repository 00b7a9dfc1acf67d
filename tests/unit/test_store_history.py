"""Plans, their decisions and fragmentation samples come back from the store as written."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.policy.fragmentation import fragmentation_report
from slurmopt.policy.plan import Plan, PlanRequest, Reason, Reservation, Start, Unplaced, plan
from slurmopt.store import Decision, PlanRecord, Store

T0 = 1_700_000_000.0



def _node(name: str, alloc: int = 0) -> Node:
    state = NodeState.MIXED if 0 < alloc < 8 else NodeState.ALLOCATED if alloc else NodeState.IDLE
    return Node(
        name=name,
        state=state,
        partitions=("gpu",),
        gpus_total=8,
        gpus_alloc=alloc,
        cpus=64,
        alloc_cpus=alloc * 8,
    )


def test_a_plan_and_each_of_its_lines_round_trip(store: Store) -> None:
    made = Plan(
        actions=(
            Start(11, ("gpu002", "gpu001"), Reason.GANG_FEWEST_LEAVES, "2 nodes on 1 leaf"),
            Start(12, ("gpu005",), Reason.BACKFILL, "fits before the reservation"),
        ),
        reservations=(Reservation(13, ("gpu003", "gpu004"), T0 + 600, Reason.RESERVED, "r"),),
        unplaced=(
            Unplaced(13, Reason.WAITS_FOR_RESERVATION, "reserved", T0 + 600),
            Unplaced(14, Reason.TOO_BIG_FOR_PARTITION, "needs 64 nodes"),
        ),
        now=T0 + 1,
    )
    plan_id = store.record_plan(made, snapshot_taken_at=T0, duration_s=0.25)
    other = store.record_plan(Plan((), (), (), now=T0 + 61), T0 + 60, 0.01)
    assert other != plan_id
    with store.begin() as s:
        record = s.get(PlanRecord, plan_id)
        assert record is not None
        assert (record.taken_at, record.planned_at, record.duration_s) == (T0, T0 + 1, 0.25)
        assert (record.starts, record.reservations, record.unplaced) == (2, 1, 2)
        assert record.schema_version == made.schema_version
    lines = store.decisions(plan_id)
    assert [(d.kind, d.job_id, d.reason, d.nodes, d.start_time) for d in lines] == [
        ("start", 11, Reason.GANG_FEWEST_LEAVES, "gpu[001-002]", None),
        ("start", 12, Reason.BACKFILL, "gpu005", None),
        ("reservation", 13, Reason.RESERVED, "gpu[003-004]", T0 + 600),
        ("unplaced", 13, Reason.WAITS_FOR_RESERVATION, None, T0 + 600),
        ("unplaced", 14, Reason.TOO_BIG_FOR_PARTITION, None, None),
    ]
    assert isinstance(lines[0].reason, Reason)
    assert lines[0].detail == "2 nodes on 1 leaf"
    assert all(d.at == T0 + 1 for d in lines)
    assert store.decisions(other) == []


def test_deleting_a_plan_deletes_its_decisions(store: Store) -> None:
    made = Plan((Start(1, ("n1",), Reason.BEST_FIT_NODE),), (), (), now=T0)
    plan_id = store.record_plan(made, T0, 0.0)
    with store.begin() as s:
        s.delete(s.get(PlanRecord, plan_id))
    with store.begin() as s:
        assert s.scalar(select(func.count()).select_from(Decision)) == 0


def test_a_real_plan_is_recorded_with_its_reasons(store: Store) -> None:
    nodes = [_node("gpu001"), _node("gpu002", alloc=6)]
    jobs = [
        Job(
            job_id=1,
            state=JobState.PENDING,
            partition="gpu",
            node_count=1,
            gpus_per_node=2,
            priority=10,
            submit_time=T0 - 5,
        ),
        Job(
            job_id=2,
            state=JobState.PENDING,
            partition="gpu",
            node_count=4,
            gpus_per_node=8,
            priority=5,
            submit_time=T0 - 5,
        ),
    ]
    snapshot = ClusterSnapshot.build(T0, nodes, jobs, [Partition("gpu", ("gpu001", "gpu002"))])
    made = plan(PlanRequest(snapshot, Fabric.from_leaf_map({"leaf1": ["gpu001", "gpu002"]})))
    plan_id = store.record_plan(made, T0, 0.002)
    lines = {d.job_id: d for d in store.decisions(plan_id)}
    assert lines[1].kind == "start" and lines[1].nodes == "gpu002"  # best fit: the mixed node
    assert lines[1].reason == made.actions[0].reason
    assert lines[2].kind == "unplaced"
    assert lines[2].reason == made.unplaced[0].reason


def test_fragmentation_samples_round_trip_and_filter_by_time(store: Store) -> None:
    fabric = Fabric.from_leaf_map({"leaf1": ["gpu001", "gpu002", "gpu003"]})
    partitions = [Partition("gpu", ("gpu001", "gpu002", "gpu003"))]
    running = [
        Job(job_id=9, state=JobState.RUNNING, partition="gpu", node_count=1, gpus_per_node=8)
    ]
    reports = []
    for minute, busy in enumerate([0, 3, 5, 8]):
        nodes = [_node("gpu001", alloc=busy), _node("gpu002"), _node("gpu003", alloc=8)]
        snap = ClusterSnapshot.build(T0 + 60 * minute, nodes, running, partitions)
        reports.append(fragmentation_report(snap, fabric))
    for report in reports:
        store.record_fragmentation(report)
    store.record_fragmentation(fragmentation_report(snap, fabric, partition="gpu"))

    everything = store.fragmentation_history()
    assert [s.at for s in everything] == [T0, T0 + 60, T0 + 120, T0 + 180]
    second = everything[1]
    r = reports[1]
    assert (second.total_gpus, second.free_gpus, second.stranded_gpus) == (24, 13, 5)
    assert (second.total_gpus, second.free_gpus, second.stranded_gpus) == (
        r.total_gpus,
        r.free_gpus,
        r.stranded_gpus,
    )
    assert second.allocated_gpus == r.allocated_gpus == 11
    assert second.fragmentation_index == pytest.approx(5 / 13)
    assert second.largest_job_nodes == r.largest_job_nodes == 1
    assert second.largest_single_leaf_job_nodes == 1
    assert second.fgd_unusable_share == pytest.approx(r.fgd_unusable_share)
    assert second.partition is None

    window = store.fragmentation_history(since=T0 + 60, until=T0 + 180)
    assert [s.at for s in window] == [T0 + 60, T0 + 120]
    scoped = store.fragmentation_history(partition="gpu")
    assert [(s.at, s.partition) for s in scoped] == [(T0 + 180, "gpu")]
