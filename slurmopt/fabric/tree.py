"""The switch tree every fabric loader builds, checked as a whole before it becomes a Fabric.

Each format's reader (:mod:`slurmopt.fabric.topology_conf`,
:mod:`slurmopt.fabric.yaml_formats`) declares switches (:class:`Switch`) and
links between switches (:class:`PeerLink`); :func:`build` checks them together
(repeated or unknown switches, loops, nodes under two switches) and follows
Slurm's tree rules for repeated children and split trees, so a bad file never
yields a half-built fabric.

Slurm's own formats say nothing about bandwidth (``LinkSpeed`` is in
arbitrary units and kept only as the switch attribute ``link_speed``), so
their links all get :data:`DEFAULT_BANDWIDTH_GBPS` and no oversubscription;
slurmopt's YAML format is the place to describe real link speeds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import networkx as nx

from slurmopt.errors import FabricError
from slurmopt.fabric.core import Fabric
from slurmopt.hostlist import MAX_NAMES, HostlistError, expand, fold

#: Bandwidth given to links whose speed the description does not state.
DEFAULT_BANDWIDTH_GBPS = 200.0

#: Name of the switch that joins the blocks of a topology/block description.
BLOCK_ROOT = "block-root"


@dataclass
class Switch:
    """One declared switch, before the graph is built."""

    name: str
    line: int | None
    nodes: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    uplink: dict[str, float] = field(default_factory=dict)
    node_link: dict[str, float] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class PeerLink:
    """A link between switches that is not child-to-parent (dragonfly+ global links)."""

    a: str
    b: str
    line: int | None
    attrs: dict[str, float]


def read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except UnicodeDecodeError:
        raise FabricError("not a text file", str(path)) from None
    except OSError as exc:
        raise FabricError(f"cannot read: {exc.strerror or exc}", str(path)) from None


class Budget:
    """Names and links one fabric description may still name: :data:`MAX_NAMES` in all."""

    def __init__(self) -> None:
        self.left = MAX_NAMES

    def take(self, count: int, what: str, path: str | None, line: int | None) -> None:
        if count > self.left:
            raise FabricError(
                f"{what}: the fabric names more than {MAX_NAMES} nodes, switches and links",
                path,
                line,
            )
        self.left -= count


def hostlist(expr: str, what: str, path: str | None, line: int | None, budget: Budget) -> list[str]:
    try:
        names = expand(expr, budget.left)
    except HostlistError as exc:
        raise FabricError(f"{what}: {exc}", path, line) from None
    if not names and expr.strip():
        raise FabricError(f"{what}: bad hostlist {expr!r}", path, line)
    budget.take(len(names), what, path, line)
    return names


def build(
    switches: list[Switch],
    path: str | None,
    *,
    known_nodes: Collection[str] | None,
    single_root: bool,
    name: str,
    source: str,
    uplink_defaults: Mapping[int, Mapping[str, float]] | None = None,
    node_link_default: Mapping[str, float] | None = None,
    peer_links: Iterable[PeerLink] = (),
    domains: Mapping[str, tuple[str, int | None]] | None = None,
) -> Fabric:
    """Check the declared switches as a whole and turn them into a fabric graph."""
    by_name: dict[str, Switch] = {}
    for sw in switches:
        if sw.name in by_name:
            first = by_name[sw.name].line
            raise FabricError(
                f"switch {sw.name} declared twice (first on line {first})", path, sw.line
            )
        by_name[sw.name] = sw

    hierarchy: nx.DiGraph[str] = nx.DiGraph()
    hierarchy.add_nodes_from(by_name)
    for sw in switches:
        for child in sw.children:
            if child not in by_name:
                raise FabricError(
                    f"unknown switch {child} referenced as a child of {sw.name}", path, sw.line
                )
            if child == sw.name:
                raise FabricError(f"loop: switch {sw.name} is its own child", path, sw.line)
            hierarchy.add_edge(sw.name, child)
    try:
        cycle = nx.find_cycle(hierarchy)
    except nx.NetworkXNoCycle:
        cycle = []
    if cycle:
        names = [edge[0] for edge in cycle] + [cycle[0][0]]
        earliest = min((by_name[n] for n in names), key=lambda s: s.line or 0)
        raise FabricError(f"loop in switch hierarchy: {' -> '.join(names)}", path, earliest.line)

    leaf_of_node: dict[str, str] = {}
    known = set(known_nodes) if known_nodes is not None else None
    for sw in switches:
        for node in sw.nodes:
            if known is not None and node not in known:
                raise FabricError(f"unknown node {node} under switch {sw.name}", path, sw.line)
            if node in by_name:
                raise FabricError(f"{node} is both a node and a switch", path, sw.line)
            other = leaf_of_node.get(node)
            if other is not None:
                raise FabricError(
                    f"node {node} is under two switches: {other} and {sw.name}", path, sw.line
                )
            leaf_of_node[node] = sw.name

    # Levels come from every declared child, as Slurm computes them.
    level: dict[str, int] = {}
    for sw_name in reversed(list(nx.topological_sort(hierarchy))):
        kids = list(hierarchy.successors(sw_name))
        level[sw_name] = 1 + max(level[k] for k in kids) if kids else 0

    warnings: list[str] = []
    children_of = {sw.name: sw.children for sw in switches}
    if single_root:
        children_of = _one_parent_each(switches, warnings)
        warnings.extend(_split_trees(switches, children_of, level))
    if known is not None:
        missing = known - leaf_of_node.keys()
        if missing:
            warnings.append(
                f"{len(missing)} cluster node(s) under no switch: {fold(missing)} "
                "(Slurm: switches lack access to them)"
            )

    graph: nx.Graph[str] = nx.Graph(name=name)
    uplink_defaults = uplink_defaults or {}
    base_link = {"bandwidth_gbps": DEFAULT_BANDWIDTH_GBPS, "oversubscription": 1.0}
    node_link_base = {**base_link, **(node_link_default or {})}
    for sw in switches:
        graph.add_node(sw.name, kind="switch", level=level[sw.name], **sw.attrs)
    for sw in switches:
        for child in children_of[sw.name]:
            child_sw = by_name[child]
            attrs = {**base_link, **uplink_defaults.get(level[child], {}), **child_sw.uplink}
            graph.add_edge(child, sw.name, **attrs)
        group = sw.attrs.get("group")
        for node in sw.nodes:
            graph.add_node(node, kind="node", **({"group": group} if group else {}))
            graph.add_edge(node, sw.name, **{**node_link_base, **sw.node_link})
    for link in peer_links:
        for end in (link.a, link.b):
            if end not in by_name:
                raise FabricError(f"unknown switch {end} in a link", path, link.line)
        if link.a == link.b:
            raise FabricError(f"link from switch {link.a} to itself", path, link.line)
        graph.add_edge(link.a, link.b, **{**base_link, **link.attrs})
    for node, (domain, line) in (domains or {}).items():
        if node not in graph or graph.nodes[node].get("kind") != "node":
            raise FabricError(f"unknown node {node} in domain {domain}", path, line)
        graph.nodes[node]["domain"] = domain

    if not single_root and len(by_name) > 1:
        switch_graph = graph.subgraph(by_name)
        component = nx.node_connected_component(switch_graph, switches[0].name)
        for sw in switches:
            if sw.name not in component:
                raise FabricError(
                    f"switch {sw.name} is not connected to switch {switches[0].name}",
                    path,
                    sw.line,
                )
    try:
        return Fabric(graph, name=name, source=source, warnings=warnings)
    except FabricError as exc:
        raise FabricError(exc.cause, path) from None


def _one_parent_each(switches: list[Switch], warnings: list[str]) -> dict[str, list[str]]:
    """Each switch's children once every switch keeps one parent, as Slurm's tree does.

    Slurm (``_find_child_switches`` in topology/tree, 22.05 to today) walks
    the switches in file order and sets each child's parent as it goes, so
    the last switch that lists a child is its parent.  Inventory data that
    repeats leaf names under several parents would otherwise join the
    parents through the leaf and give the wrong hop counts.
    """
    parents: dict[str, list[str]] = {}
    for sw in switches:
        for child in dict.fromkeys(sw.children):
            parents.setdefault(child, []).append(sw.name)
    for child, listed in parents.items():
        if len(listed) > 1:
            warnings.append(
                f"switch {child} is listed under {len(listed)} parents ({', '.join(listed)}): "
                f"keeping the last, {listed[-1]}, as Slurm does"
            )
    return {
        sw.name: [c for c in dict.fromkeys(sw.children) if parents[c][-1] == sw.name]
        for sw in switches
    }


def _split_trees(
    switches: list[Switch], children_of: Mapping[str, list[str]], level: Mapping[str, int]
) -> list[str]:
    """A warning when no switch reaches every node: Slurm carries on, but no job spans the trees."""
    has_parent = {c for kids in children_of.values() for c in kids}
    beneath: dict[str, int] = {}
    for sw in sorted(switches, key=lambda s: level[s.name]):  # children before parents
        beneath[sw.name] = len(sw.nodes) + sum(beneath[c] for c in children_of[sw.name])
    tops = [sw.name for sw in switches if sw.name not in has_parent and beneath[sw.name]]
    if len(tops) < 2:
        return []
    return [
        f"no switch reaches all nodes: {len(tops)} separate trees, under {', '.join(tops)}; "
        "no job can span them"
    ]


def blocks_fabric(
    blocks: list[Switch],
    block_sizes: list[int],
    path: str | None,
    known_nodes: Collection[str] | None,
    name: str,
    source: str,
) -> Fabric:
    """Blocks become leaf switches under one root switch, so hops between blocks are 4."""
    blocks, warnings = _first_block_each(blocks)
    root = Switch(BLOCK_ROOT, None, children=[b.name for b in blocks])
    fabric = build(
        [*blocks, root], path, known_nodes=known_nodes, single_root=True, name=name, source=source
    )
    fabric.graph.graph["block_sizes"] = tuple(block_sizes)
    fabric.warnings = (*warnings, *fabric.warnings)
    return fabric


def _first_block_each(blocks: list[Switch]) -> tuple[list[Switch], list[str]]:
    """The blocks with each node kept in the first that lists it, and a warning per overlap.

    Slurm's topology/block (``block_record_validate``, 24.11 and 25.05)
    accepts a node in several blocks without a word: each block's node set
    holds it, and its address (``topology_p_get_node_addr``) names the first.
    A node sits on one leaf here, so it stays in that first block (and its
    NVLink domain); the warning says Slurm may still place it with the others.
    """
    first: dict[str, str] = {}
    later: dict[str, list[str]] = {}
    kept: list[Switch] = []
    for block in blocks:
        nodes = []
        for node in dict.fromkeys(block.nodes):
            owner = first.setdefault(node, block.name)
            if owner == block.name:
                nodes.append(node)
            else:
                later.setdefault(node, [owner]).append(block.name)
        kept.append(replace(block, nodes=nodes))
    by_blocks: dict[tuple[str, ...], list[str]] = {}
    for node, listed in later.items():
        by_blocks.setdefault(tuple(listed), []).append(node)
    warnings = [
        f"{len(nodes)} node(s) listed in {len(listed)} blocks ({', '.join(listed)}): "
        f"{fold(nodes)}; keeping them in the first, {listed[0]}, which Slurm names as their "
        "address (Slurm may also place them with the other blocks' nodes)"
        for listed, nodes in by_blocks.items()
    ]
    return kept, warnings
