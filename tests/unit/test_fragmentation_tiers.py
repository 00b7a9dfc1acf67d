"""Fragmentation per tier on a hand-built three-level fabric: 2 pods x 2 leaves x 2 nodes.

core
├── pod1: leaf1 (a1 a2), leaf2 (b1 b2)
└── pod2: leaf3 (c1 c2), leaf4 (d1 d2)

a1 idle, a2 runs 3 of 8 GPUs, b1 b2 idle; c1 drained, c2 idle, d1 idle, d2 runs 8.
Every figure below is counted by hand from that picture.
"""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import networkx as nx
import pytest

from slurmopt.cli.fragmentation import _print_report
from slurmopt.fabric import Fabric
from slurmopt.metrics import DaemonMetrics
from slurmopt.model import ClusterSnapshot, Node, NodeState, Partition
from slurmopt.policy.fragmentation import fragmentation_report

LAYOUT = {
    "pod1": {"leaf1": ("a1", "a2"), "leaf2": ("b1", "b2")},
    "pod2": {"leaf3": ("c1", "c2"), "leaf4": ("d1", "d2")},
}


def three_levels() -> Fabric:
    g: nx.Graph[str] = nx.Graph()
    link = {"bandwidth_gbps": 400.0, "oversubscription": 1.0}
    g.add_node("core", kind="switch", level=2)
    for pod, leaves in LAYOUT.items():
        g.add_node(pod, kind="switch", level=1)
        g.add_edge(pod, "core", **link)
        for leaf, nodes in leaves.items():
            g.add_node(leaf, kind="switch", level=0)
            g.add_edge(leaf, pod, **link)
            for node in nodes:
                g.add_node(node, kind="node")
                g.add_edge(node, leaf, **link)
    return Fabric(g, name="three-levels", source="hand-built")


def node(name: str, alloc: int = 0, flags: frozenset[str] = frozenset()) -> Node:
    state = NodeState.MIXED if 0 < alloc < 8 else NodeState.ALLOCATED if alloc else NodeState.IDLE
    return Node(
        name=name,
        state=state,
        flags=flags,
        partitions=("gpu",),
        gpus_total=8,
        gpus_alloc=alloc,
        cpus=64,
        alloc_cpus=alloc * 8,
    )


def snapshot() -> ClusterSnapshot:
    nodes = [
        node("a1"),
        node("a2", alloc=3),
        node("b1"),
        node("b2"),
        node("c1", flags=frozenset({"DRAIN"})),
        node("c2"),
        node("d1"),
        node("d2", alloc=8),
    ]
    names = tuple(n.name for n in nodes)
    return ClusterSnapshot(
        taken_at=1_700_000_000.0,
        nodes={n.name: n for n in nodes},
        jobs={},
        partitions={"gpu": Partition(name="gpu", nodes=names)},
    )


def test_figures_per_switch_of_every_tier() -> None:
    report = fragmentation_report(snapshot(), three_levels())
    per_level = {
        t.level: [
            (s.name, s.nodes, s.free_gpus, s.free_nodes, s.free_node_gpus) for s in t.switches
        ]
        for t in report.tiers
    }
    assert per_level == {
        0: [
            ("leaf1", 2, 13, 1, 8),  # a1 8 free, a2 5 free (stranded)
            ("leaf2", 2, 16, 2, 16),
            ("leaf3", 2, 8, 1, 8),  # c1 drained: its GPUs are not free
            ("leaf4", 2, 8, 1, 8),
        ],
        1: [("pod1", 4, 29, 3, 24), ("pod2", 4, 16, 2, 16)],
        2: [("core", 8, 45, 5, 40)],
    }
    best = {t.level: (t.best.name if t.best else None) for t in report.tiers}
    assert best == {0: "leaf2", 1: "pod1", 2: "core"}
    # The largest whole-node job within one pod is 3 nodes, though no leaf has more than 2.
    assert report.largest_single_leaf_job_nodes == 2
    assert report.largest_job_nodes == 5


def test_json_tiers_and_schema() -> None:
    doc = fragmentation_report(snapshot(), three_levels()).to_json()
    assert doc["schema_version"] == 2
    best = [
        (t["level"], t["switch"], t["largest_job_nodes"], t["largest_job_gpus"])
        for t in doc["tiers"]
    ]
    assert best == [(0, "leaf2", 2, 16), (1, "pod1", 3, 24), (2, "core", 5, 40)]
    assert doc["tiers"][1]["per_switch"][1] == {
        "name": "pod2",
        "nodes": 4,
        "free_gpus": 16,
        "free_nodes": 2,
        "largest_gang_nodes": 2,
        "largest_gang_gpus": 16,
    }
    schema = json.loads(
        resources.files("slurmopt.schemas").joinpath("fragmentation.schema.json").read_text()
    )
    jsonschema.validate(doc, schema)


def test_a_partition_scope_lists_only_switches_with_its_nodes() -> None:
    snap = snapshot()
    snap = ClusterSnapshot(
        taken_at=snap.taken_at,
        nodes=snap.nodes,
        jobs={},
        partitions={**snap.partitions, "pod2": Partition(name="pod2", nodes=("c1", "c2", "d1"))},
    )
    report = fragmentation_report(snap, three_levels(), partition="pod2")
    assert [(t.level, [s.name for s in t.switches]) for t in report.tiers] == [
        (0, ["leaf3", "leaf4"]),
        (1, ["pod2"]),
        (2, ["core"]),
    ]
    assert report.tiers[2].switches[0].free_nodes == 2  # c2, d1


def test_table_has_one_row_per_tier_and_every_switch_with_verbose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = fragmentation_report(snapshot(), three_levels())
    _print_report(report)
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("Largest whole-node job within one switch, per tier")
    rows = [line.split() for line in lines[start + 2 : start + 5]]
    assert rows == [
        ["0", "(leaves)", "4", "2", "16", "leaf2"],
        ["1", "(above", "leaves)", "2", "3", "24", "pod1"],
        ["2", "1", "5", "40", "core"],
    ]
    assert "Per switch" not in lines
    _print_report(report, verbose=True)
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("Per switch")
    assert lines[start + 2 : start + 9][4].split() == ["1", "pod1", "4", "29", "3", "24"]


def test_metrics_per_tier_and_per_switch_up_to_the_pods() -> None:
    metrics = DaemonMetrics()
    metrics.observe_fragmentation(fragmentation_report(snapshot(), three_levels()))

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    tier = "slurmopt_largest_job_now_tier_nodes"
    assert [value(tier, level=str(level)) for level in range(3)] == [2, 3, 5]
    assert value("slurmopt_switch_free_gpus", level="1", switch="pod1") == 29
    assert value("slurmopt_switch_free_nodes", level="0", switch="leaf2") == 2
    # Bounded cardinality: no per-switch series above the pods.
    assert value("slurmopt_switch_free_gpus", level="2", switch="core") is None
    series = [
        s
        for family in metrics.registry.collect()
        if family.name == "slurmopt_switch_free_nodes"
        for s in family.samples
    ]
    assert len(series) == 6  # 4 leaves + 2 pods
