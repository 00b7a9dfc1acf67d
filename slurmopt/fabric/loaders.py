"""Build a :class:`Fabric` from Slurm's topology files, its ``scontrol`` output, or slurmopt's YAML.

Every loader checks the whole description before it returns, and reports
the first problem as a :class:`~slurmopt.errors.FabricError` naming the file
and line, so a bad file never yields a half-built fabric.

Slurm's own formats say nothing about bandwidth (``LinkSpeed`` is in
arbitrary units and kept only as the switch attribute ``link_speed``), so
their links all get :data:`DEFAULT_BANDWIDTH_GBPS` and no oversubscription;
slurmopt's YAML format is the place to describe real link speeds.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from slurmopt.errors import FabricError
from slurmopt.fabric.core import Fabric
from slurmopt.hostlist import MAX_NAMES, HostlistError, expand, fold

#: Bandwidth given to links whose speed the description does not state.
DEFAULT_BANDWIDTH_GBPS = 200.0

#: Name of the switch that joins the blocks of a topology/block description.
BLOCK_ROOT = "block-root"

#: The most YAML values a fabric file may hold once its aliases are expanded (an alias bomb
#: of a few lines would otherwise expand to billions).
MAX_YAML_VALUES = MAX_NAMES


@dataclass
class _Switch:
    """One declared switch, before the graph is built."""

    name: str
    line: int | None
    nodes: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    uplink: dict[str, float] = field(default_factory=dict)
    node_link: dict[str, float] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class _PeerLink:
    """A link between switches that is not child-to-parent (dragonfly+ global links)."""

    a: str
    b: str
    line: int | None
    attrs: dict[str, float]


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except UnicodeDecodeError:
        raise FabricError("not a text file", str(path)) from None
    except OSError as exc:
        raise FabricError(f"cannot read: {exc.strerror or exc}", str(path)) from None


class _Budget:
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


def _hostlist(
    expr: str, what: str, path: str | None, line: int | None, budget: _Budget
) -> list[str]:
    try:
        names = expand(expr, budget.left)
    except HostlistError as exc:
        raise FabricError(f"{what}: {exc}", path, line) from None
    if not names and expr.strip():
        raise FabricError(f"{what}: bad hostlist {expr!r}", path, line)
    budget.take(len(names), what, path, line)
    return names


def _build(
    switches: list[_Switch],
    path: str | None,
    *,
    known_nodes: Collection[str] | None,
    single_root: bool,
    name: str,
    source: str,
    uplink_defaults: Mapping[int, Mapping[str, float]] | None = None,
    node_link_default: Mapping[str, float] | None = None,
    peer_links: Iterable[_PeerLink] = (),
    domains: Mapping[str, tuple[str, int | None]] | None = None,
) -> Fabric:
    """Check the declared switches as a whole and turn them into a fabric graph."""
    by_name: dict[str, _Switch] = {}
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


def _one_parent_each(switches: list[_Switch], warnings: list[str]) -> dict[str, list[str]]:
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
    switches: list[_Switch], children_of: Mapping[str, list[str]], level: Mapping[str, int]
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


# -- topology.conf and scontrol show topology ----------------------------------------------

_CONF_KEYS = {"switchname", "switches", "nodes", "linkspeed", "blockname", "blocksizes"}


def _conf_statements(text: str) -> Iterator[tuple[int, str]]:
    """Slurm config statements with the line each starts on: comments dropped, ``\\`` joined."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(?<!\\)#.*", "", raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        statement = " ".join(pending).strip()
        pending = []
        if statement:
            yield start, statement
    if pending and " ".join(pending).strip():
        yield start, " ".join(pending).strip()


def _key_values(statement: str, path: str | None, line: int, strict: bool) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for token in statement.split():
        key, eq, value = token.partition("=")
        if not eq or not key:
            raise FabricError(f"expected Key=Value, got {token!r}", path, line)
        if strict and key.lower() not in _CONF_KEYS:
            raise FabricError(f"unknown key {key!r}", path, line)
        pairs.append((key.lower(), value))
    return pairs


