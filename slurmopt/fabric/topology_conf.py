"""Slurm's ``topology.conf`` (topology/tree and topology/block) and ``scontrol show topology``."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from pathlib import Path

from slurmopt.errors import FabricError
from slurmopt.fabric.core import Fabric
from slurmopt.fabric.tree import Budget, Switch, blocks_fabric, build, hostlist, read

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
    switches: list[Switch] = []
    blocks: list[Switch] = []
    block_sizes: list[int] = []
    budget = Budget()
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
            nodes = hostlist(values.get("nodes", ""), f"block {first_value}", path, line, budget)
            blocks.append(Switch(first_value, line, nodes=nodes))
            continue
        if "switchname" in values or "blockname" in values:
            raise FabricError("two names in one statement", path, line)
        sw = Switch(first_value, line)
        sw.nodes = hostlist(values.get("nodes", ""), f"switch {first_value}", path, line, budget)
        sw.children = hostlist(
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
        return blocks_fabric(blocks, block_sizes, path, known_nodes, "topology.conf", source)
    if not switches:
        raise FabricError("no SwitchName= or BlockName= statements", path)
    return build(
        switches,
        path,
        known_nodes=known_nodes,
        single_root=True,
        name="topology.conf",
        source=source,
    )


def load_topology_conf(path: str | Path, known_nodes: Collection[str] | None = None) -> Fabric:
    """Read Slurm's ``topology.conf`` from a file."""
    return parse_topology_conf(read(path), str(path), known_nodes, source=f"topology.conf {path}")


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
    budget = Budget()
    records: list[tuple[int, dict[str, str]]] = []
    for line, statement in _conf_statements(text):
        if "=" not in statement.split()[0]:
            continue  # a message such as "No topology information available"
        records.append((line, dict(_key_values(statement, where, line, strict=False))))
    blocks = [(line, rec) for line, rec in records if "blockname" in rec]
    if blocks:
        parsed = [
            Switch(
                rec["blockname"],
                line,
                nodes=hostlist(
                    rec.get("nodes", ""), f"block {rec['blockname']}", where, line, budget
                ),
            )
            for line, rec in blocks
        ]
        sizes = [int(s) for s in blocks[0][1].get("blocksizes", "").split(",") if s.isdigit()]
        return blocks_fabric(parsed, sizes, where, known_nodes, "scontrol", source)
    switch_records = [(line, rec) for line, rec in records if "switchname" in rec]
    if not switch_records:
        return None
    switches: list[Switch] = []
    lowest: dict[str, tuple[int, Switch]] = {}
    for line, rec in switch_records:
        sw = Switch(rec["switchname"], line)
        sw.children = hostlist(rec.get("switches", ""), f"switch {sw.name}", where, line, budget)
        try:
            level = int(rec.get("level", "0"))
        except ValueError:
            raise FabricError(f"bad Level {rec['level']!r}", where, line) from None
        if "linkspeed" in rec and rec["linkspeed"].isdigit():
            sw.attrs["link_speed"] = int(rec["linkspeed"])
        for node in hostlist(rec.get("nodes", ""), f"switch {sw.name}", where, line, budget):
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
    return build(
        switches, where, known_nodes=known_nodes, single_root=True, name="scontrol", source=source
    )
