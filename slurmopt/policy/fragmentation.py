"""GPU fragmentation of a cluster: how much free capacity a new job could really use.

Pure: a :class:`~slurmopt.model.ClusterSnapshot` and a
:class:`~slurmopt.fabric.Fabric` in, a frozen :class:`FragmentationReport`
out.  No Slurm calls and no file reads, so a stored snapshot gives the same
report every time.

Definitions (``docs/fragmentation.md`` has the full table of node states):

* **scope**: the nodes of the chosen partition, else every node of the snapshot.
* **unavailable node**: ``Node.available`` is False (a base state other than
  IDLE/MIXED/ALLOCATED, or a flag in ``UNAVAILABLE_FLAGS`` such as DRAIN,
  NOT_RESPONDING, MAINTENANCE, RESERVED).  Its GPUs never count as free.
* **in use**: an available node with anything allocated (GPUs or CPUs), a
  MIXED/ALLOCATED state or a COMPLETING flag.
* ``total_gpus``: every GPU in scope;
  ``allocated_gpus``: GPUs Slurm has allocated, on any node;
  ``unavailable_gpus``: unallocated GPUs on unavailable nodes;
  ``free_gpus``: unallocated GPUs on available nodes, so
  ``total = allocated + unavailable + free``.
* ``stranded_gpus``: free GPUs on in-use nodes (usable only by jobs that fit
  beside the ones already there).
* ``fully_free_nodes``: available nodes with nothing allocated;
  ``partly_used_nodes``: available, in-use nodes with at least one free GPU;
  ``busy_nodes``: available, in-use nodes with no free GPU.
* ``largest_single_leaf_job_nodes``: the most fully free nodes under one leaf
  switch; ``largest_job_nodes``: fully free nodes anywhere.
* ``fragmentation_index``: ``stranded_gpus / free_gpus``, the share of free
  GPUs not on whole free nodes; 0 when nothing is free.
* ``fgd_unusable_share`` (after Weng et al., "Beware of Fragmentation",
  USENIX ATC'23): the expected share of free GPUs that a job drawn from a
  job-size distribution could not use.  For a job of ``k`` nodes with ``d``
  GPUs each, the free GPUs on nodes with fewer than ``d`` free are unusable,
  and all free GPUs are unusable when fewer than ``k`` nodes have ``d`` free.
  ``None`` when the distribution is empty.

* ``tiers``: per level of the fabric (0 = leaves, 1 = the pods or spines
  above them, ...), per switch with scope nodes beneath it: free GPUs, fully
  free nodes (the largest whole-node gang that could start now within that
  switch) and their GPUs; and per tier the switch with the largest such
  gang.  With small leaves the figure that matters is the largest job per pod.

Nodes that the fabric places under no leaf switch are grouped under the
switch entry ``(none)``.  The work is linear in nodes and jobs: the FGD
measure runs over a histogram of free-GPU counts, not over node pairs.

The FGD measure and the job-size distribution it averages over live in
:mod:`slurmopt.policy.fgd`; their names are re-exported here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Node, NodeState
from slurmopt.policy.fgd import (
    QUEUE_SOURCE,
    JobShape,
    JobSizeDistribution,
    fgd_unusable_share,
    parse_job_sizes,
    queue_distribution,
    queue_shape,
    shape_unusable_gpus,
)

SCHEMA_VERSION = 2

#: Switch entry for nodes the fabric does not place under any leaf switch.
NO_LEAF = "(none)"

_IN_USE_STATES = frozenset({NodeState.MIXED, NodeState.ALLOCATED})


@dataclass(frozen=True, slots=True)
class SwitchFragmentation:
    """The scope's nodes under one leaf switch (or under none, for ``(none)``)."""

    name: str
    nodes: int
    total_gpus: int
    free_gpus: int
    free_nodes: int
    partly_used_nodes: int
    busy_nodes: int
    unavailable_nodes: int
    stranded_gpus: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "nodes": self.nodes,
            "total_gpus": self.total_gpus,
            "free_gpus": self.free_gpus,
            "free_nodes": self.free_nodes,
            "partly_used_nodes": self.partly_used_nodes,
            "busy_nodes": self.busy_nodes,
            "unavailable_nodes": self.unavailable_nodes,
            "stranded_gpus": self.stranded_gpus,
        }


