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
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, Node, NodeState

SCHEMA_VERSION = 2

#: Switch entry for nodes the fabric does not place under any leaf switch.
NO_LEAF = "(none)"

#: Value of ``--job-sizes`` that takes the distribution from the snapshot's queue.
QUEUE_SOURCE = "queue"

_IN_USE_STATES = frozenset({NodeState.MIXED, NodeState.ALLOCATED})
_JOB_SIZE_FIELDS = ("nodes", "gpus_per_node", "weight")


# -- job-size distribution -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JobShape:
    """A job size: ``nodes`` nodes with ``gpus_per_node`` GPUs each, drawn with ``weight``."""

    nodes: int
    gpus_per_node: int
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class JobSizeDistribution:
    """The job sizes the FGD measure averages over, and where they came from."""

    source: str
    shapes: tuple[JobShape, ...] = ()

    @property
    def total_weight(self) -> float:
        return sum(s.weight for s in self.shapes)


def _merge_shapes(shapes: Iterable[JobShape]) -> tuple[JobShape, ...]:
    """Sum the weights of identical shapes, so each shape is evaluated once."""
    weights: dict[tuple[int, int], float] = {}
    for s in shapes:
        key = (s.nodes, s.gpus_per_node)
        weights[key] = weights.get(key, 0.0) + s.weight
    return tuple(JobShape(n, d, w) for (n, d), w in sorted(weights.items()))


def queue_shape(job: Job) -> tuple[int, int] | None:
    """The job's (nodes, GPUs per node) in the queue's job-size distribution, or None.

    Pending and running GPU jobs count; one job at a time, so the planner can
    keep the distribution up to date as jobs come and go.
    """
    if not (job.is_pending or job.is_active):
        return None
    per_node = job.gpus_per_node
    if per_node <= 0 and job.gpu_indices:
        per_node = max(len(v) for v in job.gpu_indices.values())
    if per_node <= 0:
        return None
    return (max(job.node_count, len(job.nodes), 1), per_node)


def _job_in_partition(job: Job, partition: str | None) -> bool:
    # A pending job may list several partitions ("gpu,debug").
    return partition is None or partition in job.partition.split(",")


def queue_distribution(
    snapshot: ClusterSnapshot, partition: str | None = None
) -> JobSizeDistribution:
    """One weight per pending or running GPU job (of the partition, if given)."""
    shapes = []
    for job in snapshot.jobs.values():
        shape = queue_shape(job) if _job_in_partition(job, partition) else None
        if shape is not None:
            shapes.append(JobShape(shape[0], shape[1], 1.0))
    return JobSizeDistribution(QUEUE_SOURCE, _merge_shapes(shapes))


def _shape_from_record(record: Mapping[str, Any], where: str) -> JobShape:
    """Validate one ``{nodes, gpus_per_node, weight}`` record; ``where`` prefixes errors."""
    unknown = sorted(set(record) - set(_JOB_SIZE_FIELDS))
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
    values: dict[str, float] = {}
    for name in _JOB_SIZE_FIELDS:
        raw = record.get(name)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            if name == "weight":
                values[name] = 1.0
                continue
            raise UsageError(f"{where}: missing {name}")
        try:
            number = float(raw) if name == "weight" else int(str(raw).strip())
        except ValueError:
            kind = "a number" if name == "weight" else "a whole number"
            raise UsageError(f"{where}: {name} is not {kind}: {raw!r}") from None
        if isinstance(raw, bool) or not math.isfinite(number) or number <= 0:
            raise UsageError(f"{where}: {name} must be a positive number, got {raw!r}")
        values[name] = number
    return JobShape(int(values["nodes"]), int(values["gpus_per_node"]), values["weight"])


