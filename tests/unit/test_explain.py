"""``slurmopt.explain``: explanations built from real recorded plans, with no Slurm and no clock.

Each test records the output of the real planner on a hand-built snapshot
into a temporary SQLite store (the path the daemon writes by), reads it
back with the store's helpers, and explains it.
"""

from __future__ import annotations

import pytest

from slurmopt.explain import Explanation, JobNotExplained, SlurmView, explain_job, format_relative
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.policy.plan import Plan, PlanRequest, Reason, plan
from slurmopt.store import ManagedJobState, Store, idempotency_key, register_job, transition

T0 = 1_700_000_000.0
LEAVES = {f"leaf{i}": [f"gpu{8 * (i - 1) + j:03d}" for j in range(1, 9)] for i in range(1, 5)}
NAMES = [n for members in LEAVES.values() for n in members]
FABRIC = Fabric.from_leaf_map(LEAVES, source="test leaf map")
UNREACHABLE = SlurmView(False, "slurmctld unreachable", None)


def node(name: str, alloc: int = 0) -> Node:
    state = NodeState.MIXED if 0 < alloc < 8 else NodeState.ALLOCATED if alloc else NodeState.IDLE
    return Node(
        name,
        state,
        partitions=("gpu",),
        gpus_total=8,
        gpus_alloc=alloc,
        cpus=64,
        alloc_cpus=alloc * 8,
    )


def pending(job_id: int, nodes: int, priority: int) -> Job:
    return Job(
        job_id,
        JobState.PENDING,
        partition="gpu",
        node_count=nodes,
        gpus_per_node=8,
        priority=priority,
        time_limit_s=600,
        submit_time=T0 - 5,
    )


def cluster_snapshot(at: float = T0, jobs: tuple[Job, ...] = ()) -> ClusterSnapshot:
    """28 of 32 nodes busy for an hour: only leaf4's last 4 nodes are free."""
    busy = NAMES[:28]
    running = Job(
        100,
        JobState.RUNNING,
        partition="gpu",
        nodes=tuple(busy),
        node_count=len(busy),
        gpus_per_node=8,
        time_limit_s=3600,
        start_time=T0 - 600,
        submit_time=T0 - 700,
    )
    nodes = [node(n, 8 if n in busy else 0) for n in NAMES]
    return ClusterSnapshot.build(at, nodes, (running, *jobs), [Partition("gpu", tuple(NAMES))])


#: Job 1 (4 nodes) starts on leaf4; job 2 (8 nodes) gets a reservation; job 3 (64) never fits.
QUEUE = (pending(1, 4, 10), pending(2, 8, 9), pending(3, 64, 8))



@pytest.fixture
def planned(store: Store) -> Plan:
    """The real planner's plan for :data:`QUEUE`, recorded as the daemon records it."""
    made = plan(PlanRequest(cluster_snapshot(jobs=QUEUE), FABRIC))
    store.record_plan(made, T0, 0.01)
    return made


def explain(
    store: Store,
    job_id: int,
    slurm: SlurmView = UNREACHABLE,
    fabric: Fabric | None = FABRIC,
    now: float = T0 + 30,
) -> Explanation:
    return explain_job(
        job_id,
        store.latest_decisions_for(job_id),
        store.latest_plan(),
        store.managed_job(job_id),
        slurm,
        fabric,
        now,
    )


def test_a_started_job_shows_its_nodes_reason_and_fabric_span(store: Store, planned: Plan) -> None:
    start = planned.actions[0]
    assert (start.job_id, start.reason) == (1, Reason.GANG_FEWEST_LEAVES)

    got = explain(store, 1)

    assert got.kind == "start" and got.is_current
    assert got.start is not None and got.waiting is None and got.reservation is None
    assert set(got.start.nodes) == set(start.nodes) == {"gpu029", "gpu030", "gpu031", "gpu032"}
    assert got.start.reason is Reason.GANG_FEWEST_LEAVES
    assert got.start.detail == start.detail
    assert got.start.fabric is not None
    assert got.start.fabric.leaves == ("leaf4",)
    assert (got.start.fabric.max_hops, got.start.fabric.slowest_link_gbps) == (2, 200.0)
    text = got.lines()
    assert text[0].startswith("job 1: placed on gpu[029-032] (GANG_FEWEST_LEAVES")
    assert any("leaf4" in line and "2 hops" in line for line in text)
    assert any(line.startswith("plan: #1") and "the latest plan" in line for line in text)
    assert "Slurm now: unknown (cannot read Slurm: slurmctld unreachable)" in text


def test_a_job_with_a_reservation_shows_nodes_and_expected_start(
    store: Store, planned: Plan
) -> None:
    (reservation,) = planned.reservations
    assert reservation.job_id == 2

    got = explain(store, 2)

    assert got.kind == "reservation"
    assert got.reservation is not None and got.waiting is not None
    assert got.waiting.reason is Reason.WAITS_FOR_RESERVATION
    assert got.waiting.expected_start == reservation.start_time == got.reservation.start_time
    assert set(got.reservation.nodes) == set(reservation.nodes)
    assert got.reservation.fabric is not None and got.reservation.fabric.max_hops == 2
    doc = got.to_json()
    assert doc["kind"] == "reservation"
    assert doc["unplaced"]["expected_start"] == reservation.start_time
    assert doc["reservation"]["hostlist"] == "gpu[001-008]"
    assert doc["reservation"]["fabric"]["leaves"] == ["leaf1"]
    text = "\n".join(got.lines())
    assert "waits (WAITS_FOR_RESERVATION" in text and "expected to start" in text
    assert "reserved: gpu[001-008] from" in text


