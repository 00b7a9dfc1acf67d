"""``slurmopt verify``'s node choice: which free nodes to test, their ring, the groups to time.

Pure: a snapshot and a fabric in, node names and groups (:class:`PlannedGroup`) out.
:mod:`slurmopt.verify_run` uses them to write the benchmark job;
:mod:`slurmopt.verify` judges what the job measured.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slurmopt.errors import UsageError
from slurmopt.fabric.core import Fabric
from slurmopt.model import ClusterSnapshot, Node, NodeState
from slurmopt.policy.fragmentation import scope_nodes
from slurmopt.verify_doc import LEAF, PAIR


def is_free(node: Node) -> bool:
    """In service, idle and with nothing allocated: the benchmark must have the node alone."""
    return (
        node.available
        and node.state is NodeState.IDLE
        and node.gpus_alloc == 0
        and node.alloc_cpus == 0
        and "COMPLETING" not in node.flags
    )


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key reading digit runs as numbers: ``n9`` before ``n10``, as hostlists do."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


def switch_of(fabric: Fabric, node: str) -> str:
    """The switch a node hangs off ("" when the fabric does not know it)."""
    return fabric.attachment_of(node) or ""


def choose_nodes(
    snapshot: ClusterSnapshot, fabric: Fabric, count: int, partition: str | None = None
) -> list[str]:
    """``count`` free nodes of the partition, spread over leaf switches, two at a time.

    Taking two nodes from each leaf in turn tests as many leaves as the
    count allows while giving each tested leaf a group of its own; with
    ``count`` 4 and several leaves that is two nodes under each of two leaves.
    """
    if count < 2:
        raise UsageError(f"--nodes must be at least 2, got {count}")
    scope = scope_nodes(snapshot, partition)
    free = sorted((n.name for n in scope if is_free(n)), key=natural_key)
    if len(free) < count:
        where = f"partition {partition}" if partition else "the cluster"
        raise UsageError(
            f"{len(free)} idle node(s) in {where}, --nodes {count} needs {count}: "
            "wait, ask for fewer, or name them with --nodelist"
        )
    by_switch: dict[str, list[str]] = {}
    for name in free:
        by_switch.setdefault(switch_of(fabric, name), []).append(name)
    order = sorted(by_switch, key=lambda sw: (sw == "", natural_key(sw)))
    chosen: list[str] = []
    while len(chosen) < count:
        for switch in order:
            take = by_switch[switch][: min(2, count - len(chosen))]
            del by_switch[switch][: len(take)]
            chosen.extend(take)
    return ring_order(chosen, fabric)


def ring_order(nodes: Sequence[str], fabric: Fabric) -> list[str]:
    """Nodes by switch, then name: ring neighbours share a switch, except at the seams."""

    def key(node: str) -> tuple[bool, tuple[tuple[int, int | str], ...], Any]:
        switch = switch_of(fabric, node)
        return switch == "", natural_key(switch), natural_key(node)

    return sorted(dict.fromkeys(nodes), key=key)


@dataclass(frozen=True, slots=True)
class PlannedGroup:
    """A set of nodes the benchmark times by themselves (``--group NAME=NODES``)."""

    name: str
    kind: str
    nodes: tuple[str, ...]


def plan_groups(ring: Sequence[str], fabric: Fabric) -> list[PlannedGroup]:
    """Ring-neighbour pairs (from 3 nodes) and the nodes under each leaf (when several leaves).

    Two nodes make one pair, the whole run, so no pairs then; a leaf that
    holds every node is the whole run too, so no leaf groups then.
    """
    groups: list[PlannedGroup] = []
    if len(ring) >= 3:
        for i, node in enumerate(ring):
            peer = ring[(i + 1) % len(ring)]
            groups.append(PlannedGroup(f"{PAIR}:{node}+{peer}", PAIR, (node, peer)))
    by_switch: dict[str, list[str]] = {}
    for node in ring:
        switch = fabric.leaf_of(node)
        if switch:
            by_switch.setdefault(switch, []).append(node)
    if len(by_switch) > 1 or (by_switch and sum(map(len, by_switch.values())) < len(ring)):
        for switch, members in sorted(by_switch.items(), key=lambda kv: natural_key(kv[0])):
            if len(members) >= 2:
                groups.append(PlannedGroup(f"{LEAF}:{switch}", LEAF, tuple(members)))
    return groups