def _blocks_fabric(
    blocks: list[_Switch],
    block_sizes: list[int],
    path: str | None,
    known_nodes: Collection[str] | None,
    name: str,
    source: str,
) -> Fabric:
    """Blocks become leaf switches under one root switch, so hops between blocks are 4."""
    root = _Switch(BLOCK_ROOT, None, children=[b.name for b in blocks])
    fabric = _build(
        [*blocks, root], path, known_nodes=known_nodes, single_root=True, name=name, source=source
    )
    fabric.graph.graph["block_sizes"] = tuple(block_sizes)
    return fabric


def parse_topology_conf(
    text: str,
    path: str | None = None,
    known_nodes: Collection[str] | None = None,
    source: str = "",
) -> Fabric:
    """Slurm's ``topology.conf`` (topology/tree ``SwitchName=`` or topology/block ``BlockName=``).

    Keys are case-insensitive as in Slurm.  Levels are computed: a switch
    with only nodes is a leaf (level 0), any other is one above its highest
    child.  Nodes listed on a switch that also has child switches hang off
    that upper switch directly (see :mod:`slurmopt.fabric.core`).
    """
    switches: list[_Switch] = []
    blocks: list[_Switch] = []
    block_sizes: list[int] = []
    budget = _Budget()
    for line, statement in _conf_statements(text):
        pairs = _key_values(statement, path, line, strict=True)
        first_key, first_value = pairs[0]
        values = dict(pairs[1:])
        if first_key == "blocksizes" and len(pairs) == 1:
            try:
                block_sizes = [int(v) for v in first_value.split(",") if v]
            except ValueError:
                raise FabricError(f"bad BlockSizes {first_value!r}", path, line) from None
            continue
        if first_key not in ("switchname", "blockname"):
            raise FabricError(
                f"statement must start with SwitchName= or BlockName=, not {first_key}=", path, line
            )
        if not first_value:
            raise FabricError(f"empty {first_key}", path, line)
        if first_key == "blockname":
            extra = set(values) - {"nodes"}
            if extra:
                raise FabricError(f"unknown key {sorted(extra)[0]!r} for a block", path, line)
            nodes = _hostlist(values.get("nodes", ""), f"block {first_value}", path, line, budget)
            blocks.append(_Switch(first_value, line, nodes=nodes))
            continue
        if "switchname" in values or "blockname" in values:
            raise FabricError("two names in one statement", path, line)
        sw = _Switch(first_value, line)
        sw.nodes = _hostlist(values.get("nodes", ""), f"switch {first_value}", path, line, budget)
        sw.children = _hostlist(
            values.get("switches", ""), f"switch {first_value}", path, line, budget
        )
        if "linkspeed" in values:
            try:
                sw.attrs["link_speed"] = int(values["linkspeed"])
            except ValueError:
                raise FabricError(f"bad LinkSpeed {values['linkspeed']!r}", path, line) from None
        switches.append(sw)
    if switches and blocks:
        raise FabricError("both SwitchName= and BlockName= statements", path, blocks[0].line)
    if blocks:
        return _blocks_fabric(blocks, block_sizes, path, known_nodes, "topology.conf", source)
    if not switches:
        raise FabricError("no SwitchName= or BlockName= statements", path)
    return _build(
        switches,
        path,
        known_nodes=known_nodes,
        single_root=True,
        name="topology.conf",
        source=source,
    )


def load_topology_conf(path: str | Path, known_nodes: Collection[str] | None = None) -> Fabric:
    """Read Slurm's ``topology.conf`` from a file."""
    return parse_topology_conf(_read(path), str(path), known_nodes, source=f"topology.conf {path}")


