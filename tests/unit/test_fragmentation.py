"""Fragmentation figures on hand-built snapshots, each expected number worked out by hand."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.policy.fragmentation import (
    NO_LEAF,
    JobShape,
    JobSizeDistribution,
    fragmentation_report,
    queue_distribution,
)

T0 = 1_700_000_000.0


def gpu_node(
    name: str,
    state: NodeState = NodeState.IDLE,
    alloc: int = 0,
    flags: frozenset[str] = frozenset(),
    cpus_alloc: int | None = None,
    partitions: tuple[str, ...] = (),
) -> Node:
    return Node(
        name=name,
        state=state,
        flags=flags,
        partitions=partitions,
        gpus_total=8,
        gpus_alloc=alloc,
        cpus=64,
        alloc_cpus=alloc * 8 if cpus_alloc is None else cpus_alloc,
    )


def job(job_id: int, state: JobState, nodes: int, gpn: int, partition: str = "a") -> Job:
    return Job(job_id=job_id, state=state, partition=partition, node_count=nodes, gpus_per_node=gpn)


# leaf1: n1 idle, n2 mixed (5 of 8 GPUs), n3 allocated (8 of 8), n4 idle+DRAIN
# leaf2: n5 idle, n6 idle, n7 DOWN, n8 mixed+DRAINING (2 of 8)
# n9: idle, under no leaf switch
NODES = [
    gpu_node("n1", partitions=("a",)),
    gpu_node("n2", NodeState.MIXED, alloc=5, partitions=("a",)),
    gpu_node("n3", NodeState.ALLOCATED, alloc=8, partitions=("a",)),
    gpu_node("n4", flags=frozenset({"DRAIN"}), partitions=("a",)),
    gpu_node("n5", partitions=("b",)),
    gpu_node("n6", partitions=("b",)),
    gpu_node("n7", NodeState.DOWN, partitions=("b",)),
    gpu_node("n8", NodeState.MIXED, alloc=2, flags=frozenset({"DRAIN"}), partitions=("b",)),
    gpu_node("n9"),
]
JOBS = [
    job(1, JobState.RUNNING, 1, 5, "a"),  # on n2
    job(2, JobState.RUNNING, 1, 8, "a"),  # on n3
    job(3, JobState.RUNNING, 1, 2, "b"),  # on n8
    job(4, JobState.PENDING, 2, 8, "a,b"),
    job(5, JobState.PENDING, 1, 0, "a"),  # CPU only: not in the distribution
    job(6, JobState.COMPLETED, 4, 8, "a"),  # finished: not in the distribution
]
PARTITIONS = [
    Partition("a", nodes=("n1", "n2", "n3", "n4")),
    Partition("b", nodes=("n5", "n6", "n7", "n8")),
]
FABRIC = Fabric.from_leaf_map(
    {"leaf1": ["n1", "n2", "n3", "n4"], "leaf2": ["n5", "n6", "n7", "n8"]}, source="hand-built"
)


@pytest.fixture
def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot.build(T0, NODES, JOBS, PARTITIONS)


def test_whole_cluster_figures(snapshot: ClusterSnapshot) -> None:
    r = fragmentation_report(snapshot, FABRIC)
    assert r.nodes == 9
    assert r.total_gpus == 72
    assert r.allocated_gpus == 5 + 8 + 2
    assert r.unavailable_gpus == 8 + 8 + 6  # n4, n7, n8's unallocated GPUs
    assert r.free_gpus == 8 + 3 + 8 + 8 + 8  # n1, n2, n5, n6, n9
    assert r.total_gpus == r.allocated_gpus + r.unavailable_gpus + r.free_gpus
    assert r.stranded_gpus == 3
    assert r.fully_free_nodes == 4
    assert r.partly_used_nodes == 1
    assert r.busy_nodes == 1
    assert r.unavailable_nodes == 3
    assert r.largest_single_leaf_job_nodes == 2
    assert r.largest_job_nodes == 4
    assert r.fragmentation_index == pytest.approx(3 / 35)
    assert r.largest_job_now.whole_nodes == 4
    assert r.largest_job_now.whole_nodes_on_one_leaf == 2
    assert r.largest_job_now.leaf == "leaf2"
    assert r.largest_job_now.gpus_on_one_node == 8
    assert r.taken_at == T0
    assert r.fabric_source == "hand-built"


def test_switch_entries(snapshot: ClusterSnapshot) -> None:
    r = fragmentation_report(snapshot, FABRIC)
    got = {s.name: s.to_json() for s in r.switches}
    assert [s.name for s in r.switches] == ["leaf1", "leaf2", NO_LEAF]
    assert got["leaf1"] == {
        "name": "leaf1", "nodes": 4, "total_gpus": 32, "free_gpus": 11, "free_nodes": 1,
        "partly_used_nodes": 1, "busy_nodes": 1, "unavailable_nodes": 1, "stranded_gpus": 3,
    }  # fmt: skip
    assert got["leaf2"] == {
        "name": "leaf2", "nodes": 4, "total_gpus": 32, "free_gpus": 16, "free_nodes": 2,
        "partly_used_nodes": 0, "busy_nodes": 0, "unavailable_nodes": 2, "stranded_gpus": 0,
    }  # fmt: skip
    assert got[NO_LEAF] == {
        "name": NO_LEAF, "nodes": 1, "total_gpus": 8, "free_gpus": 8, "free_nodes": 1,
        "partly_used_nodes": 0, "busy_nodes": 0, "unavailable_nodes": 0, "stranded_gpus": 0,
    }  # fmt: skip
    assert any(NO_LEAF in n for n in r.notes)


def test_queue_fgd_by_hand(snapshot: ClusterSnapshot) -> None:
    # Free GPUs per available node: 8 on n1, n5, n6, n9 and 3 on n2 (35 in all).
    # Queue shapes (1x2, 1x5, 1x8, 2x8) one job each: the 3 GPUs on n2 are
    # unusable to all but the 2-GPU job, so (0 + 3 + 3 + 3) / 35 / 4.
    r = fragmentation_report(snapshot, FABRIC)
    assert r.job_sizes.source == "queue"
    assert r.job_sizes.shapes == (
        JobShape(1, 2, 1.0),
        JobShape(1, 5, 1.0),
        JobShape(1, 8, 1.0),
        JobShape(2, 8, 1.0),
    )
    assert r.shape_unusable_share == pytest.approx((0, 3 / 35, 3 / 35, 3 / 35))
    assert r.fgd_unusable_share == pytest.approx(9 / 140)


def test_partition_scope(snapshot: ClusterSnapshot) -> None:
    r = fragmentation_report(snapshot, FABRIC, partition="a")
    assert r.partition == "a"
    assert [s.name for s in r.switches] == ["leaf1"]
    assert (r.nodes, r.total_gpus, r.free_gpus, r.stranded_gpus) == (4, 32, 11, 3)
    assert (r.unavailable_gpus, r.allocated_gpus) == (8, 13)
    assert (r.fully_free_nodes, r.largest_single_leaf_job_nodes, r.largest_job_nodes) == (1, 1, 1)
    assert r.fragmentation_index == pytest.approx(3 / 11)
    # Partition a's queue: 1x5, 1x8 and the 2x8 job that also lists a.  Only
    # one node has 8 free, so the 2-node job can use none of the 11 free GPUs:
    # (3/11 + 3/11 + 11/11) / 3.
    assert [(s.nodes, s.gpus_per_node) for s in r.job_sizes.shapes] == [(1, 5), (1, 8), (2, 8)]
    assert r.fgd_unusable_share == pytest.approx(17 / 33)


def test_unknown_partition_is_a_usage_error(snapshot: ClusterSnapshot) -> None:
    with pytest.raises(UsageError, match=r"unknown partition 'nosuch' \(known: a, b\)"):
        fragmentation_report(snapshot, FABRIC, partition="nosuch")


@pytest.mark.parametrize(
    ("state", "flags"),
    [
        (NodeState.IDLE, {"DRAIN"}),
        (NodeState.MIXED, {"DRAINING"}),
        (NodeState.IDLE, {"DRAINED"}),
        (NodeState.IDLE, {"NOT_RESPONDING"}),
        (NodeState.IDLE, {"MAINTENANCE"}),
        (NodeState.IDLE, {"RESERVED"}),
        (NodeState.IDLE, {"POWERED_DOWN"}),
        (NodeState.IDLE, {"FAIL"}),
        (NodeState.IDLE, {"INVALID_REG"}),
        (NodeState.DOWN, set()),
        (NodeState.FUTURE, set()),
        (NodeState.UNKNOWN, set()),
        (NodeState.ERROR, set()),
    ],
)
def test_unavailable_nodes_never_count_free(state: NodeState, flags: set[str]) -> None:
    alloc = 3 if state is NodeState.MIXED else 0
    nodes = [gpu_node("x1", state, alloc=alloc, flags=frozenset(flags)), gpu_node("x2")]
    snap = ClusterSnapshot.build(T0, nodes, [], [])
    r = fragmentation_report(snap, Fabric.from_leaf_map({"leaf1": ["x1", "x2"]}))
    assert (r.free_gpus, r.unavailable_gpus, r.allocated_gpus) == (8, 8 - alloc, alloc)
    assert (r.unavailable_nodes, r.fully_free_nodes, r.stranded_gpus) == (1, 1, 0)
    assert r.fragmentation_index == 0.0


def test_cpu_only_use_and_completing_strand_the_gpus() -> None:
    nodes = [
        gpu_node("c1", NodeState.MIXED, alloc=0, cpus_alloc=4),  # a CPU-only job
        gpu_node("c2", flags=frozenset({"COMPLETING"})),  # a job still finishing
        gpu_node("c3"),
    ]
    snap = ClusterSnapshot.build(T0, nodes, [], [])
    r = fragmentation_report(snap, Fabric.from_leaf_map({"leaf1": ["c1", "c2", "c3"]}))
    assert (r.free_gpus, r.stranded_gpus, r.partly_used_nodes, r.fully_free_nodes) == (24, 16, 2, 1)
    assert r.fragmentation_index == pytest.approx(16 / 24)
    assert r.largest_job_now.whole_nodes == 1


def test_empty_cluster() -> None:
    snap = ClusterSnapshot.build(T0, [], [], [])
    r = fragmentation_report(snap, Fabric.from_leaf_map({}))
    assert (r.nodes, r.total_gpus, r.free_gpus, r.stranded_gpus, r.largest_job_nodes) == (
        0, 0, 0, 0, 0,
    )  # fmt: skip
    assert r.fragmentation_index == 0.0
    assert r.fgd_unusable_share is None
    assert r.switches == ()
    assert r.largest_job_now.leaf is None
    assert any("fgd_unusable_share is null" in n for n in r.notes)


def test_everything_busy_has_index_zero_and_full_fgd_is_zero() -> None:
    nodes = [gpu_node("b1", NodeState.ALLOCATED, alloc=8)]
    jobs = [job(1, JobState.RUNNING, 1, 8)]
    snap = ClusterSnapshot.build(T0, nodes, jobs, [])
    r = fragmentation_report(snap, Fabric.from_leaf_map({"leaf1": ["b1"]}))
    assert (r.free_gpus, r.busy_nodes, r.fragmentation_index) == (0, 1, 0.0)
    assert r.fgd_unusable_share == 0.0


def test_fgd_with_given_distribution_by_hand() -> None:
    # Free GPUs: 8 on f1 (idle), 6 on f2, 1 on f3: 15 in all.
    nodes = [
        gpu_node("f1"),
        gpu_node("f2", NodeState.MIXED, alloc=2),
        gpu_node("f3", NodeState.MIXED, alloc=7),
    ]
    snap = ClusterSnapshot.build(T0, nodes, [], [])
    fabric = Fabric.from_leaf_map({"leaf1": ["f1", "f2", "f3"]})
    dist = JobSizeDistribution(
        "sizes.csv",
        (JobShape(1, 1, 1.0), JobShape(1, 4, 2.0), JobShape(2, 6, 1.0), JobShape(3, 4, 1.0)),
    )
    r = fragmentation_report(snap, fabric, job_sizes=dist)
    # 1x1: nothing unusable.  1x4: f3's 1 GPU.  2x6: f1 and f2 fit, f3's 1 GPU.
    # 3x4: only two nodes have 4 free, so all 15.  Weights 1, 2, 1, 1.
    assert r.shape_unusable_share == pytest.approx((0, 1 / 15, 1 / 15, 1.0))
    assert r.fgd_unusable_share == pytest.approx((0 + 2 * 1 / 15 + 1 / 15 + 1) / 5)
    assert r.stranded_gpus == 7
    assert r.to_json()["job_sizes"]["source"] == "sizes.csv"


def test_queue_distribution_uses_held_gpus_of_running_jobs() -> None:
    running = Job(
        job_id=7,
        state=JobState.RUNNING,
        nodes=("g1", "g2"),
        node_count=2,
        gpu_indices={"g1": (0, 1, 2), "g2": (0, 1, 2)},
    )
    snap = ClusterSnapshot.build(T0, [], [running], [])
    assert queue_distribution(snap).shapes == (JobShape(2, 3, 1.0),)


def test_report_matches_the_json_schema(snapshot: ClusterSnapshot) -> None:
    schema = json.loads(
        resources.files("slurmopt").joinpath("schemas/fragmentation.schema.json").read_text()
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    for partition in (None, "a"):
        doc = json.loads(json.dumps(fragmentation_report(snapshot, FABRIC, partition).to_json()))
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    empty = fragmentation_report(ClusterSnapshot.build(T0, [], [], []), Fabric.from_leaf_map({}))
    jsonschema.validate(empty.to_json(), schema, cls=jsonschema.Draft202012Validator)
    broken = fragmentation_report(snapshot, FABRIC).to_json()
    del broken["switches"][0]["free_nodes"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft202012Validator)
