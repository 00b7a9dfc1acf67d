"""The :class:`Fabric`: compute nodes and switches as one undirected graph.

Graph conventions (every loader and generator produces exactly these):

* vertex attribute ``kind``: ``"node"`` for a compute node, ``"switch"`` for a switch;
* switch attribute ``level``: 0 for leaf switches (those compute nodes hang
  off), larger numbers further from the nodes;
* optional vertex attribute ``group`` (dragonfly+ group) and ``domain``
  (NVLink domain or rack) for compute nodes;
* edge attributes ``bandwidth_gbps`` (float) and ``oversubscription``
  (float, 1.0 = non-blocking).

A hop is one link: two nodes under the same leaf are 2 hops apart, under
two leaves joined by one spine 4 hops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property

import networkx as nx

from slurmopt.errors import FabricError


class Fabric:
    """Read-only queries over a fabric graph.

    Leaf-to-leaf distances are computed once, so the per-pair hop query is
    a dictionary lookup even on clusters of thousands of nodes.
    """

    def __init__(self, graph: nx.Graph, name: str = "") -> None:
        self.graph = graph
        self.name = name
        leaf_of: dict[str, str] = {}
        for v, data in graph.nodes(data=True):
            if data.get("kind") != "node":
                continue
            leaves = [
                u
                for u in graph.neighbors(v)
                if graph.nodes[u].get("kind") == "switch" and graph.nodes[u].get("level") == 0
            ]
            if len(leaves) > 1:
                raise FabricError(f"node {v} hangs off several leaf switches: {sorted(leaves)}")
            if leaves:
                leaf_of[v] = leaves[0]
        self._leaf_of = leaf_of

    # -- membership ---------------------------------------------------------------
    @cached_property
    def compute_nodes(self) -> frozenset[str]:
        return frozenset(v for v, d in self.graph.nodes(data=True) if d.get("kind") == "node")

    @cached_property
    def switches(self) -> frozenset[str]:
        return frozenset(v for v, d in self.graph.nodes(data=True) if d.get("kind") == "switch")

    def leaf_of(self, node: str) -> str | None:
        """The leaf switch a compute node hangs off, or None if it is not under one."""
        return self._leaf_of.get(node)

    @cached_property
    def _nodes_by_leaf(self) -> Mapping[str, tuple[str, ...]]:
        by_leaf: dict[str, list[str]] = {}
        for node, leaf in self._leaf_of.items():
            by_leaf.setdefault(leaf, []).append(node)
        return {leaf: tuple(sorted(nodes)) for leaf, nodes in by_leaf.items()}

    def leaves(self) -> list[str]:
        """Leaf switches that have compute nodes, in name order."""
        return sorted(self._nodes_by_leaf)

    def nodes_under(self, leaf: str) -> tuple[str, ...]:
        """Compute nodes directly under a leaf switch, in name order."""
        return self._nodes_by_leaf.get(leaf, ())

    # -- distances ----------------------------------------------------------------
    @cached_property
    def _leaf_distances(self) -> Mapping[str, Mapping[str, int]]:
        switch_graph = self.graph.subgraph(self.switches)
        leaves = self.leaves()
        return {
            leaf: dict(nx.single_source_shortest_path_length(switch_graph, leaf)) for leaf in leaves
        }

    def hops(self, a: str, b: str) -> int:
        """Links between two compute nodes (0 for the same node, 2 under one leaf)."""
        if a == b:
            return 0
        la, lb = self._leaf_of.get(a), self._leaf_of.get(b)
        if la is None or lb is None:
            try:
                return int(nx.shortest_path_length(self.graph, a, b))
            except (nx.NetworkXNoPath, nx.NodeNotFound) as exc:
                raise FabricError(f"no path between {a} and {b}") from exc
        dist = self._leaf_distances[la].get(lb)
        if dist is None:
            raise FabricError(f"no path between {a} and {b}")
        return dist + 2

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_leaf_map(
        cls,
        leaves: Mapping[str, Sequence[str]],
        spine: str | None = "spine",
        bandwidth_gbps: float = 200.0,
        name: str = "",
    ) -> Fabric:
        """A two-level fabric: each leaf's nodes, all leaves under one spine."""
        g = nx.Graph()
        if spine is not None:
            g.add_node(spine, kind="switch", level=1)
        for leaf, nodes in leaves.items():
            g.add_node(leaf, kind="switch", level=0)
            if spine is not None:
                g.add_edge(leaf, spine, bandwidth_gbps=bandwidth_gbps, oversubscription=1.0)
            for node in nodes:
                g.add_node(node, kind="node")
                g.add_edge(node, leaf, bandwidth_gbps=bandwidth_gbps, oversubscription=1.0)
        return cls(g, name=name)

    @classmethod
    def flat(cls, nodes: Iterable[str], name: str = "flat") -> Fabric:
        """All nodes under one switch: the fabric when nothing better is known."""
        return cls.from_leaf_map({"switch0": list(nodes)}, spine=None, name=name)
