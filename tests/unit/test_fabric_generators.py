"""Generated fabrics: shapes, names, levels and hop counts."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from slurmopt.errors import UsageError
from slurmopt.fabric import dragonfly_plus, fat_tree, leaf_spine


def test_leaf_spine_shape() -> None:
    fabric = leaf_spine(32, 8, spines=2, oversubscription=2.0, bandwidth_gbps=400)
    assert len(fabric.compute_nodes) == 32
    assert fabric.leaves() == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert fabric.levels()[1] == ["spine1", "spine2"]
    assert fabric.nodes_under("leaf1")[0] == "gpu0001"
    assert fabric.uplinks("leaf2") == ["spine1", "spine2"]
    assert fabric.link_gbps("leaf1", "spine1") == 200  # 400 Gb/s at 2:1
    assert fabric.link_gbps("gpu0001", "leaf1") == 400
    assert fabric.hops("gpu0001", "gpu0008") == 2
    assert fabric.hops("gpu0001", "gpu0009") == 4


def test_leaf_spine_short_last_leaf_and_single_spine_name() -> None:
    fabric = leaf_spine(10, 4)
    assert fabric.leaves() == ["leaf1", "leaf2", "leaf3"]
    assert fabric.nodes_under("leaf3") == ("gpu0009", "gpu0010")
    assert fabric.levels()[1] == ["spine"]


def test_fat_tree_shape_and_hops() -> None:
    fabric = fat_tree(4096, 8, 16, aggs_per_pod=4, cores_per_plane=2)
    levels = fabric.levels()
    assert len(fabric.compute_nodes) == 4096
    assert [len(levels[0]), len(levels[1]), len(levels[2])] == [512, 32 * 4, 4 * 2]
    nodes = sorted(fabric.compute_nodes)
    assert nodes[0] == "gpu0001" and nodes[-1] == "gpu4096"
    assert fabric.hops("gpu0001", "gpu0008") == 2  # same leaf
    assert fabric.hops("gpu0001", "gpu0009") == 4  # same pod (16 leaves of 8 = 128 nodes)
    assert fabric.hops("gpu0001", "gpu0128") == 4
    assert fabric.hops("gpu0001", "gpu0129") == 6  # next pod
    assert fabric.hops("gpu0001", "gpu4096") == 6
    # every leaf reaches every aggregation switch of its pod; aggs reach their core plane
    assert len(fabric.uplinks("leaf001")) == 4
    assert fabric.uplinks("agg-p01-1") == ["core-1-1", "core-1-2"]


def test_fat_tree_oversubscription_and_domains() -> None:
    fabric = fat_tree(
        64,
        4,
        4,
        oversubscription=2.0,
        core_oversubscription=4.0,
        bandwidth_gbps=400,
        nvlink_domain_size=8,
    )
    assert fabric.link_gbps("leaf01", fabric.uplinks("leaf01")[0]) == 200
    assert fabric.link_gbps("agg-p1-1", "core-1-1") == 100
    assert fabric.graph.nodes["gpu0008"]["domain"] == "nvl0001"
    assert fabric.graph.nodes["gpu0009"]["domain"] == "nvl0002"
    assert fabric.span(["gpu0001", "gpu0064"]).slowest_link_gbps == 100


def test_names_widen_past_four_digits() -> None:
    fabric = leaf_spine(12000, 100, prefix="node")
    assert "node00001" in fabric.compute_nodes and "node12000" in fabric.compute_nodes
    assert fabric.leaves()[0] == "leaf001"


def test_dragonfly_plus_shape_and_hops() -> None:
    fabric = dragonfly_plus(
        groups=4,
        leaves_per_group=4,
        nodes_per_leaf=8,
        spines_per_group=2,
        global_bandwidth_gbps=100,
    )
    assert len(fabric.compute_nodes) == 128
    assert len(fabric.leaves()) == 16
    assert len(fabric.levels()[1]) == 8
    assert fabric.graph.nodes["gpu0001"]["group"] == "g1"
    assert fabric.graph.nodes["gpu0128"]["group"] == "g4"
    assert fabric.hops("gpu0001", "gpu0002") == 2
    assert fabric.hops("gpu0001", "gpu0032") == 4  # same group
    assert fabric.hops("gpu0001", "gpu0033") == 5  # spine to spine across groups
    # spine i of each group meets spine i of every other group
    spine = "spine-g1-1"
    assert sorted(n for n in fabric.graph.neighbors(spine) if n.startswith("spine")) == [
        "spine-g2-1",
        "spine-g3-1",
        "spine-g4-1",
    ]
    assert fabric.span(["gpu0001", "gpu0128"]).slowest_link_gbps == 100


def test_bad_generator_arguments() -> None:
    with pytest.raises(UsageError, match="nodes_per_leaf"):
        leaf_spine(8, 0)


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: leaf_spine(99_999_999_999, 8), "nodes: 99999999999 is more than 1000000"),
        (lambda: leaf_spine(16, 8, oversubscription=math.nan), "finite positive"),
        (lambda: dragonfly_plus(100_000, 100, 100, 1), "is more than 1000000"),
        (lambda: dragonfly_plus(2_000, 1, 1, 1), "global links"),
    ],
)
def test_shapes_past_the_cap_or_not_finite_are_refused(
    build: Callable[[], object], words: str
) -> None:
    with pytest.raises(UsageError, match=words):
        build()