@dataclass(frozen=True, slots=True)
class LargestJobNow:
    """The biggest work that could start at once, given only free resources."""

    whole_nodes: int
    whole_nodes_on_one_leaf: int
    leaf: str | None
    gpus_on_one_node: int

    def to_json(self) -> dict[str, Any]:
        return {
            "whole_nodes": self.whole_nodes,
            "whole_nodes_on_one_leaf": self.whole_nodes_on_one_leaf,
            "leaf": self.leaf,
            "gpus_on_one_node": self.gpus_on_one_node,
        }


@dataclass(frozen=True, slots=True)
class TierSwitch:
    """One switch of a tier: the scope's nodes beneath it, and the largest gang it could start."""

    name: str
    nodes: int
    free_gpus: int
    free_nodes: int
    free_node_gpus: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "nodes": self.nodes,
            "free_gpus": self.free_gpus,
            "free_nodes": self.free_nodes,
            "largest_gang_nodes": self.free_nodes,
            "largest_gang_gpus": self.free_node_gpus,
        }


@dataclass(frozen=True, slots=True)
class Tier:
    """One level of the fabric: its switches, and the largest whole-node job within one of them."""

    level: int
    switches: tuple[TierSwitch, ...]

    @property
    def best(self) -> TierSwitch | None:
        """The switch with the most fully free nodes (then their GPUs, then name); None if none."""
        if not self.switches:
            return None
        return min(self.switches, key=lambda s: (-s.free_nodes, -s.free_node_gpus, s.name))

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "level": self.level,
            "switches": len(self.switches),
            "largest_job_nodes": best.free_nodes if best else 0,
            "largest_job_gpus": best.free_node_gpus if best else 0,
            "switch": best.name if best and best.free_nodes else None,
            "per_switch": [s.to_json() for s in self.switches],
        }


@dataclass(frozen=True, slots=True)
class FragmentationReport:
    """Every fragmentation figure for one snapshot and scope; see the module docstring."""

    taken_at: float
    partition: str | None
    fabric_source: str
    nodes: int
    total_gpus: int
    allocated_gpus: int
    unavailable_gpus: int
    free_gpus: int
    stranded_gpus: int
    fully_free_nodes: int
    partly_used_nodes: int
    busy_nodes: int
    unavailable_nodes: int
    largest_single_leaf_job_nodes: int
    largest_job_nodes: int
    fragmentation_index: float
    fgd_unusable_share: float | None
    job_sizes: JobSizeDistribution
    shape_unusable_share: tuple[float, ...]
    largest_job_now: LargestJobNow
    switches: tuple[SwitchFragmentation, ...]
    notes: tuple[str, ...] = field(default=())
    tiers: tuple[Tier, ...] = field(default=())
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict in the shape of ``schemas/fragmentation.schema.json``."""
        return {
            "schema_version": self.schema_version,
            "taken_at": self.taken_at,
            "partition": self.partition,
            "fabric_source": self.fabric_source,
            "nodes": self.nodes,
            "total_gpus": self.total_gpus,
            "allocated_gpus": self.allocated_gpus,
            "unavailable_gpus": self.unavailable_gpus,
            "free_gpus": self.free_gpus,
            "stranded_gpus": self.stranded_gpus,
            "fully_free_nodes": self.fully_free_nodes,
            "partly_used_nodes": self.partly_used_nodes,
            "busy_nodes": self.busy_nodes,
            "unavailable_nodes": self.unavailable_nodes,
            "largest_single_leaf_job_nodes": self.largest_single_leaf_job_nodes,
            "largest_job_nodes": self.largest_job_nodes,
            "fragmentation_index": round(self.fragmentation_index, 6),
            "fgd_unusable_share": (
                None if self.fgd_unusable_share is None else round(self.fgd_unusable_share, 6)
            ),
            "job_sizes": {
                "source": self.job_sizes.source,
                "shapes": [
                    {
                        "nodes": s.nodes,
                        "gpus_per_node": s.gpus_per_node,
                        "weight": s.weight,
                        "unusable_share": round(share, 6),
                    }
                    for s, share in zip(
                        self.job_sizes.shapes, self.shape_unusable_share, strict=True
                    )
                ],
            },
            "largest_job_now": self.largest_job_now.to_json(),
            "switches": [s.to_json() for s in self.switches],
            "tiers": [t.to_json() for t in self.tiers],
            "notes": list(self.notes),
        }


def _in_use(node: Node) -> bool:
    return (
        node.gpus_alloc > 0
        or node.alloc_cpus > 0
        or node.state in _IN_USE_STATES
        or "COMPLETING" in node.flags
    )


def scope_nodes(snapshot: ClusterSnapshot, partition: str | None) -> list[Node]:
    """The partition's nodes, else every node; an unknown partition is a :class:`UsageError`."""
    if partition is None:
        return list(snapshot.nodes.values())
    if partition not in snapshot.partitions:
        known = ", ".join(sorted(snapshot.partitions)) or "none"
        raise UsageError(f"unknown partition {partition!r} (known: {known})")
    return snapshot.partition_nodes(partition)


