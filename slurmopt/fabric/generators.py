"""Synthetic fabrics of the common GPU-cluster shapes, for tests, simulations and benchmarks.

Each generator builds the graph with bulk ``add_*_from`` calls so that
fabrics of thousands of nodes take well under a second.  Node names are
``<prefix><number>`` zero-padded to at least four digits (``gpu0001``) and
wide enough for the count; switch names are padded the same way per kind.
Given ``nvlink_domain_size``, consecutive nodes share an NVLink domain
(node attribute ``domain``, ``nvl0001``...).
"""

from __future__ import annotations

import math

import networkx as nx

from slurmopt.errors import UsageError
from slurmopt.fabric.core import Fabric
from slurmopt.hostlist import MAX_NAMES


def _names(prefix: str, count: int, min_width: int = 1) -> list[str]:
    width = max(min_width, len(str(count)))
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def _positive(**values: float) -> None:
    for key, value in values.items():
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{key} must be a finite positive number, got {value}")


def _within(what: str, count: int) -> None:
    """Refuse a shape larger than any fabric description may be (:data:`MAX_NAMES`)."""
    if count > MAX_NAMES:
        raise UsageError(f"{what}: {count} is more than {MAX_NAMES}")


def _link(bandwidth_gbps: float, oversubscription: float = 1.0) -> dict[str, float]:
    return {"bandwidth_gbps": float(bandwidth_gbps), "oversubscription": float(oversubscription)}


