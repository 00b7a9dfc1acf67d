"""Span queries: leaves spanned, worst hop count, slowest link."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest

from slurmopt.errors import FabricError
from slurmopt.fabric import Fabric, Span, dragonfly_plus, effective_gbps, fat_tree


def test_span_single_node_and_same_leaf() -> None:
    fabric = Fabric.from_leaf_map({"leaf1": ["a", "b"], "leaf2": ["c"]}, bandwidth_gbps=100)
    assert fabric.span(["a"]) == Span(("leaf1",), 1, 0, None)
    assert fabric.span(["a", "b"]) == Span(("leaf1",), 1, 2, 100.0)
    assert fabric.span({"a", "b", "c"}) == Span(("leaf1", "leaf2"), 2, 4, 100.0)


def test_span_counts_the_members_own_links() -> None:
    fabric = Fabric.from_leaf_map({"leaf1": ["a", "b"]}, bandwidth_gbps=100)
    fabric.graph.edges["b", "leaf1"]["bandwidth_gbps"] = 25.0
    assert fabric.span(["a", "b"]).slowest_link_gbps == 25.0


def test_span_of_unknown_node_fails() -> None:
    fabric = Fabric.from_leaf_map({"leaf1": ["a"]})
    with pytest.raises(FabricError, match="node zz is not in the fabric"):
        fabric.span(["a", "zz"])


def test_span_across_pods_sees_core_oversubscription() -> None:
    fabric = fat_tree(256, 8, 4, core_oversubscription=4.0, bandwidth_gbps=400)
    in_pod = fabric.span(["gpu0001", "gpu0009", "gpu0032"])
    assert in_pod.num_leaves == 3 and in_pod.max_hops == 4 and in_pod.slowest_link_gbps == 400
    across = fabric.span(["gpu0001", "gpu0033"])
    assert across.max_hops == 6 and across.slowest_link_gbps == 100


def _brute_force(fabric: Fabric, nodes: list[str]) -> tuple[int, float]:
    """Every node pair, every minimum-hop path: the definition, computed the slow way."""
    max_hops, slowest = 0, float("inf")
    for a, b in itertools.combinations(nodes, 2):
        best = 0.0
        for path in nx.all_shortest_paths(fabric.graph, a, b):
            max_hops = max(max_hops, len(path) - 1)
            links = itertools.pairwise(path)
            width = min(effective_gbps(fabric.graph.edges[u, v]) for u, v in links)
            best = max(best, width)
        slowest = min(slowest, best)
    return max_hops, slowest


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_span_matches_brute_force_on_uneven_fabrics(seed: int) -> None:
    rng = random.Random(seed)
    fabric = dragonfly_plus(3, 3, 2, 2, global_bandwidth_gbps=300)
    tree = fat_tree(48, 4, 3, aggs_per_pod=2, oversubscription=1.5, core_oversubscription=3.0)
    for f in (fabric, tree):
        for u, v in rng.sample(sorted(f.graph.edges), 10):  # uneven link speeds
            f.graph.edges[u, v]["bandwidth_gbps"] = rng.choice([100.0, 200.0, 400.0])
        f2 = Fabric(f.graph)  # fresh caches over the edited graph
        members = rng.sample(sorted(f2.compute_nodes), 6)
        span = f2.span(members)
        assert (span.max_hops, span.slowest_link_gbps) == _brute_force(f2, members)
        assert span.leaves == tuple(sorted({leaf for n in members if (leaf := f2.leaf_of(n))}))


def test_span_hops_agree_with_pairwise_hops_on_a_large_fabric() -> None:
    fabric = fat_tree(4096, 8, 16, aggs_per_pod=4)
    members = random.Random(7).sample(sorted(fabric.compute_nodes), 300)
    span = fabric.span(members)
    assert span.max_hops == 6
    assert span.num_leaves == len({fabric.leaf_of(n) for n in members})
    sample = members[:40]
    assert fabric.span(sample).max_hops == max(
        fabric.hops(a, b) for a, b in itertools.combinations(sample, 2)
    )