def test_a_job_that_never_fits_shows_the_reason_and_no_expected_start(
    store: Store, planned: Plan
) -> None:
    got = explain(store, 3)

    assert got.kind == "unplaced" and got.reservation is None and got.start is None
    assert got.waiting is not None
    assert got.waiting.reason is Reason.TOO_BIG_FOR_PARTITION
    assert got.waiting.detail == "needs 64 nodes with 8 GPUs; partition gpu has 32"
    assert got.waiting.expected_start is None
    assert got.lines()[0].endswith("; no expected start")


def test_a_job_the_store_never_saw_is_a_one_line_error(store: Store, planned: Plan) -> None:
    with pytest.raises(JobNotExplained) as info:
        explain(store, 4242)
    assert info.value.exit_code == 1
    assert "job 4242" in str(info.value) and "\n" not in str(info.value)


def test_the_newest_plan_that_mentions_the_job_wins_and_later_ones_make_it_stale(
    store: Store, planned: Plan
) -> None:
    # The next pass: job 1 runs (it is no longer pending), job 2 still waits.
    later = plan(
        PlanRequest(cluster_snapshot(T0 + 60, jobs=(pending(2, 8, 9),)), FABRIC, now=T0 + 60)
    )
    store.record_plan(later, T0 + 60, 0.02)

    first = explain(store, 1, now=T0 + 90)
    second = explain(store, 2, now=T0 + 90)

    assert first.plan is not None and first.plan.id == 1
    assert first.latest_plan is not None and first.latest_plan.id == 2
    assert not first.is_current and first.to_json()["current"] is False
    assert "later plans do not mention it (latest: #2" in "\n".join(first.lines())
    assert second.plan is not None and second.plan.id == 2 and second.is_current
    assert second.plan.planned_at == T0 + 60


def test_a_managed_job_without_a_plan_is_explained_from_its_record(store: Store) -> None:
    with store.begin() as session:
        register_job(session, 7, T0 - 5, key=idempotency_key(7, T0 - 5, "hold"), now=T0)

    got = explain(store, 7)

    assert got.kind == "none" and got.plan is None
    assert got.managed is not None and got.managed.state is ManagedJobState.WAITING
    assert "no stored plan mentions it" in got.lines()[0]
    assert got.to_json()["managed"]["state"] == "waiting"


def test_slurm_view_and_the_managed_state_are_shown(store: Store, planned: Plan) -> None:
    nodes = planned.actions[0].nodes
    with store.begin() as session:
        register_job(session, 1, T0 - 5, key="1:hold", now=T0)
        transition(session, 1, ManagedJobState.PINNED, "pin", "plan #1", "1:pin", nodes=nodes)
    running = Job(1, JobState.RUNNING, partition="gpu", nodes=nodes, submit_time=T0 - 5)

    got = explain(store, 1, slurm=SlurmView(True, None, running))

    text = got.lines()
    assert any(line.startswith("slurmopt: pinned on gpu[029-032]") for line in text)
    assert "Slurm now: RUNNING on gpu[029-032] in partition gpu" in text
    assert got.notes == ()
    doc = got.to_json()
    assert doc["slurm"] == {
        "reachable": True,
        "error": None,
        "job": {
            "state": "RUNNING",
            "reason": "",
            "partition": "gpu",
            "nodes": list(nodes),
            "held": False,
            "submit_time": T0 - 5,
            "start_time": None,
        },
    }


def test_disagreements_with_slurm_become_notes(store: Store, planned: Plan) -> None:
    elsewhere = Job(1, JobState.RUNNING, nodes=("gpu001",), submit_time=T0 - 5)
    moved = explain(store, 1, slurm=SlurmView(True, None, elsewhere))
    assert moved.notes == ("Slurm runs it on gpu001, not on the planned nodes",)

    reused = Job(1, JobState.PENDING, submit_time=T0 + 20)
    got = explain(store, 1, slurm=SlurmView(True, None, reused))
    assert len(got.notes) == 1 and "earlier job with the same id" in got.notes[0]

    gone = explain(store, 1, slurm=SlurmView(True, None, None))
    assert "Slurm now: not in Slurm's job list" in gone.lines()[-1]


def test_nodes_outside_the_fabric_give_a_note_not_an_error(store: Store, planned: Plan) -> None:
    other = Fabric.from_leaf_map({"leafX": ["other001"]}, source="elsewhere")
    got = explain(store, 1, fabric=other)
    assert got.start is not None and got.start.fabric is None
    assert len(got.notes) == 1 and got.notes[0].startswith("no fabric figures for gpu[029-032]")
    assert explain(store, 1, fabric=None).notes == ()


def test_relative_times_read_naturally() -> None:
    assert format_relative(0.4) == "now"
    assert format_relative(-12) == "12 s ago"
    assert format_relative(1500) == "in 25 min"
    assert format_relative(-3 * 3600) == "3.0 h ago"
    assert format_relative(3 * 86_400) == "in 3.0 d"
