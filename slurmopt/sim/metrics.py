"""What a simulation measured: per-job outcomes and the figures summed up from them.

Definitions (``docs/simulator.md`` has the table):

* JCT: end - submit; queueing delay: start - submit;
* slowdown: JCT / max(trace duration, 10 s) (bounded, so 1-second jobs do not dominate);
* GPU allocation ratio: allocated GPU-seconds / (total GPUs x simulated span),
  and the same only over the time some job was waiting (``..._when_queued``):
  capacity left idle while jobs wait is what fragmentation and blocking cost;
* stranded GPUs: free GPUs on partly used nodes, time-weighted; and the same
  only over the time some job was waiting (``..._when_queued``): with an
  empty queue a free GPU is spare capacity, while jobs wait it is lost;
* where stranded GPUs sit: the share of stranded GPU-time with nobody
  waiting (``stranded_share_queue_empty``), and, while jobs wait, the
  stranded GPUs on nodes with room for the smallest per-node ask of a
  waiting job (``avg_stranded_gpus_usable_when_queued``): the rest are too
  few on their node for any job that waits;
* stranded-GPU floor (``avg_stranded_gpus_floor``): the fewest GPUs any
  packing of the jobs running at each instant could strand (``-S mod G``
  for ``S`` GPUs of jobs smaller than a ``G``-GPU node), time-weighted: how
  much of the stranding placement could still remove;
* FGD unusable share: ``slurmopt.policy.fragmentation.fgd_unusable_share`` of
  the free GPUs, over the trace's own job sizes, time-weighted while any GPU is free;
* leaves spanned and wait of multi-node jobs; makespan: last end - first submit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slurmopt.sim.traces import TraceJob

SLOWDOWN_FLOOR_S = 10.0
SERIES_POINTS = 100


@dataclass
class JobOutcome:
    """One job's fate in a run; ``start``/``end`` stay None for a job that never started."""

    job: TraceJob
    start: float | None = None
    end: float | None = None
    leaves: int = 0
    nodes: tuple[str, ...] = ()
    stretch: float = 1.0
    #: Nodes asked / nodes run on (above 1: an elastic job started smaller).
    scale: float = 1.0
    timed_out: bool = False
    #: Times the job was checkpointed and requeued, and the GPU-seconds that cost it.
    preempted: int = 0
    lost_gpu_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster right after the events of one instant."""

    at: float
    allocated_gpus: int
    stranded_gpus: int
    pending_jobs: int
    fgd_unusable_share: float | None = None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[rank]


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class SimResult:
    """The figures of one run (``to_json`` is the ``policies`` entry of ``simulate --json``)."""

    policy: str
    metrics: dict[str, Any]
    series: list[dict[str, Any]]
    outcomes: tuple[JobOutcome, ...]

    @classmethod
    def build(
        cls,
        *,
        policy: str,
        outcomes: list[JobOutcome],
        total_gpus: int,
        allocated_integral: float,
        stranded_integral: float,
        fgd_integral: float,
        fgd_time: float,
        queued_time: float,
        allocated_queued_integral: float,
        span: float,
        stranded_queued_integral: float = 0.0,
        stranded_usable_queued_integral: float = 0.0,
        stranded_floor_integral: float = 0.0,
        stranded_floor_queued_integral: float = 0.0,
        samples: Sequence[Sample],
        too_big: int,
        passes: int,
        events: int,
        wall_s: float,
    ) -> SimResult:
        done = [o for o in outcomes if o.start is not None and o.end is not None]
        jct = [o.end - o.job.submit_s for o in done if o.end is not None]
        wait = [o.start - o.job.submit_s for o in done if o.start is not None]
        slowdown = [
            (o.end - o.job.submit_s) / max(o.job.duration_s, SLOWDOWN_FLOOR_S)
            for o in done
            if o.end is not None
        ]
        multi = [o for o in done if o.job.nodes > 1]
        multi_wait = [o.start - o.job.submit_s for o in multi if o.start is not None]
        first = min((o.job.submit_s for o in outcomes), default=0.0)
        last = max((o.end for o in done if o.end is not None), default=first)
        capacity = total_gpus * span
        metrics: dict[str, Any] = {
            "jobs": len(outcomes),
            "finished": len(done),
            "never_started": len(outcomes) - len(done),
            "skipped_too_big": too_big,
            "timed_out": sum(o.timed_out for o in done),
            "avg_jct_s": _round(_mean(jct)),
            "median_jct_s": _round(statistics.median(jct) if jct else None),
            "p95_jct_s": _round(_percentile(jct, 95)),
            "avg_queue_delay_s": _round(_mean(wait)),
            "median_queue_delay_s": _round(statistics.median(wait) if wait else None),
            "p95_queue_delay_s": _round(_percentile(wait, 95)),
            "avg_slowdown": _round(_mean(slowdown), 3),
            "gpu_allocation_ratio": _round(allocated_integral / capacity if capacity else None, 4),
            "gpu_allocation_ratio_when_queued": _round(
                allocated_queued_integral / (total_gpus * queued_time) if queued_time else None, 4
            ),
            "queued_time_share": _round(queued_time / span if span else None, 4),
            "avg_idle_gpus_when_queued": _round(
                total_gpus - allocated_queued_integral / queued_time if queued_time else None
            ),
            "idle_gpu_h_when_queued": _round(
                (total_gpus * queued_time - allocated_queued_integral) / 3600
            ),
            "avg_stranded_gpus": _round(stranded_integral / span if span else None),
            "avg_stranded_gpus_when_queued": _round(
                stranded_queued_integral / queued_time if queued_time else None
            ),
            "avg_stranded_gpus_usable_when_queued": _round(
                stranded_usable_queued_integral / queued_time if queued_time else None
            ),
            "stranded_share_queue_empty": _round(
                (stranded_integral - stranded_queued_integral) / stranded_integral
                if stranded_integral
                else None,
                4,
            ),
            "avg_stranded_gpus_floor": _round(stranded_floor_integral / span if span else None),
            "avg_stranded_gpus_floor_when_queued": _round(
                stranded_floor_queued_integral / queued_time if queued_time else None
            ),
            "avg_fgd_unusable_share": _round(fgd_integral / fgd_time if fgd_time else None, 4),
            "preemptions": sum(o.preempted for o in outcomes),
            "preemption_lost_gpu_h": _round(sum(o.lost_gpu_s for o in outcomes) / 3600),
            "avg_queue_delay_not_preemptible_s": _round(
                _mean([w for o, w in zip(done, wait, strict=True) if not o.job.preemptible])
            ),
            "elastic_smaller_starts": sum(o.scale > 1 for o in done),
            "multinode_jobs": len(multi),
            "avg_wait_multinode_s": _round(_mean(multi_wait)),
            "max_wait_multinode_s": _round(max(multi_wait, default=None)),
            "avg_jct_multinode_s": _round(
                _mean([o.end - o.job.submit_s for o in multi if o.end is not None])
            ),
            "avg_leaves_spanned_multinode": _round(_mean([float(o.leaves) for o in multi]), 3),
            "avg_stretch_multinode": _round(_mean([o.stretch for o in multi]), 4),
            "makespan_s": round(last - first, 1),
            "scheduler_passes": passes,
            "events": events,
            "wall_s": round(wall_s, 3),
            "events_per_s": round(events / wall_s, 1) if wall_s > 0 else None,
        }
        return cls(policy, metrics, _downsample(samples, total_gpus), tuple(outcomes))

    def to_json(self, series: bool = True) -> dict[str, Any]:
        out = dict(self.metrics)
        if series:
            out["over_time"] = self.series
        return out


def _downsample(samples: Sequence[Sample], total_gpus: int) -> list[dict[str, Any]]:
    """At most :data:`SERIES_POINTS` samples, evenly spaced in time (the last one at or before)."""
    if not samples:
        return []
    first, last = samples[0].at, samples[-1].at
    step = (last - first) / (SERIES_POINTS - 1) if last > first else 1.0
    out = []
    i = 0
    for p in range(SERIES_POINTS if last > first else 1):
        t = first + p * step
        while i + 1 < len(samples) and samples[i + 1].at <= t:
            i += 1
        s = samples[i]
        out.append(
            {
                "t_s": round(t, 1),
                "gpu_allocation_ratio": round(s.allocated_gpus / total_gpus, 4),
                "stranded_gpus": s.stranded_gpus,
                "pending_jobs": s.pending_jobs,
                "fgd_unusable_share": _round(s.fgd_unusable_share, 4),
            }
        )
    return out