def parse_scontrol_topology(
    text: str,
    known_nodes: Collection[str] | None = None,
    source: str = "scontrol show topology",
) -> Fabric | None:
    """The output of ``scontrol show topology``; None when it describes no switches or blocks.

    Upper switches list every node beneath them, so a node hangs off the
    lowest-level switch that lists it.  Keys this parser does not use are
    ignored, since newer Slurm releases add fields to this output.
    """
    where = "scontrol show topology"
    budget = _Budget()
    records: list[tuple[int, dict[str, str]]] = []
    for line, statement in _conf_statements(text):
        if "=" not in statement.split()[0]:
            continue  # a message such as "No topology information available"
        records.append((line, dict(_key_values(statement, where, line, strict=False))))
    blocks = [(line, rec) for line, rec in records if "blockname" in rec]
    if blocks:
        parsed = [
            _Switch(
                rec["blockname"],
                line,
                nodes=_hostlist(
                    rec.get("nodes", ""), f"block {rec['blockname']}", where, line, budget
                ),
            )
            for line, rec in blocks
        ]
        sizes = [int(s) for s in blocks[0][1].get("blocksizes", "").split(",") if s.isdigit()]
        return _blocks_fabric(parsed, sizes, where, known_nodes, "scontrol", source)
    switch_records = [(line, rec) for line, rec in records if "switchname" in rec]
    if not switch_records:
        return None
    switches: list[_Switch] = []
    lowest: dict[str, tuple[int, _Switch]] = {}
    for line, rec in switch_records:
        sw = _Switch(rec["switchname"], line)
        sw.children = _hostlist(rec.get("switches", ""), f"switch {sw.name}", where, line, budget)
        try:
            level = int(rec.get("level", "0"))
        except ValueError:
            raise FabricError(f"bad Level {rec['level']!r}", where, line) from None
        if "linkspeed" in rec and rec["linkspeed"].isdigit():
            sw.attrs["link_speed"] = int(rec["linkspeed"])
        for node in _hostlist(rec.get("nodes", ""), f"switch {sw.name}", where, line, budget):
            seen = lowest.get(node)
            if seen is None or level < seen[0]:
                lowest[node] = (level, sw)
            elif level == seen[0]:
                raise FabricError(
                    f"node {node} is under two switches: {seen[1].name} and {sw.name}", where, line
                )
        switches.append(sw)
    for node, (_, sw) in lowest.items():
        sw.nodes.append(node)
    return _build(
        switches, where, known_nodes=known_nodes, single_root=True, name="scontrol", source=source
    )


# -- YAML ----------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing recursive aliases and documents that aliases blow up.

    Each composed value's size (itself and everything under it, aliases
    counted in full) is kept, so a document whose expansion passes
    :data:`MAX_YAML_VALUES` fails while it is composed, before anything walks it.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._sizes:
                raise yaml.composer.ComposerError(
                    None, None, f"alias *{event.anchor} refers to itself", event.start_mark
                )
        node = super().compose_node(parent, index)
        if node is not None and id(node) not in self._sizes:
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            size = 1 + sum(self._sizes.get(id(c), 1) for c in children)
            if size > MAX_YAML_VALUES:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"more than {MAX_YAML_VALUES} values once aliases are expanded",
                    node.start_mark,
                )
            self._sizes[id(node)] = size
        return node


