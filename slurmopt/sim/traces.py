"""Job traces for the simulator: one reader per public or Slurm format, one job type out.

Every reader returns a :class:`Trace` of :class:`TraceJob` sorted by submit
time, with submit times shifted so the first job arrives at 0.  Two rules
turn the traces' GPU counts into Slurm requests, because none of the
public traces records nodes:

* **gangs**: a job asking for more GPUs than one node has (8 by default)
  becomes a gang of whole nodes, ``ceil(gpus / gpus_per_node)`` nodes with
  every GPU each; a job that fits one node asks for its GPUs on one node;
* **time limits**: the trace's own limit where it has one, else the
  duration rounded up to the next of :data:`LIMIT_LADDER_S` (the limits
  users type), and whole days beyond 30 days.

A bad file raises :class:`TraceError` naming the file and line (for JSON,
the job's index).  The readers themselves live in
:mod:`slurmopt.sim.trace_formats`; this module holds the job types, the
registry of formats and :func:`read_trace`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurmopt.durations import slurm_duration_s
from slurmopt.sim.trace_formats import (
    MAX_COUNT,
    MAX_SECONDS,
    MAX_SYNTHETIC_JOBS,
    SYNTHETIC_DEFAULTS,
    RawJob,
    Tally,
    TraceError,
    read_itp,
    read_openb,
    read_philly,
    read_plain_csv,
    read_sacct,
    read_sacct_json,
    read_synthetic,
    read_text,
    read_tiresias,
)

#: Time limits users pick, in seconds: 30 min, 1, 2, 4, 8, 12 h, 1, 2, 3, 7, 14, 30 days.
LIMIT_LADDER_S = (
    1800,
    3600,
    2 * 3600,
    4 * 3600,
    8 * 3600,
    12 * 3600,
    86400,
    2 * 86400,
    3 * 86400,
    7 * 86400,
    14 * 86400,
    30 * 86400,
)

DEFAULT_GPUS_PER_NODE = 8

FORMATS = ("philly-sia", "itp", "tiresias", "openb", "sacct", "sacct-json", "csv", "synthetic")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job as the simulator submits it.

    ``duration_s`` is the run time at the best placement (the comm model
    may stretch it); ``gpus_asked`` is the trace's own GPU count before the
    gang rule rounded it to whole nodes.
    """

    job_id: int
    submit_s: float
    duration_s: float
    nodes: int
    gpus_per_node: int
    time_limit_s: int
    gpus_asked: int
    priority: int = 0
    preemptible: bool = False
    #: Elastic jobs: the fewest nodes they run on (``nodes`` is the most); None: rigid.
    min_nodes: int | None = None
    #: Asks for an NVLink domain, as ``#SOPT --nvlink-domain[=SEGMENT]`` (0: all its nodes in one).
    domain: int | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Trace:
    """Jobs of one trace file, sorted by submit time, with what the readers had to assume."""

    path: str
    format: str
    jobs: tuple[TraceJob, ...]
    notes: tuple[str, ...] = ()
    skipped: Mapping[str, int] = field(default_factory=dict)

    def offered_load(self, total_gpus: int, arrival_scale: float = 1.0) -> float | None:
        """GPU-seconds the jobs ask for over the capacity of the arrival window.

        The window runs from the first to the last submit (times multiplied
        by ``arrival_scale``); every job counts whole (GPUs x duration), as
        the work it brings.  A window whose load is 1.0 brings exactly what
        the cluster can do while the jobs arrive; above 1 the queue grows
        for the whole window, below 1 the cluster has room to spare.
        """
        if len(self.jobs) < 2 or total_gpus <= 0 or arrival_scale <= 0:
            return None
        span = (self.jobs[-1].submit_s - self.jobs[0].submit_s) * arrival_scale
        if span <= 0:
            return None
        return self.work_gpu_s() / (span * total_gpus)

    def work_gpu_s(self) -> float:
        """GPU-seconds of all jobs at their trace durations."""
        return sum(j.gpus * j.duration_s for j in self.jobs)


def time_limit_for(duration_s: float) -> int:
    """The limit a user would have typed for a job of this length; see the module docstring."""
    for limit in LIMIT_LADDER_S:
        if duration_s <= limit:
            return limit
    return math.ceil(duration_s / 86400) * 86400


_READERS: dict[str, Callable[[str, str, Tally], list[RawJob]]] = {
    "philly-sia": read_philly,
    "itp": read_itp,
    "tiresias": read_tiresias,
    "openb": read_openb,
    "sacct": read_sacct,
    "sacct-json": read_sacct_json,
    "csv": read_plain_csv,
    "synthetic": read_synthetic,
}


