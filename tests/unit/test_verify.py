"""``slurmopt.verify``: node choice, groups, the benchmark document and the flag rules."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import pytest

from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Node, NodeState, Partition
from slurmopt.verify import (
    BenchDocumentError,
    Flag,
    choose_nodes,
    evaluate,
    expectation,
    parse_document,
    plan_groups,
    ring_order,
)

LEAVES = {f"leaf{i}": [f"n{8 * (i - 1) + j}" for j in range(1, 9)] for i in range(1, 5)}
FABRIC = Fabric.from_leaf_map(LEAVES, source="test")  # 200 Gb/s everywhere: 25 GB/s expected


def snapshot(busy: Sequence[str] = (), drained: Sequence[str] = ()) -> ClusterSnapshot:
    nodes = []
    for leaf in LEAVES.values():
        for name in leaf:
            if name in busy:
                nodes.append(Node(name, NodeState.MIXED, gpus_total=8, gpus_alloc=2, cpus=8))
            elif name in drained:
                nodes.append(Node(name, NodeState.IDLE, frozenset({"DRAIN"}), gpus_total=8))
            else:
                nodes.append(Node(name, NodeState.IDLE, gpus_total=8, cpus=8))
    names = tuple(n.name for n in nodes)
    return ClusterSnapshot.build(
        0.0, nodes, [], [Partition("gpu", names, default=True), Partition("small", names[:3])]
    )


def result(size: int, busbw: float, ranks: int) -> dict[str, float]:
    algbw = busbw * ranks / (2 * (ranks - 1))
    return {"bytes": size, "time_us": size / algbw / 1e3, "algbw_gbps": algbw, "busbw_gbps": busbw}


def document(
    ring: Sequence[str],
    run_busbw: float,
    groups: Mapping[str, tuple[Sequence[str], float | None]],
    node_gpus: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A benchmark document as slurmopt.elastic.bench writes it (one rank per node)."""
    size = 256 << 20
    return {
        "schema_version": 1,
        "backend": "nccl",
        "world_size": len(ring),
        "nproc_per_node": 1,
        "iters": 5,
        "warmup": 1,
        "ranks": list(ring),
        "results": [
            result(size >> 4, run_busbw / 2, len(ring)),
            result(size, run_busbw, len(ring)),
        ],
        "groups": [
            {
                "name": name,
                "nodes": list(nodes),
                "ranks": [ring.index(n) for n in nodes],
                **(
                    {"error": "fewer than 2 ranks"}
                    if busbw is None
                    else result(size, busbw, len(nodes))
                ),
            }
            for name, (nodes, busbw) in groups.items()
        ],
        "node_gpus": dict(node_gpus or {n: {"nvml": "unavailable: no driver"} for n in ring}),
    }


def planned(ring: Sequence[str], fabric: Fabric = FABRIC) -> dict[str, list[str]]:
    return {g.name: list(g.nodes) for g in plan_groups(ring, fabric)}


def measured(ring: Sequence[str], busbw: Mapping[str, float], default: float) -> dict[str, Any]:
    """Every planned group of ``ring`` at ``default`` GB/s, except those in ``busbw``."""
    return {name: (nodes, busbw.get(name, default)) for name, nodes in planned(ring).items()}


def judge(doc: dict[str, Any], ring: Sequence[str], **kw: Any) -> Any:
    return evaluate(parse_document(doc), FABRIC, ring, **kw)


def kinds(flags: Sequence[Flag]) -> set[tuple[str, str, str]]:
    return {(f.kind, f.subject, f.rule) for f in flags}


# ---------------------------------------------------------------------- nodes and groups


def test_choose_nodes_takes_two_idle_nodes_per_leaf_in_turn() -> None:
    assert choose_nodes(snapshot(), FABRIC, 4) == ["n1", "n2", "n9", "n10"]
    assert choose_nodes(snapshot(), FABRIC, 5) == ["n1", "n2", "n9", "n10", "n17"]
    # Busy and drained nodes are skipped; a leaf with one free node gives one.
    chosen = choose_nodes(snapshot(busy=["n1", "n2", "n3"], drained=["n4", "n5", "n6", "n7"]),
                          FABRIC, 4)  # fmt: skip
    assert chosen == ["n8", "n9", "n10", "n17"]


def test_choose_nodes_needs_enough_idle_nodes_and_a_known_partition() -> None:
    with pytest.raises(UsageError, match=r"^2 idle node\(s\) in partition small, --nodes 4"):
        choose_nodes(snapshot(busy=["n1"]), FABRIC, 4, partition="small")
    with pytest.raises(UsageError, match="unknown partition 'nope'"):
        choose_nodes(snapshot(), FABRIC, 4, partition="nope")
    with pytest.raises(UsageError, match="at least 2"):
        choose_nodes(snapshot(), FABRIC, 1)