class _Yaml:
    """Typed access to a composed YAML document that keeps every value's line for errors."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.budget = _Budget()
        self._constructor = yaml.constructor.SafeConstructor()

    @staticmethod
    def line(node: yaml.Node) -> int:
        return int(node.start_mark.line) + 1

    def fail(self, cause: str, node: yaml.Node | None) -> FabricError:
        return FabricError(cause, self.path, self.line(node) if node is not None else None)

    def compose(self, text: str) -> yaml.Node | None:
        try:
            return yaml.compose(text, Loader=_Loader)
        except RecursionError:
            raise FabricError("bad YAML: nested too deeply", self.path) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            line = int(mark.line) + 1 if mark is not None else None
            raise FabricError(f"bad YAML: {problem}", self.path, line) from None

    def mapping(
        self, node: yaml.Node, what: str, allowed: Collection[str] | None
    ) -> dict[str, yaml.Node]:
        """A mapping's values by key; an unknown (``allowed`` None: any) or repeated key fails."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(f"{what} must be a mapping", node)
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = str(self.scalar(key_node, f"key in {what}"))
            if allowed is not None and key not in allowed:
                raise self.fail(f"unknown key {key!r} in {what}", key_node)
            if key in out:
                raise self.fail(f"key {key!r} repeated in {what}", key_node)
            out[key] = value_node
        return out

    def sequence(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(f"{what} must be a list", node)
        return list(node.value)

    def scalar(self, node: yaml.Node, what: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(f"{what} must be a single value", node)
        try:
            return self._constructor.construct_object(node)
        except Exception:  # PyYAML's tag constructors fail in many ways on bad values
            raise self.fail(
                f"{what}: cannot read {node.tag} value {node.value[:40]!r}", node
            ) from None

    def string(self, node: yaml.Node, what: str) -> str:
        value = self.scalar(node, what)
        if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
            raise self.fail(f"{what} must be a name", node)
        return str(value)

    def number(self, node: yaml.Node, what: str) -> float:
        """A finite number above 0 (bandwidths and ratios: NaN or infinity would poison sums)."""
        value = self.scalar(node, what)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise self.fail(f"{what} must be a positive number", node)
        number = float(min(value, math.inf))  # an int past float's range is infinite too
        if not math.isfinite(number):
            raise self.fail(f"{what} must be a positive number, not {number}", node)
        return number

    def boolean(self, node: yaml.Node, what: str) -> bool:
        value = self.scalar(node, what)
        if not isinstance(value, bool):
            raise self.fail(f"{what} must be true or false", node)
        return value

    def hostlist(self, node: yaml.Node, what: str) -> list[str]:
        """A hostlist string, or a list of hostlist strings."""
        if isinstance(node, yaml.SequenceNode):
            return [n for item in node.value for n in self.hostlist(item, what)]
        return _hostlist(self.string(node, what), what, self.path, self.line(node), self.budget)


def _slurm_yaml_fabric(
    doc: _Yaml, root: yaml.Node, known_nodes: Collection[str] | None, source: str
) -> Fabric:
    """Slurm's ``topology.yaml``: the ``cluster_default`` topology, else the first one."""
    entries = doc.sequence(root, "topology.yaml")
    if not entries:
        raise doc.fail("no topologies", root)
    parsed: list[tuple[yaml.Node, dict[str, yaml.Node]]] = []
    for entry in entries:
        fields = doc.mapping(
            entry, "topology", {"topology", "cluster_default", "tree", "block", "flat"}
        )
        if "topology" not in fields:
            raise doc.fail("topology without a 'topology' name", entry)
        kinds = [k for k in ("tree", "block", "flat") if k in fields]
        if len(kinds) != 1:
            raise doc.fail("a topology needs exactly one of tree, block, flat", entry)
        parsed.append((entry, fields))
    defaults = [
        (entry, fields)
        for entry, fields in parsed
        if "cluster_default" in fields and doc.boolean(fields["cluster_default"], "cluster_default")
    ]
    if len(defaults) > 1:
        raise doc.fail("more than one topology has cluster_default: true", defaults[1][0])
    _, fields = defaults[0] if defaults else parsed[0]
    name = doc.string(fields["topology"], "topology")

    if "flat" in fields:
        if not doc.boolean(fields["flat"], "flat"):
            raise doc.fail("flat must be true", fields["flat"])
        return Fabric.flat(sorted(known_nodes or ()), name=name, source=source)

    if "block" in fields:
        block = doc.mapping(fields["block"], "block", {"block_sizes", "blocks"})
        sizes = (
            [
                int(doc.number(n, "block size"))
                for n in doc.sequence(block["block_sizes"], "block_sizes")
            ]
            if "block_sizes" in block
            else []
        )
        if "blocks" not in block:
            raise doc.fail("block topology without blocks", fields["block"])
        blocks: list[_Switch] = []
        for item in doc.sequence(block["blocks"], "blocks"):
            b = doc.mapping(item, "block entry", {"block", "nodes"})
            if "block" not in b:
                raise doc.fail("block entry without a 'block' name", item)
            block_name = doc.string(b["block"], "block")
            nodes = doc.hostlist(b["nodes"], f"block {block_name}") if "nodes" in b else []
            blocks.append(_Switch(block_name, doc.line(item), nodes=nodes))
        if not blocks:
            raise doc.fail("block topology without blocks", fields["block"])
        return _blocks_fabric(blocks, sizes, doc.path, known_nodes, name, source)

    tree = doc.mapping(fields["tree"], "tree", {"switches"})
    if "switches" not in tree:
        raise doc.fail("tree without switches", fields["tree"])
    switches: list[_Switch] = []
    for item in doc.sequence(tree["switches"], "switches"):
        s = doc.mapping(item, "switch entry", {"switch", "children", "nodes", "link_speed"})
        if "switch" not in s:
            raise doc.fail("switch entry without a 'switch' name", item)
        sw = _Switch(doc.string(s["switch"], "switch"), doc.line(item))
        if "children" in s:
            sw.children = doc.hostlist(s["children"], f"children of {sw.name}")
        if "nodes" in s:
            sw.nodes = doc.hostlist(s["nodes"], f"nodes of {sw.name}")
        if "link_speed" in s:
            sw.attrs["link_speed"] = int(doc.number(s["link_speed"], "link_speed"))
        switches.append(sw)
    if not switches:
        raise doc.fail("tree without switches", tree["switches"])
    return _build(
        switches, doc.path, known_nodes=known_nodes, single_root=True, name=name, source=source
    )


def parse_slurm_topology_yaml(
    text: str,
    path: str | None = None,
    known_nodes: Collection[str] | None = None,
    source: str = "",
) -> Fabric:
    """Slurm's ``topology.yaml`` (25.05+) from text."""
    doc = _Yaml(path)
    root = doc.compose(text)
    if root is None:
        raise FabricError("empty file", path)
    return _slurm_yaml_fabric(doc, root, known_nodes, source)


def load_slurm_topology_yaml(
    path: str | Path, known_nodes: Collection[str] | None = None
) -> Fabric:
    """Read Slurm's ``topology.yaml`` from a file."""
    return parse_slurm_topology_yaml(
        _read(path), str(path), known_nodes, source=f"topology.yaml {path}"
    )


_LINK_KEYS = {"bandwidth_gbps", "oversubscription"}


def _link(doc: _Yaml, node: yaml.Node, what: str) -> dict[str, float]:
    fields = doc.mapping(node, what, _LINK_KEYS)
    return {key: doc.number(value, f"{what} {key}") for key, value in fields.items()}


def _fabric_yaml(
    doc: _Yaml, root: yaml.Node, known_nodes: Collection[str] | None, source: str
) -> Fabric:
    """slurmopt's own fabric description (see docs/fabric.md)."""
    top = doc.mapping(
        root, "fabric file", {"fabric", "node_links", "uplinks", "switches", "links", "domains"}
    )
    name = doc.string(top["fabric"], "fabric") if "fabric" in top else "fabric"
    node_link_default = _link(doc, top["node_links"], "node_links") if "node_links" in top else {}
    uplink_defaults: dict[int, dict[str, float]] = {}
    if "uplinks" in top:
        if not isinstance(top["uplinks"], yaml.MappingNode):
            raise doc.fail("uplinks must be a mapping of level to link", top["uplinks"])
        for key_node, value_node in top["uplinks"].value:
            level = doc.scalar(key_node, "uplinks level")
            if isinstance(level, bool) or not isinstance(level, int) or level < 0:
                raise doc.fail("uplinks keys must be switch levels (0, 1, ...)", key_node)
            uplink_defaults[level] = _link(doc, value_node, f"uplinks of level {level}")
    if "switches" not in top:
        raise doc.fail("no switches", root)

    switches: list[_Switch] = []
    parents_of: list[tuple[_Switch, list[str]]] = []
    for item in doc.sequence(top["switches"], "switches"):
        s = doc.mapping(
            item, "switch entry", {"switch", "parents", "nodes", "group", "uplink", "node_link"}
        )
        if "switch" not in s:
            raise doc.fail("switch entry without a 'switch' name", item)
        names = doc.hostlist(s["switch"], "switch")
        if not names:
            raise doc.fail("switch names no switch", s["switch"])
        nodes = doc.hostlist(s["nodes"], f"nodes of {names[0]}") if "nodes" in s else []
        if len(nodes) % len(names):
            raise doc.fail(
                f"{len(nodes)} nodes do not split evenly over {len(names)} switches", s["nodes"]
            )
        per_switch = len(nodes) // len(names)
        parents = doc.hostlist(s["parents"], f"parents of {names[0]}") if "parents" in s else []
        for i, sw_name in enumerate(names):
            sw = _Switch(
                sw_name, doc.line(item), nodes=nodes[i * per_switch : (i + 1) * per_switch]
            )
            if "group" in s:
                sw.attrs["group"] = doc.string(s["group"], "group")
            if "uplink" in s:
                sw.uplink = _link(doc, s["uplink"], "uplink")
            if "node_link" in s:
                sw.node_link = _link(doc, s["node_link"], "node_link")
            switches.append(sw)
            parents_of.append((sw, parents))
    by_name = {sw.name: sw for sw in switches}
    for sw, parents in parents_of:
        for parent in parents:
            if parent not in by_name:
                raise FabricError(
                    f"unknown switch {parent} named as a parent of {sw.name}", doc.path, sw.line
                )
            by_name[parent].children.append(sw.name)

    peer_links: list[_PeerLink] = []
    for item in doc.sequence(top["links"], "links") if "links" in top else []:
        fields = doc.mapping(item, "link", {"between", "mesh", *_LINK_KEYS})
        attrs = {k: doc.number(fields[k], k) for k in _LINK_KEYS if k in fields}
        line = doc.line(item)
        if ("between" in fields) == ("mesh" in fields):
            raise doc.fail("a link needs exactly one of between, mesh", item)
        if "mesh" in fields:
            members = doc.hostlist(fields["mesh"], "mesh")
            doc.budget.take(len(members) * (len(members) - 1) // 2, "mesh", doc.path, line)
            pairs = [(a, b) for i, a in enumerate(members) for b in members[i + 1 :]]
        else:
            ends = doc.sequence(fields["between"], "between")
            if len(ends) != 2:
                raise doc.fail("between needs two hostlists of switches", fields["between"])
            side_a, side_b = (doc.hostlist(end, "between") for end in ends)
            doc.budget.take(len(side_a) * len(side_b), "between", doc.path, line)
            pairs = [(a, b) for a in side_a for b in side_b]
        peer_links.extend(_PeerLink(a, b, line, attrs) for a, b in pairs)

    domains: dict[str, tuple[str, int | None]] = {}
    if "domains" in top:
        for domain, members_node in doc.mapping(top["domains"], "domains", None).items():
            for node in doc.hostlist(members_node, f"domain {domain}"):
                if node in domains:
                    raise doc.fail(
                        f"node {node} is in two domains: {domains[node][0]} and {domain}",
                        members_node,
                    )
                domains[node] = (domain, doc.line(members_node))
    return _build(
        switches,
        doc.path,
        known_nodes=known_nodes,
        single_root=False,
        name=name,
        source=source,
        uplink_defaults=uplink_defaults,
        node_link_default=node_link_default,
        peer_links=peer_links,
        domains=domains,
    )


def parse_fabric_yaml(
    text: str,
    path: str | None = None,
    known_nodes: Collection[str] | None = None,
    source: str = "",
) -> Fabric:
    """slurmopt's fabric YAML from text."""
    doc = _Yaml(path)
    root = doc.compose(text)
    if root is None:
        raise FabricError("empty file", path)
    return _fabric_yaml(doc, root, known_nodes, source)


def load_fabric_yaml(path: str | Path, known_nodes: Collection[str] | None = None) -> Fabric:
    """Read slurmopt's fabric YAML from a file."""
    return parse_fabric_yaml(_read(path), str(path), known_nodes, source=f"fabric file {path}")


def load_fabric_file(
    path: str | os.PathLike[str], known_nodes: Collection[str] | None = None
) -> Fabric:
    """Any supported file, told apart by extension and content.

    ``.conf`` is Slurm's topology.conf; ``.yaml``/``.yml`` is Slurm's
    topology.yaml when the document is a list of topologies, else
    slurmopt's own format.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".conf":
        return load_topology_conf(path, known_nodes)
    if suffix not in (".yaml", ".yml"):
        raise FabricError("unknown fabric file type: use .conf, .yaml or .yml", str(path))
    text = _read(path)
    doc = _Yaml(str(path))
    root = doc.compose(text)
    if root is None:
        raise FabricError("empty file", str(path))
    if isinstance(root, yaml.SequenceNode):
        return _slurm_yaml_fabric(doc, root, known_nodes, source=f"topology.yaml {path}")
    return _fabric_yaml(doc, root, known_nodes, source=f"fabric file {path}")