def _attach_nodes(
    graph: nx.Graph[str],
    leaves: list[str],
    num_nodes: int,
    nodes_per_leaf: int,
    prefix: str,
    bandwidth_gbps: float,
    nvlink_domain_size: int | None,
    group_of_leaf: dict[str, str] | None = None,
) -> None:
    """Fill the leaves in order with ``num_nodes`` compute nodes (the last leaf may be short)."""
    nodes = _names(prefix, num_nodes, min_width=4)
    domain_names = (
        _names("nvl", math.ceil(num_nodes / nvlink_domain_size), min_width=4)
        if nvlink_domain_size
        else []
    )
    node_attrs = []
    for i, node in enumerate(nodes):
        attrs: dict[str, str] = {"kind": "node"}
        if nvlink_domain_size:
            attrs["domain"] = domain_names[i // nvlink_domain_size]
        if group_of_leaf is not None:
            attrs["group"] = group_of_leaf[leaves[i // nodes_per_leaf]]
        node_attrs.append((node, attrs))
    graph.add_nodes_from(node_attrs)
    link = _link(bandwidth_gbps)
    graph.add_edges_from((node, leaves[i // nodes_per_leaf], link) for i, node in enumerate(nodes))


def leaf_spine(
    num_nodes: int,
    nodes_per_leaf: int,
    spines: int = 1,
    oversubscription: float = 1.0,
    bandwidth_gbps: float = 400.0,
    prefix: str = "gpu",
    nvlink_domain_size: int | None = None,
) -> Fabric:
    """Two levels: every leaf links to every spine; ``oversubscription`` is on the leaf uplinks."""
    _positive(
        num_nodes=num_nodes,
        nodes_per_leaf=nodes_per_leaf,
        spines=spines,
        oversubscription=oversubscription,
        bandwidth_gbps=bandwidth_gbps,
    )
    _within("nodes", num_nodes)
    _within("spines", spines)
    _within("leaf-spine links", math.ceil(num_nodes / nodes_per_leaf) * spines)
    leaves = _names("leaf", math.ceil(num_nodes / nodes_per_leaf))
    spine_names = ["spine"] if spines == 1 else _names("spine", spines)
    graph: nx.Graph[str] = nx.Graph(name="leaf-spine")
    graph.add_nodes_from(leaves, kind="switch", level=0)
    graph.add_nodes_from(spine_names, kind="switch", level=1)
    up = _link(bandwidth_gbps, oversubscription)
    graph.add_edges_from((leaf, spine, up) for leaf in leaves for spine in spine_names)
    _attach_nodes(
        graph, leaves, num_nodes, nodes_per_leaf, prefix, bandwidth_gbps, nvlink_domain_size
    )
    return Fabric(
        graph,
        name="leaf-spine",
        source=f"generated leaf_spine({num_nodes}, {nodes_per_leaf}, spines={spines})",
    )


def fat_tree(
    num_nodes: int,
    nodes_per_leaf: int,
    leaves_per_pod: int,
    aggs_per_pod: int = 2,
    cores_per_plane: int = 1,
    oversubscription: float = 1.0,
    core_oversubscription: float = 1.0,
    bandwidth_gbps: float = 400.0,
    prefix: str = "gpu",
    nvlink_domain_size: int | None = None,
) -> Fabric:
    """Three levels, a folded Clos: leaf, pod aggregation, core.

    Every leaf links to every aggregation switch of its pod; aggregation
    switch *j* of every pod links to the ``cores_per_plane`` core switches
    of plane *j*.  Hops: same leaf 2, same pod 4, across pods 6.
    ``oversubscription`` is on the leaf uplinks, ``core_oversubscription``
    on the aggregation uplinks.
    """
    _positive(
        num_nodes=num_nodes,
        nodes_per_leaf=nodes_per_leaf,
        leaves_per_pod=leaves_per_pod,
        aggs_per_pod=aggs_per_pod,
        cores_per_plane=cores_per_plane,
        oversubscription=oversubscription,
        core_oversubscription=core_oversubscription,
        bandwidth_gbps=bandwidth_gbps,
    )
    _within("nodes", num_nodes)
    num_leaves = math.ceil(num_nodes / nodes_per_leaf)
    num_pods = math.ceil(num_leaves / leaves_per_pod)
    _within("leaf uplinks", num_leaves * aggs_per_pod)
    _within("core links", num_pods * aggs_per_pod * cores_per_plane)
    leaves = _names("leaf", num_leaves)
    pod_names = _names("p", num_pods)
    aggs = [[f"agg-{pod}-{j + 1}" for j in range(aggs_per_pod)] for pod in pod_names]
    planes = [_names(f"core-{j + 1}-", cores_per_plane) for j in range(aggs_per_pod)]
    graph: nx.Graph[str] = nx.Graph(name="fat-tree")
    graph.add_nodes_from(
        ((leaf, {"pod": pod_names[i // leaves_per_pod]}) for i, leaf in enumerate(leaves)),
        kind="switch",
        level=0,
    )
    graph.add_nodes_from(
        (
            (a, {"pod": pod})
            for pod, pod_aggs in zip(pod_names, aggs, strict=True)
            for a in pod_aggs
        ),
        kind="switch",
        level=1,
    )
    graph.add_nodes_from((c for plane in planes for c in plane), kind="switch", level=2)
    up = _link(bandwidth_gbps, oversubscription)
    graph.add_edges_from(
        (leaf, agg, up) for i, leaf in enumerate(leaves) for agg in aggs[i // leaves_per_pod]
    )
    core_up = _link(bandwidth_gbps, core_oversubscription)
    graph.add_edges_from(
        (agg, core, core_up)
        for pod_aggs in aggs
        for j, agg in enumerate(pod_aggs)
        for core in planes[j]
    )
    _attach_nodes(
        graph, leaves, num_nodes, nodes_per_leaf, prefix, bandwidth_gbps, nvlink_domain_size
    )
    return Fabric(
        graph,
        name="fat-tree",
        source=f"generated fat_tree({num_nodes}, {nodes_per_leaf}, {leaves_per_pod})",
    )


def clos(
    pods: int,
    leaves_per_pod: int,
    nodes_per_leaf: int,
    oversubscription: float = 1.0,
    aggs_per_pod: int = 2,
    bandwidth_gbps: float = 400.0,
    prefix: str = "gpu",
    nvlink_domain_size: int | None = None,
) -> Fabric:
    """A three-tier Clos sized by pods: leaf, pod spine, core.

    A :func:`fat_tree` of ``pods`` full pods whose pod-spine uplinks to the
    core are ``oversubscription``:1, so :meth:`Fabric.span` of nodes in two
    pods reports ``bandwidth_gbps / oversubscription`` and of nodes in one
    pod the full ``bandwidth_gbps``.
    """
    _positive(pods=pods, leaves_per_pod=leaves_per_pod, nodes_per_leaf=nodes_per_leaf)
    fabric = fat_tree(
        pods * leaves_per_pod * nodes_per_leaf,
        nodes_per_leaf,
        leaves_per_pod,
        aggs_per_pod=aggs_per_pod,
        core_oversubscription=oversubscription,
        bandwidth_gbps=bandwidth_gbps,
        prefix=prefix,
        nvlink_domain_size=nvlink_domain_size,
    )
    fabric.graph.graph["name"] = fabric.name = "clos"
    fabric.source = (
        f"generated clos({pods}, {leaves_per_pod}, {nodes_per_leaf}, "
        f"oversubscription={oversubscription:g})"
    )
    return fabric


def dragonfly_plus(
    groups: int,
    leaves_per_group: int,
    nodes_per_leaf: int,
    spines_per_group: int,
    bandwidth_gbps: float = 400.0,
    global_bandwidth_gbps: float | None = None,
    global_oversubscription: float = 1.0,
    prefix: str = "gpu",
    nvlink_domain_size: int | None = None,
) -> Fabric:
    """Groups of leaf-spine fabrics whose spines link directly across groups.

    Inside a group every leaf links to every spine; spine *i* of each group
    links to spine *i* of every other group (global links).  Hops: same
    leaf 2, same group 4, across groups 5.  Nodes and switches carry their
    ``group``.
    """
    _positive(
        groups=groups,
        leaves_per_group=leaves_per_group,
        nodes_per_leaf=nodes_per_leaf,
        spines_per_group=spines_per_group,
        bandwidth_gbps=bandwidth_gbps,
        global_oversubscription=global_oversubscription,
    )
    _within("nodes", groups * leaves_per_group * nodes_per_leaf)
    _within("links in groups", groups * leaves_per_group * spines_per_group)
    _within("global links", spines_per_group * groups * (groups - 1) // 2)
    group_names = _names("g", groups)
    leaf_names = [_names(f"leaf-{g}-", leaves_per_group) for g in group_names]
    spine_names = [_names(f"spine-{g}-", spines_per_group) for g in group_names]
    graph: nx.Graph[str] = nx.Graph(name="dragonfly+")
    group_of_leaf: dict[str, str] = {}
    for g, leaves, spines in zip(group_names, leaf_names, spine_names, strict=True):
        graph.add_nodes_from(leaves, kind="switch", level=0, group=g)
        graph.add_nodes_from(spines, kind="switch", level=1, group=g)
        group_of_leaf.update(dict.fromkeys(leaves, g))
    local = _link(bandwidth_gbps)
    graph.add_edges_from(
        (leaf, spine, local)
        for leaves, spines in zip(leaf_names, spine_names, strict=True)
        for leaf in leaves
        for spine in spines
    )
    global_link = _link(global_bandwidth_gbps or bandwidth_gbps, global_oversubscription)
    graph.add_edges_from(
        (spine_names[a][i], spine_names[b][i], global_link)
        for i in range(spines_per_group)
        for a in range(groups)
        for b in range(a + 1, groups)
    )
    all_leaves = [leaf for leaves in leaf_names for leaf in leaves]
    _attach_nodes(
        graph,
        all_leaves,
        len(all_leaves) * nodes_per_leaf,
        nodes_per_leaf,
        prefix,
        bandwidth_gbps,
        nvlink_domain_size,
        group_of_leaf,
    )
    return Fabric(
        graph,
        name="dragonfly+",
        source=f"generated dragonfly_plus({groups}, {leaves_per_group}, "
        f"{nodes_per_leaf}, {spines_per_group})",
    )