@dataclass
class _Tally:
    """Running counts for one switch while the nodes are walked once."""

    nodes: int = 0
    total_gpus: int = 0
    free_gpus: int = 0
    free_nodes: int = 0
    partly_used_nodes: int = 0
    busy_nodes: int = 0
    unavailable_nodes: int = 0
    stranded_gpus: int = 0

    def freeze(self, name: str) -> SwitchFragmentation:
        return SwitchFragmentation(
            name,
            self.nodes,
            self.total_gpus,
            self.free_gpus,
            self.free_nodes,
            self.partly_used_nodes,
            self.busy_nodes,
            self.unavailable_nodes,
            self.stranded_gpus,
        )


@dataclass
class _Free:
    """The scope's nodes hanging off one switch: how many, free GPUs, fully free nodes."""

    nodes: int = 0
    free_gpus: int = 0
    free_nodes: int = 0
    free_node_gpus: int = 0


def _tiers(fabric: Fabric, by_attachment: Mapping[str, _Free]) -> tuple[Tier, ...]:
    """Sum each switch's attached tallies over every switch beneath it, level by level.

    Only switches with scope nodes beneath them are listed.  The sums run
    over switches, not nodes, so the cost is the fabric's size, not the job count.
    """
    tiers = []
    for level, names in fabric.levels().items():
        entries = []
        for name in names:
            total = _Free()
            for sw in fabric.attachments_beneath(name):
                part = by_attachment.get(sw)
                if part is not None:
                    total.nodes += part.nodes
                    total.free_gpus += part.free_gpus
                    total.free_nodes += part.free_nodes
                    total.free_node_gpus += part.free_node_gpus
            if total.nodes:
                entries.append(
                    TierSwitch(
                        name, total.nodes, total.free_gpus, total.free_nodes, total.free_node_gpus
                    )
                )
        if entries:
            tiers.append(Tier(level, tuple(entries)))
    return tuple(tiers)