def test_ring_pairs_and_leaf_groups() -> None:
    ring = ring_order(["n10", "n1", "n9", "n2"], FABRIC)
    assert ring == ["n1", "n2", "n9", "n10"]
    assert planned(ring) == {
        "pair:n1+n2": ["n1", "n2"],
        "pair:n2+n9": ["n2", "n9"],
        "pair:n9+n10": ["n9", "n10"],
        "pair:n10+n1": ["n10", "n1"],
        "leaf:leaf1": ["n1", "n2"],
        "leaf:leaf2": ["n9", "n10"],
    }
    # Two nodes are one pair, the whole run: no pairs; one node per leaf: no leaf groups.
    assert planned(["n1", "n9"]) == {}
    # Every node under one leaf: that leaf is the whole run.
    assert planned(["n1", "n2", "n3"]) == {
        "pair:n1+n2": ["n1", "n2"],
        "pair:n2+n3": ["n2", "n3"],
        "pair:n3+n1": ["n3", "n1"],
    }


# ---------------------------------------------------------------------- the document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "schema_version 2, this slurmopt reads 1"),
        ({"ranks": []}, "ranks is not a list of node names"),
        ({"results": []}, "no results"),
        ({"world_size": 3}, "world_size 3 but 4 ranks"),
        ({"results": [{"bytes": 4, "time_us": -1, "algbw_gbps": 0, "busbw_gbps": 0}]},
         "results[0].time_us is negative: -1"),
        ({"results": [{"bytes": 4, "time_us": 1, "algbw_gbps": "x", "busbw_gbps": 0}]},
         "results[0].algbw_gbps is not a number: 'x'"),
    ],
)  # fmt: skip
def test_bad_documents_are_one_line_data_errors(change: dict[str, Any], message: str) -> None:
    doc = {**document(["n1", "n2", "n9", "n10"], 20.0, {}), **change}
    with pytest.raises(BenchDocumentError) as info:
        parse_document(doc, "bench.json")
    assert str(info.value) == f"bench.json: {message}"
    assert info.value.exit_code == 65


# ---------------------------------------------------------------------- the flag rules


RING = ["n1", "n2", "n9", "n10"]


def test_healthy_cluster_passes() -> None:
    report = judge(document(RING, 22.0, measured(RING, {}, 23.0)), RING)
    assert report.passed and report.flags == ()
    assert report.run.expected.busbw_GBps == pytest.approx(25.0)
    assert report.run.efficiency == pytest.approx(22.0 / 25.0)
    doc = json.loads(json.dumps(report.as_dict()))
    assert doc["schema_version"] == 1 and doc["passed"] is True
    assert doc["nodes"] == RING
    assert [g["name"] for g in doc["groups"]][:2] == ["pair:n1+n2", "pair:n2+n9"]
    assert doc["groups"][1]["switches"] == ["leaf1", "leaf2"]
    assert doc["results"][-1]["busbw_GBps"] == pytest.approx(22.0)


def test_a_slow_node_in_a_four_node_ring_is_named() -> None:
    slow = {"pair:n1+n2": 4.0, "pair:n2+n9": 4.5, "leaf:leaf1": 4.0}
    report = judge(document(RING, 4.0, measured(RING, slow, 23.0)), RING)
    assert ("node", "n2", "both-pairs") in kinds(report.flags)
    assert {f.subject for f in report.flags if f.kind == "node"} == {"n2"}
    assert ("pair", "pair:n1+n2", "outlier") in kinds(report.flags)
    assert ("pair", "pair:n2+n9", "outlier") in kinds(report.flags)
    assert ("pair", "pair:n9+n10", "outlier") not in kinds(report.flags)
    # The slow node explains its leaf's slow group: the switch is not blamed.
    assert not [f for f in report.flags if f.kind == "switch"]
    message = next(f.message for f in report.flags if f.kind == "node")
    assert message.startswith("node n2: slow with both ring neighbours")
    pair = next(f.message for f in report.flags if f.subject == "pair:n2+n9")
    assert pair.startswith("pair:n2+n9 (across leaf1, leaf2): ")


def test_a_slow_node_in_a_three_node_ring_is_named() -> None:
    ring = ["n1", "n2", "n3"]
    slow = {"pair:n1+n2": 5.0, "pair:n2+n3": 5.0}
    report = judge(document(ring, 5.0, measured(ring, slow, 23.0)), ring)
    assert {f.subject for f in report.flags if f.kind == "node"} == {"n2"}


