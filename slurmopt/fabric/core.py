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

A compute node normally hangs off exactly one leaf.  A node wired straight
to an upper switch (rare: a service node on a spine) keeps that real link;
it has no leaf (:meth:`Fabric.leaf_of` is None, :meth:`Fabric.leaves` leaves
it out, so leaf-block placement never picks it), but hop and span queries
treat the switch it hangs off as its attachment point.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from slurmopt.errors import FabricError


@dataclass(frozen=True, slots=True)
class Span:
    """How far apart a set of compute nodes is on the fabric.

    ``leaves`` are the switches the members hang off (their leaves, or the
    upper switch for a node wired straight to one), in name order.
    ``max_hops`` is the largest hop count between two members (0 for one
    node).  ``slowest_link_gbps`` is the lowest effective bandwidth
    (``bandwidth_gbps / oversubscription``) their traffic crosses, or None
    when there is no traffic (fewer than two members); see :meth:`Fabric.span`.
    """

    leaves: tuple[str, ...]
    num_leaves: int
    max_hops: int
    slowest_link_gbps: float | None


def effective_gbps(edge: Mapping[str, object]) -> float:
    """A link's usable bandwidth: nominal bandwidth divided by its oversubscription."""
    bandwidth = edge.get("bandwidth_gbps", 0.0)
    oversub = edge.get("oversubscription", 1.0)
    assert isinstance(bandwidth, int | float) and isinstance(oversub, int | float)
    return float(bandwidth) / float(oversub or 1.0)


class Tiers:
    """The fabric's leaves grouped tier by tier: leaves, pods (or groups), core groups, ...

    Tier 0 is a leaf.  Leaves whose uplinks are the same switches form a
    tier-1 unit (a pod of a fat tree, a dragonfly+ group, all leaves of a
    leaf-spine fabric); units whose top switches have the same uplinks form
    the next tier, and so on up; whatever is left when nothing is above
    joins one root.  A unit's tier is how many switch levels its members
    climb to meet, so a gang's tier (:meth:`tier_of`) is the highest tier
    its traffic crosses.  ``gbps`` is a leaf's slowest node link, or a
    unit's bottleneck between its children (``Fabric.span`` of one node in
    each, oversubscription included); ``hops`` the hop count between nodes
    of two of its children.  Built once per fabric by :meth:`Fabric.tiers`.
    """

    def __init__(
        self,
        parent: Mapping[str, str],
        tier: Mapping[str, int],
        gbps: Mapping[str, float] | None = None,
        hops: Mapping[str, int] | None = None,
        apart: frozenset[str] = frozenset(),
    ) -> None:
        self.parent = parent
        self.tier = tier
        self.gbps = gbps or {}
        self.hops = hops or {}
        #: Units whose children no path joins (separate trees under a nominal root): a gang
        #: may not span them, as Slurm's topology/tree places no job across such trees.
        self.apart = apart
        self._chains: dict[str, tuple[str, ...]] = {}

    @classmethod
    def from_groups(cls, group_of: Mapping[str, str], leaves: Iterable[str]) -> Tiers:
        """Two tiers from a leaf-to-group map (a leaf missing from it is a group of its own)."""
        parent: dict[str, str] = {}
        tier: dict[str, int] = {}
        for leaf in leaves:
            unit = f"1:{group_of.get(leaf, leaf)}"
            parent[leaf] = unit
            tier[leaf], tier[unit] = 0, 1
        units = set(parent.values())
        if len(units) > 1:
            parent.update(dict.fromkeys(units, "2:*"))
            tier["2:*"] = 2
        return cls(parent, tier)

    def chain(self, leaf: str) -> tuple[str, ...]:
        """The units above a leaf, lowest tier first."""
        found = self._chains.get(leaf)
        if found is None:
            up = []
            unit = self.parent.get(leaf)
            while unit is not None:
                up.append(unit)
                unit = self.parent.get(unit)
            found = self._chains[leaf] = tuple(up)
        return found

    def meet(self, leaves: Iterable[str]) -> str | None:
        """The smallest unit holding every one of ``leaves`` (the leaf itself for one leaf)."""
        distinct = set(leaves)
        if len(distinct) <= 1:
            return next(iter(distinct), None)
        chains = [self.chain(leaf) for leaf in distinct]
        common = set(chains[0]).intersection(*chains[1:])
        return next((u for u in chains[0] if u in common), None)

    def tier_of(self, leaves: Iterable[str]) -> int:
        """The highest tier a set of leaves spans: 0 for one leaf, 1 for one pod, ..."""
        unit = self.meet(leaves)
        if unit is None:
            return max(self.tier.values(), default=0) + 1 if self.tier else 0
        return self.tier.get(unit, 0)