def fragmentation_report(
    snapshot: ClusterSnapshot,
    fabric: Fabric,
    partition: str | None = None,
    job_sizes: JobSizeDistribution | None = None,
) -> FragmentationReport:
    """Measure fragmentation of ``partition`` (else every node); see the module docstring.

    ``job_sizes`` defaults to the snapshot's queue.  An unknown partition
    raises :class:`UsageError`.
    """
    scope = scope_nodes(snapshot, partition)
    distribution = job_sizes if job_sizes is not None else queue_distribution(snapshot, partition)

    tallies: dict[str, _Tally] = {}
    by_attachment: dict[str, _Free] = {}
    free_histogram: Counter[int] = Counter()
    allocated = unavailable_gpus = 0
    unavailable_nodes = 0
    for node in scope:
        leaf = fabric.leaf_of(node.name) or NO_LEAF
        tally = tallies.get(leaf)
        if tally is None:
            tally = tallies[leaf] = _Tally()
        tally.nodes += 1
        tally.total_gpus += node.gpus_total
        allocated += min(node.gpus_alloc, node.gpus_total)
        attachment = fabric.attachment_of(node.name)
        here = None
        if attachment is not None:
            here = by_attachment.get(attachment)
            if here is None:
                here = by_attachment[attachment] = _Free()
            here.nodes += 1
        free = node.gpus_free
        if not node.available:
            tally.unavailable_nodes += 1
            unavailable_nodes += 1
            unavailable_gpus += free
            continue
        tally.free_gpus += free
        if free:
            free_histogram[free] += 1
        if here is not None:
            here.free_gpus += free
        if not _in_use(node):
            tally.free_nodes += 1
            if here is not None:
                here.free_nodes += 1
                here.free_node_gpus += free
        elif free:
            tally.partly_used_nodes += 1
            tally.stranded_gpus += free
        else:
            tally.busy_nodes += 1

    switches = tuple(
        tallies[name].freeze(name) for name in sorted(tallies, key=lambda n: (n == NO_LEAF, n))
    )
    total_gpus = sum(s.total_gpus for s in switches)
    free_gpus = sum(s.free_gpus for s in switches)
    stranded = sum(s.stranded_gpus for s in switches)
    fully_free = sum(s.free_nodes for s in switches)
    on_leaves = [s for s in switches if s.name != NO_LEAF]
    best_leaf = max(on_leaves, key=lambda s: s.free_nodes, default=None)
    best_leaf_nodes = best_leaf.free_nodes if best_leaf is not None else 0

    notes = []
    fgd, per_shape = fgd_unusable_share(free_histogram, distribution.shapes)
    if fgd is None:
        notes.append(f"fgd_unusable_share is null: no GPU job sizes in {distribution.source}")
    if any(s.name == NO_LEAF for s in switches):
        notes.append(f"nodes outside the fabric's leaf switches are listed under {NO_LEAF}")

    return FragmentationReport(
        taken_at=snapshot.taken_at,
        partition=partition,
        fabric_source=fabric.source or fabric.name,
        nodes=len(scope),
        total_gpus=total_gpus,
        allocated_gpus=allocated,
        unavailable_gpus=unavailable_gpus,
        free_gpus=free_gpus,
        stranded_gpus=stranded,
        fully_free_nodes=fully_free,
        partly_used_nodes=sum(s.partly_used_nodes for s in switches),
        busy_nodes=sum(s.busy_nodes for s in switches),
        unavailable_nodes=unavailable_nodes,
        largest_single_leaf_job_nodes=best_leaf_nodes,
        largest_job_nodes=fully_free,
        fragmentation_index=stranded / free_gpus if free_gpus else 0.0,
        fgd_unusable_share=fgd,
        job_sizes=distribution,
        shape_unusable_share=per_shape,
        largest_job_now=LargestJobNow(
            whole_nodes=fully_free,
            whole_nodes_on_one_leaf=best_leaf_nodes,
            leaf=best_leaf.name if best_leaf is not None and best_leaf_nodes else None,
            gpus_on_one_node=max(free_histogram, default=0),
        ),
        switches=switches,
        notes=tuple(notes),
        tiers=_tiers(fabric, by_attachment),
    )


__all__ = [
    "NO_LEAF",
    "QUEUE_SOURCE",
    "SCHEMA_VERSION",
    "FragmentationReport",
    "JobShape",
    "JobSizeDistribution",
    "LargestJobNow",
    "SwitchFragmentation",
    "Tier",
    "TierSwitch",
    "fgd_unusable_share",
    "fragmentation_report",
    "parse_job_sizes",
    "queue_distribution",
    "queue_shape",
    "scope_nodes",
    "shape_unusable_gpus",
]