def test_a_slow_leaf_switch_is_flagged() -> None:
    ring = ["n1", "n2", "n9", "n10", "n17", "n18", "n25", "n26"]
    assert ring_order(ring, FABRIC) == ring
    # Everything through leaf2 (n9, n10) is slow: its pairs and its own group.
    slow = {"pair:n2+n9": 6.0, "pair:n9+n10": 6.0, "pair:n10+n17": 6.0, "leaf:leaf2": 6.0}
    report = judge(document(ring, 6.0, measured(ring, slow, 23.0)), ring)
    assert [f.subject for f in report.flags if f.kind == "switch"] == ["leaf2"]
    assert {f.subject for f in report.flags if f.kind == "node"} == {"n9", "n10"}
    assert ("run", "all", "efficiency") in kinds(report.flags)


def test_a_slow_leaf_group_alone_blames_the_switch() -> None:
    report = judge(document(RING, 20.0, measured(RING, {"leaf:leaf2": 5.0}, 23.0)), RING)
    assert kinds(report.flags) == {
        ("leaf", "leaf:leaf2", "efficiency"),
        ("switch", "leaf2", "outlier"),
    }


def test_expected_bandwidth_follows_the_slowest_link_of_the_fabric() -> None:
    g: nx.Graph[str] = nx.Graph()
    g.add_node("spine", kind="switch", level=1)
    for leaf, nodes in (("leaf1", ["a", "b"]), ("leaf2", ["c", "d"])):
        g.add_node(leaf, kind="switch", level=0)
        g.add_edge(leaf, "spine", bandwidth_gbps=400.0, oversubscription=4.0)  # 100 Gb/s
        for node in nodes:
            g.add_node(node, kind="node")
            g.add_edge(node, leaf, bandwidth_gbps=400.0, oversubscription=1.0)
    fabric = Fabric(g, source="oversubscribed")
    assert expectation(fabric, ["a", "b"]).busbw_GBps == pytest.approx(50.0)
    assert expectation(fabric, ["a", "c"]).busbw_GBps == pytest.approx(12.5)
    ring = ["a", "b", "c", "d"]
    groups = {
        "pair:a+b": (["a", "b"], 45.0),
        "pair:b+c": (["b", "c"], 11.0),
        "pair:c+d": (["c", "d"], 45.0),
        "pair:d+a": (["d", "a"], 11.0),
    }
    # Cross-leaf pairs are slower, and expected to be: scores are efficiencies.
    report = evaluate(parse_document(document(ring, 11.0, groups)), fabric, ring)
    assert report.passed, report.flags
    assert report.run.expected.busbw_GBps == pytest.approx(12.5)
    assert report.run.expected.slowest_link_gbps == pytest.approx(100.0)
    # Asking for more than the fabric promises: the run falls short.
    report = evaluate(parse_document(document(ring, 11.0, groups)), fabric, ring, expect_busbw=40)
    assert ("run", "all", "efficiency") in kinds(report.flags)
    assert report.run.expected.source == "--expect-busbw"


def test_unmeasured_groups_and_missing_nodes_are_flagged() -> None:
    groups = measured(RING, {}, 23.0)
    groups["leaf:leaf1"] = (["n1", "n2"], None)
    report = judge(document(RING, 22.0, groups), [*RING, "n17"])
    assert kinds(report.flags) == {
        ("node", "n17", "missing"),
        ("group", "leaf:leaf1", "not-run"),
    }


def test_thresholds_are_checked() -> None:
    doc = parse_document(document(RING, 22.0, {}))
    with pytest.raises(UsageError, match="--min-efficiency must be 0 to 1"):
        evaluate(doc, FABRIC, RING, min_efficiency=1.5)
    with pytest.raises(UsageError, match="--outlier must be above 0"):
        evaluate(doc, FABRIC, RING, outlier=0)
    with pytest.raises(UsageError, match="--expect-busbw must be a positive"):
        evaluate(doc, FABRIC, RING, expect_busbw=-1)


def test_unknown_nodes_have_no_expectation_and_compare_raw_bandwidth() -> None:
    ring = ["x1", "x2", "x3"]
    groups = {
        "pair:x1+x2": (["x1", "x2"], 10.0),
        "pair:x2+x3": (["x2", "x3"], 10.0),
        "pair:x3+x1": (["x3", "x1"], 2.0),
    }
    report = evaluate(parse_document(document(ring, 9.0, groups)), FABRIC, ring)
    assert report.run.expected.busbw_GBps is None
    assert report.run.expected.source.startswith("unknown: ")
    assert kinds(report.flags) == {("pair", "pair:x3+x1", "outlier")}