def read_trace(
    path: str | Path,
    fmt: str,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    limit_jobs: int | None = None,
    skip_jobs: int = 0,
) -> Trace:
    """Read ``path`` as ``fmt`` (see :data:`FORMATS`).

    Of the jobs sorted by submit time, the first ``skip_jobs`` are dropped and
    the next ``limit_jobs`` kept (all when None): a window of the trace, its
    clock starting at its first submit.
    """
    name = str(path)
    reader = _READERS.get(fmt)
    if reader is None:
        raise TraceError(f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)})", name)
    if gpus_per_node <= 0:
        raise TraceError(f"gpus per node must be positive, got {gpus_per_node}", name)
    tally = Tally()
    raws = reader(name if fmt == "synthetic" else read_text(name), name, tally)
    kept = []
    for raw in raws:
        if raw.gpus <= 0:
            tally.skip("no GPUs")
            continue
        kept.append(raw)
    kept.sort(key=lambda r: r.submit_s)  # stable: ties keep file order
    if skip_jobs > 0:
        tally.notes.append(f"the first {skip_jobs} jobs by submit skipped (a later window)")
        kept = kept[skip_jobs:]
    if limit_jobs is not None:
        kept = kept[: max(limit_jobs, 0)]
    origin = kept[0].submit_s if kept else 0.0
    jobs = []
    gangs = rounded = 0
    for i, raw in enumerate(kept, start=1):
        nodes, per_node = _shape(raw, gpus_per_node)
        if nodes > 1 and raw.nodes is None:
            gangs += 1
            rounded += nodes * per_node != raw.gpus
        duration = max(raw.duration_s, 1.0)
        low = raw.min_nodes or (max(1, nodes // 2) if raw.elastic else None)
        if low is not None and low >= nodes:
            low = None  # nothing to shrink: a rigid job
        # An elastic job's limit is its budget on its fewest nodes.
        budget = duration * nodes / low if low else duration
        limit = raw.time_limit_s if raw.time_limit_s else time_limit_for(budget)
        jobs.append(
            TraceJob(
                job_id=i,
                submit_s=raw.submit_s - origin,
                duration_s=duration,
                nodes=nodes,
                gpus_per_node=per_node,
                time_limit_s=limit,
                gpus_asked=raw.gpus,
                priority=raw.priority,
                preemptible=raw.preemptible,
                min_nodes=low,
            )
        )
    notes = list(tally.notes)
    if gangs:
        notes.append(
            f"{gangs} jobs asking for more than {gpus_per_node} GPUs became gangs of whole "
            f"{gpus_per_node}-GPU nodes ({rounded} of them rounded up to whole nodes)"
        )
    for why, count in sorted(tally.skipped.items()):
        notes.append(f"{count} jobs skipped: {why}")
    return Trace(name, fmt, tuple(jobs), tuple(notes), dict(tally.skipped))


def _shape(raw: RawJob, gpus_per_node: int) -> tuple[int, int]:
    """Nodes and GPUs per node: the trace's own split, else one node or a gang of whole nodes."""
    if raw.nodes is not None and raw.gpus_per_node is not None:
        return raw.nodes, raw.gpus_per_node
    if raw.gpus <= gpus_per_node:
        return 1, raw.gpus
    return math.ceil(raw.gpus / gpus_per_node), gpus_per_node


def scale_load(trace: Trace, total_gpus: int, load: float) -> tuple[Trace, float]:
    """Stretch or squeeze inter-arrival times so the offered load becomes ``load``.

    Returns the new trace and the factor applied to every submit time.
    Durations are untouched: only the arrival rate changes.  The offered
    load (:meth:`Trace.offered_load`) is inversely proportional to the
    factor, so the factor is the native load over the one asked for.
    """
    if load <= 0 or not math.isfinite(load):
        raise TraceError(f"load must be a positive number, got {load}", trace.path)
    native = trace.offered_load(total_gpus)
    if native is None:
        raise TraceError("cannot scale the load of a trace with one submit instant", trace.path)
    factor = native / load
    jobs = tuple(replace(j, submit_s=j.submit_s * factor) for j in trace.jobs)
    return replace(trace, jobs=jobs), factor


__all__ = [
    "DEFAULT_GPUS_PER_NODE",
    "MAX_COUNT",
    "MAX_SECONDS",
    "MAX_SYNTHETIC_JOBS",
    "SYNTHETIC_DEFAULTS",
    "FORMATS",
    "LIMIT_LADDER_S",
    "Trace",
    "TraceError",
    "TraceJob",
    "read_trace",
    "scale_load",
    "slurm_duration_s",
    "time_limit_for",
]