def _parse_csv(text: str, path: str) -> list[JobShape]:
    rows = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    shapes = []
    for row in rows:
        line = rows.line_num
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in row]
        if header is None:
            header = cells
            missing = {"nodes", "gpus_per_node"} - set(header)
            if missing or len(set(header)) != len(header):
                raise UsageError(
                    f"{path}:{line}: header must be nodes,gpus_per_node,weight, "
                    f"got {','.join(cells)}"
                )
            continue
        if len(cells) != len(header):
            raise UsageError(f"{path}:{line}: expected {len(header)} fields, got {len(cells)}")
        shapes.append(_shape_from_record(dict(zip(header, cells, strict=True)), f"{path}:{line}"))
    return shapes


def _parse_structured(text: str, path: str) -> list[JobShape]:
    """A JSON or YAML list of records; every error names the line it is on."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        # YAML rejects tab indentation that JSON allows; fall back to the JSON parser.
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(f"{path}{line}: cannot parse: {problem}") from None
        return _shapes_from_plain(data, path)
    if root is None:
        return []
    if not isinstance(root, yaml.SequenceNode):
        raise UsageError(f"{path}:{root.start_mark.line + 1}: expected a list of job sizes")
    shapes = []
    for item in root.value:
        where = f"{path}:{item.start_mark.line + 1}"
        if not isinstance(item, yaml.MappingNode):
            raise UsageError(f"{where}: expected an object with nodes, gpus_per_node, weight")
        record: dict[str, Any] = {}
        for key, value in item.value:
            if not isinstance(key, yaml.ScalarNode) or not isinstance(value, yaml.ScalarNode):
                raise UsageError(f"{where}: fields must be plain numbers")
            record[key.value] = value.value
        shapes.append(_shape_from_record(record, where))
    return shapes


def _shapes_from_plain(data: Any, path: str) -> list[JobShape]:
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a list of job sizes")
    shapes = []
    for index, item in enumerate(data, start=1):
        where = f"{path}: item {index}"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected an object with nodes, gpus_per_node, weight")
        shapes.append(_shape_from_record(item, where))
    return shapes


def parse_job_sizes(text: str, path: str) -> JobSizeDistribution:
    """A job-size distribution from a file's text: CSV with a header, or a JSON/YAML list.

    The format follows the file suffix (``.csv``, ``.json``, ``.yaml``/``.yml``),
    else the first character.  Bad content raises a one-line :class:`UsageError`
    naming ``path`` and the line.
    """
    lower = path.lower()
    stripped = text.lstrip()
    structured = lower.endswith((".json", ".yaml", ".yml")) or (
        not lower.endswith(".csv") and stripped[:1] in ("[", "-", "{")
    )
    shapes = _parse_structured(text, path) if structured else _parse_csv(text, path)
    return JobSizeDistribution(path, _merge_shapes(shapes))


# -- report --------------------------------------------------------------------------------------
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


def shape_unusable_gpus(free_histogram: Mapping[int, int], shape: JobShape) -> int:
    """Free GPUs a job of this shape could not use, from ``{free GPUs: node count}``."""
    total_free = sum(f * n for f, n in free_histogram.items())
    fitting_nodes = sum(n for f, n in free_histogram.items() if f >= shape.gpus_per_node)
    if fitting_nodes < shape.nodes:
        return total_free
    return sum(f * n for f, n in free_histogram.items() if f < shape.gpus_per_node)


def fgd_unusable_share(
    free_histogram: Mapping[int, int], shapes: Sequence[JobShape]
) -> tuple[float | None, tuple[float, ...]]:
    """The weighted mean share of free GPUs each shape cannot use, and each shape's own share."""
    total_free = sum(f * n for f, n in free_histogram.items())
    if total_free == 0:
        per_shape = tuple(0.0 for _ in shapes)
    else:
        per_shape = tuple(shape_unusable_gpus(free_histogram, s) / total_free for s in shapes)
    total_weight = sum(s.weight for s in shapes)
    if not shapes or total_weight <= 0:
        return None, per_shape
    mean = sum(s.weight * share for s, share in zip(shapes, per_shape, strict=True)) / total_weight
    return mean, per_shape


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