class Fabric:
    """Read-only queries over a fabric graph.

    Distances from a leaf to every switch are computed the first time that
    leaf is asked about and then cached, so hop and span queries are
    dictionary lookups even on clusters of thousands of nodes.  ``source``
    says where the description came from (a file, Slurm, a generator);
    ``warnings`` what its loader carried on past (see docs/fabric.md).
    """

    def __init__(
        self,
        graph: nx.Graph[str],
        name: str = "",
        source: str = "",
        warnings: Sequence[str] = (),
    ) -> None:
        self.graph = graph
        self.name = name
        self.source = source
        #: What the loader found doubtful but, as Slurm does, carried on past (one line each).
        self.warnings: tuple[str, ...] = tuple(warnings)
        self._from_switch: dict[
            frozenset[tuple[str, float]], tuple[str, dict[str, int], dict[str, float]]
        ] = {}
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

    def attachment_of(self, node: str) -> str | None:
        """The switch a compute node hangs off: its leaf, or the one upper switch it is wired to."""
        leaf = self._leaf_of.get(node)
        if leaf is not None:
            return leaf
        return self._off_leaf_attachment.get(node)

    @cached_property
    def _off_leaf_attachment(self) -> Mapping[str, str]:
        attach: dict[str, str] = {}
        for node in self.compute_nodes - self._leaf_of.keys():
            switches = [u for u in self.graph.neighbors(node) if u in self.switches]
            if len(switches) == 1:
                attach[node] = switches[0]
        return attach

    def off_leaf_nodes(self) -> list[str]:
        """Compute nodes under no leaf switch (wired to an upper switch, or to nothing)."""
        return sorted(self.compute_nodes - self._leaf_of.keys())

    @cached_property
    def _beneath(self) -> Mapping[str, frozenset[str]]:
        """Per switch, the switches at or below it that compute nodes hang off.

        "Below" follows links to lower-level switches only, so peer links
        (dragonfly+ spines) and the other parents of a multi-parent leaf do
        not count.  Built once, children before parents.
        """
        attached = {self.attachment_of(node) for node in self.compute_nodes}
        beneath: dict[str, frozenset[str]] = {}
        for sw in sorted(self.switches, key=lambda s: int(self.graph.nodes[s].get("level", 0))):
            level = self.graph.nodes[sw].get("level", 0)
            below: set[str] = {sw} if sw in attached else set()
            for u in self.graph.neighbors(sw):
                if u in beneath and self.graph.nodes[u].get("level", 0) < level:
                    below |= beneath[u]
            beneath[sw] = frozenset(below)
        return beneath

    def attachments_beneath(self, switch: str) -> frozenset[str]:
        """The switches at or below ``switch`` that compute nodes hang off (leaves, mostly)."""
        return self._beneath.get(switch, frozenset())

    @cached_property
    def _nodes_by_attachment(self) -> Mapping[str, tuple[str, ...]]:
        by_switch: dict[str, list[str]] = {}
        for node in self.compute_nodes:
            sw = self.attachment_of(node)
            if sw is not None:
                by_switch.setdefault(sw, []).append(node)
        return {sw: tuple(sorted(nodes)) for sw, nodes in by_switch.items()}

    def nodes_beneath(self, switch: str) -> tuple[str, ...]:
        """Every compute node at or below ``switch``: a leaf's own, a pod's, a core's; sorted."""
        by_switch = self._nodes_by_attachment
        return tuple(
            sorted(n for sw in self.attachments_beneath(switch) for n in by_switch.get(sw, ()))
        )

    def levels(self) -> dict[int, list[str]]:
        """Switch names by level, lowest level first."""
        by_level: dict[int, list[str]] = {}
        for sw in sorted(self.switches):
            by_level.setdefault(int(self.graph.nodes[sw].get("level", 0)), []).append(sw)
        return dict(sorted(by_level.items()))

    def uplinks(self, switch: str) -> list[str]:
        """Switches one level or more above ``switch`` that it links to directly, in name order."""
        level = self.graph.nodes[switch].get("level", 0)
        return sorted(
            u
            for u in self.graph.neighbors(switch)
            if u in self.switches and self.graph.nodes[u].get("level", 0) > level
        )

    def link_gbps(self, a: str, b: str) -> float:
        """Effective bandwidth of the direct link between ``a`` and ``b``."""
        return effective_gbps(self.graph.edges[a, b])

    # -- NVLink domains -------------------------------------------------------------
    @cached_property
    def _domains(self) -> Mapping[str, tuple[str, ...]]:
        """Domain name to its nodes, sorted; see :meth:`domains`."""
        members: dict[str, list[str]] = {}
        for v, data in self.graph.nodes(data=True):
            domain = data.get("domain")
            if data.get("kind") == "node" and isinstance(domain, str) and domain:
                members.setdefault(domain, []).append(v)
        if not members and "block_sizes" in self.graph.graph:
            for leaf in self.leaves():
                members[leaf] = list(self.nodes_under(leaf))
        return {name: tuple(sorted(nodes)) for name, nodes in sorted(members.items())}

    @cached_property
    def _domain_of(self) -> Mapping[str, str]:
        return {node: name for name, nodes in self._domains.items() for node in nodes}

    def domains(self) -> Mapping[str, tuple[str, ...]]:
        """NVLink domains (racks, or the blocks of a topology/block fabric): name to nodes.

        A domain is a unit of placement: a job that asks for one gets nodes of
        one domain (or segments each inside one), and other jobs avoid
        breaking a whole free domain.  Nodes carry them as the ``domain``
        attribute (slurmopt's fabric YAML, the generators); a topology/block
        fabric with none has one domain per block.  Empty on most fabrics.
        """
        return self._domains

    def domain_of(self, node: str) -> str | None:
        """The NVLink domain a compute node belongs to, or None."""
        return self._domain_of.get(node)

    # -- distances ----------------------------------------------------------------
    @cached_property
    def _switch_adjacency(self) -> Mapping[str, tuple[tuple[str, float], ...]]:
        """Switch-to-switch links with their effective bandwidth, as plain tuples for speed."""
        switches = self.switches
        return {
            sw: tuple(
                (u, effective_gbps(data)) for u, data in self.graph.adj[sw].items() if u in switches
            )
            for sw in switches
        }

    @cached_property
    def _signature(self) -> Mapping[str, frozenset[tuple[str, float]]]:
        """Each switch's links as a set, so switches wired alike can share one search."""
        return {sw: frozenset(links) for sw, links in self._switch_adjacency.items()}

    def _distances_from(self, switch: str) -> tuple[str, dict[str, int], dict[str, float]]:
        """Hops and widest-minimum-hop-path bandwidth from one switch to every switch it reaches.

        Switches with exactly the same links (the leaves of one pod, say)
        are the same distance from everything but each other, so they share
        one search, made from the first of them asked about and returned
        as the first item.  One breadth-first pass: a switch's width is the
        best, over its predecessors on minimum-hop paths, of
        min(predecessor's width, link).
        """
        adjacency = self._switch_adjacency
        signature = self._signature[switch]
        cached = self._from_switch.get(signature)
        if cached is not None:
            return cached
        dist = {switch: 0}
        width = {switch: float("inf")}
        queue = deque([switch])
        while queue:
            u = queue.popleft()
            du, wu = dist[u] + 1, width[u]
            for v, gbps in adjacency[u]:
                dv = dist.get(v)
                if dv is None:
                    dist[v] = du
                    width[v] = min(wu, gbps)
                    queue.append(v)
                elif dv == du:
                    width[v] = max(width[v], min(wu, gbps))
        self._from_switch[signature] = (switch, dist, width)
        return switch, dist, width

    def _switch_distance(self, src: str, dst: str) -> tuple[int, float] | None:
        """Hops and widest-minimum-hop-path bandwidth between two switches; None if unconnected."""
        if src == dst:
            return 0, float("inf")
        origin, dist, width = self._distances_from(src)
        if dst == origin:  # the search was made from dst, on src's behalf: read it backwards
            dst = src
        hops = dist.get(dst)
        return None if hops is None else (hops, width[dst])

    def hops(self, a: str, b: str) -> int:
        """Links between two compute nodes (0 for the same node, 2 under one leaf)."""
        if a == b:
            return 0
        la, lb = self.attachment_of(a), self.attachment_of(b)
        if la is None or lb is None:
            try:
                return int(nx.shortest_path_length(self.graph, a, b))
            except (nx.NetworkXNoPath, nx.NodeNotFound) as exc:
                raise FabricError(f"no path between {a} and {b}") from exc
        between = self._switch_distance(la, lb)
        if between is None:
            raise FabricError(f"no path between {a} and {b}")
        return between[0] + 2

    def span(self, nodes: Iterable[str]) -> Span:
        """Leaves, worst hop count and slowest link for a set of compute nodes.

        Worked out from the attachment switches spanned, never from all
        node pairs.  On a multi-path fabric, traffic between two members is
        taken to use the best of its minimum-hop paths (as ECMP routing
        does): a pair's bottleneck is the widest minimum-hop path's
        narrowest link, and ``slowest_link_gbps`` is the lowest of those
        over all pairs, together with each member's own link to its switch.
        Parallel paths are not added up: this is a per-link figure.
        """
        members = set(nodes)
        attach: dict[str, str] = {}
        for node in members:
            sw = self.attachment_of(node)
            if sw is None:
                kind = "not in the fabric" if node not in self.compute_nodes else "under no switch"
                raise FabricError(f"node {node} is {kind}")
            attach[node] = sw
        spanned = sorted(set(attach.values()))
        if len(members) < 2:
            return Span(tuple(spanned), len(spanned), 0, None)
        slowest = min(self.link_gbps(node, sw) for node, sw in attach.items())
        max_dist = 0
        # Switches with the same links are 2 hops apart through their best shared
        # neighbour, and equally far from every other switch: one pair per group.
        groups: dict[frozenset[tuple[str, float]], list[str]] = {}
        for sw in spanned:
            groups.setdefault(self._signature[sw], []).append(sw)
        for signature, same in groups.items():
            if len(same) > 1:
                if not signature:
                    raise FabricError(f"no path between switches {same[0]} and {same[1]}")
                max_dist = max(max_dist, 2)
                slowest = min(slowest, max(gbps for _, gbps in signature))
        representatives = [same[0] for same in groups.values()]
        for i, src in enumerate(representatives):
            for dst in representatives[i + 1 :]:
                between = self._switch_distance(src, dst)
                if between is None:
                    raise FabricError(f"no path between switches {src} and {dst}")
                max_dist = max(max_dist, between[0])
                slowest = min(slowest, between[1])
        return Span(tuple(spanned), len(spanned), max_dist + 2, slowest)

    # -- tiers --------------------------------------------------------------------
    @cached_property
    def _tiers(self) -> Tiers:
        leaves = self.leaves()
        parent: dict[str, str] = {}
        tier = dict.fromkeys(leaves, 0)
        top: dict[str, frozenset[str]] = {leaf: frozenset((leaf,)) for leaf in leaves}
        children: dict[str, list[str]] = {}
        current = list(leaves)
        level = 0
        while len(current) > 1:
            ups = {u: frozenset(x for sw in top[u] for x in self.uplinks(sw)) for u in current}
            level += 1
            if not any(ups.values()):  # nothing above: whatever links them joins them
                root = f"{level}:*"
                parent.update(dict.fromkeys(current, root))
                children[root] = current
                tier[root] = level
                break
            by_key: dict[frozenset[str], list[str]] = {}
            for u in current:
                if ups[u]:
                    by_key.setdefault(ups[u], []).append(u)
            following = [u for u in current if not ups[u]]
            for key, same in by_key.items():
                if len(same) == 1:  # nothing joins it on this level: it climbs as it is
                    top[same[0]] = key
                    following.append(same[0])
                    continue
                unit = f"{level}:{','.join(sorted(key))}"
                parent.update(dict.fromkeys(same, unit))
                children[unit] = same
                tier[unit] = level
                top[unit] = key
                following.append(unit)
            current = sorted(following, key=lambda u: self._first_node(u, children))
        gbps: dict[str, float] = {}
        hops: dict[str, int] = {}
        for leaf in leaves:
            gbps[leaf] = min(self.link_gbps(n, leaf) for n in self.nodes_under(leaf))
        apart: set[str] = set()
        for unit, kids in children.items():
            reps = [self._first_node(k, children) for k in kids]
            try:
                spans = [self.span([reps[0], rep]) for rep in reps[1:]]
            except FabricError:  # trees no switch joins (a warning at load): no job spans them
                apart.add(unit)
                gbps[unit], hops[unit] = 0.0, 0
                continue
            gbps[unit] = min(s.slowest_link_gbps or float("inf") for s in spans)
            hops[unit] = max(s.max_hops for s in spans)
        return Tiers(parent, tier, gbps, hops, frozenset(apart))

    def _first_node(self, unit: str, children: Mapping[str, list[str]]) -> str:
        while unit in children:
            unit = children[unit][0]
        return self.nodes_under(unit)[0]

    def tiers(self) -> Tiers:
        """The leaves grouped tier by tier (:class:`Tiers`), built on first use."""
        return self._tiers

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_leaf_map(
        cls,
        leaves: Mapping[str, Sequence[str]],
        spine: str | None = "spine",
        bandwidth_gbps: float = 200.0,
        name: str = "",
        source: str = "",
    ) -> Fabric:
        """A two-level fabric: each leaf's nodes, all leaves under one spine."""
        g: nx.Graph[str] = nx.Graph()
        if spine is not None:
            g.add_node(spine, kind="switch", level=1)
        for leaf, nodes in leaves.items():
            g.add_node(leaf, kind="switch", level=0)
            if spine is not None:
                g.add_edge(leaf, spine, bandwidth_gbps=bandwidth_gbps, oversubscription=1.0)
            for node in nodes:
                g.add_node(node, kind="node")
                g.add_edge(node, leaf, bandwidth_gbps=bandwidth_gbps, oversubscription=1.0)
        return cls(g, name=name, source=source)

    @classmethod
    def flat(cls, nodes: Iterable[str], name: str = "flat", source: str = "") -> Fabric:
        """All nodes under one switch: the fabric when nothing better is known."""
        return cls.from_leaf_map({"switch0": list(nodes)}, spine=None, name=name, source=source)
