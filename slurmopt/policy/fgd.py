"""The FGD measure and the job-size distribution it averages over.

After Weng et al., "Beware of Fragmentation" (USENIX ATC'23): the expected
share of free GPUs that a job drawn from a job-size distribution could not
use.  For a job of ``k`` nodes with ``d`` GPUs each, the free GPUs on nodes
with fewer than ``d`` free are unusable, and all free GPUs are unusable when
fewer than ``k`` nodes have ``d`` free.  The measure runs over a histogram of
free-GPU counts, not over node pairs.

The distribution comes from the snapshot's queue (:func:`queue_distribution`,
one job at a time through :func:`queue_shape`) or from a file's text
(:func:`parse_job_sizes`: CSV, JSON or YAML).  Pure: no file reads.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmopt.errors import UsageError
from slurmopt.model import ClusterSnapshot, Job, JobState

#: Value of ``--job-sizes`` that takes the distribution from the snapshot's queue.
QUEUE_SOURCE = "queue"

_JOB_SIZE_FIELDS = ("nodes", "gpus_per_node", "weight")


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
    if not (job.state is JobState.PENDING or job.is_active):
        return None
    per_node = job.gpus_per_node
    if per_node <= 0:
        if not job.gpu_indices:
            return None
        per_node = max(len(v) for v in job.gpu_indices.values())
        if per_node <= 0:
            return None
    # The planner's cache asks this of every job of a fresh snapshot: plain comparisons.
    nodes = job.node_count
    listed = len(job.nodes)
    if listed > nodes:
        nodes = listed
    return (nodes if nodes > 1 else 1, per_node)


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
    import yaml  # only a job-size file needs the parser: the planner's import stays light

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
