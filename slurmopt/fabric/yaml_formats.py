"""The YAML fabric formats: Slurm's ``topology.yaml`` (25.05+) and slurmopt's own fabric YAML.

Both are composed with :class:`Yaml`, which keeps every value's line for
errors and refuses alias bombs, and both build through
:mod:`slurmopt.fabric.tree`.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from slurmopt.errors import FabricError
from slurmopt.fabric.core import Fabric
from slurmopt.fabric.tree import (
    Budget,
    PeerLink,
    Switch,
    blocks_fabric,
    build,
    hostlist,
    read,
)
from slurmopt.hostlist import MAX_NAMES

#: The most YAML values a fabric file may hold once its aliases are expanded (an alias bomb
#: of a few lines would otherwise expand to billions).
MAX_YAML_VALUES = MAX_NAMES


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


class Yaml:
    """Typed access to a composed YAML document that keeps every value's line for errors."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.budget = Budget()
        self._constructor = yaml.constructor.SafeConstructor()

    @staticmethod
    def line(node: yaml.Node) -> int:
        return int(node.start_mark.line) + 1

    def fail(self, cause: str, node: yaml.Node | None) -> FabricError:
        return FabricError(cause, self.path, self.line(node) if node is not None else None)

    def root(self, text: str) -> yaml.Node:
        """The document's root node; an empty document is an error."""
        root = self.compose(text)
        if root is None:
            raise FabricError("empty file", self.path)
        return root

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
        return hostlist(self.string(node, what), what, self.path, self.line(node), self.budget)


def slurm_yaml_fabric(
    doc: Yaml, root: yaml.Node, known_nodes: Collection[str] | None, source: str
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
        blocks: list[Switch] = []
        for item in doc.sequence(block["blocks"], "blocks"):
            b = doc.mapping(item, "block entry", {"block", "nodes"})
            if "block" not in b:
                raise doc.fail("block entry without a 'block' name", item)
            block_name = doc.string(b["block"], "block")
            nodes = doc.hostlist(b["nodes"], f"block {block_name}") if "nodes" in b else []
            blocks.append(Switch(block_name, doc.line(item), nodes=nodes))
        if not blocks:
            raise doc.fail("block topology without blocks", fields["block"])
        return blocks_fabric(blocks, sizes, doc.path, known_nodes, name, source)

    tree = doc.mapping(fields["tree"], "tree", {"switches"})
    if "switches" not in tree:
        raise doc.fail("tree without switches", fields["tree"])
    switches: list[Switch] = []
    for item in doc.sequence(tree["switches"], "switches"):
        s = doc.mapping(item, "switch entry", {"switch", "children", "nodes", "link_speed"})
        if "switch" not in s:
            raise doc.fail("switch entry without a 'switch' name", item)
        sw = Switch(doc.string(s["switch"], "switch"), doc.line(item))
        if "children" in s:
            sw.children = doc.hostlist(s["children"], f"children of {sw.name}")
        if "nodes" in s:
            sw.nodes = doc.hostlist(s["nodes"], f"nodes of {sw.name}")
        if "link_speed" in s:
            sw.attrs["link_speed"] = int(doc.number(s["link_speed"], "link_speed"))
        switches.append(sw)
    if not switches:
        raise doc.fail("tree without switches", tree["switches"])
    return build(
        switches, doc.path, known_nodes=known_nodes, single_root=True, name=name, source=source
    )


def parse_slurm_topology_yaml(
    text: str,
    path: str | None = None,
    known_nodes: Collection[str] | None = None,
    source: str = "",
) -> Fabric:
    """Slurm's ``topology.yaml`` (25.05+) from text."""
    doc = Yaml(path)
    return slurm_yaml_fabric(doc, doc.root(text), known_nodes, source)


def load_slurm_topology_yaml(
    path: str | Path, known_nodes: Collection[str] | None = None
) -> Fabric:
    """Read Slurm's ``topology.yaml`` from a file."""
    return parse_slurm_topology_yaml(
        read(path), str(path), known_nodes, source=f"topology.yaml {path}"
    )


_LINK_KEYS = {"bandwidth_gbps", "oversubscription"}


def _link(doc: Yaml, node: yaml.Node, what: str) -> dict[str, float]:
    fields = doc.mapping(node, what, _LINK_KEYS)
    return {key: doc.number(value, f"{what} {key}") for key, value in fields.items()}


def fabric_yaml(
    doc: Yaml, root: yaml.Node, known_nodes: Collection[str] | None, source: str
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

    switches: list[Switch] = []
    parents_of: list[tuple[Switch, list[str]]] = []
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
            sw = Switch(sw_name, doc.line(item), nodes=nodes[i * per_switch : (i + 1) * per_switch])
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

    peer_links: list[PeerLink] = []
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
        peer_links.extend(PeerLink(a, b, line, attrs) for a, b in pairs)

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
    return build(
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
    doc = Yaml(path)
    return fabric_yaml(doc, doc.root(text), known_nodes, source)


def load_fabric_yaml(path: str | Path, known_nodes: Collection[str] | None = None) -> Fabric:
    """Read slurmopt's fabric YAML from a file."""
    return parse_fabric_yaml(read(path), str(path), known_nodes, source=f"fabric file {path}")
