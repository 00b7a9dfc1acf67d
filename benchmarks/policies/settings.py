"""What the policy benchmark runs: traces and their windows, loads, policies, levers, metrics."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmopt.policy.knobs import lever_variants

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TRACES = REPO.parent / "shared" / "traces"
DEFAULT_OUT = REPO / "docs"
LOADS = (0.8, 1.0, 1.2)
POLICIES = ("slurm-fifo", "slurm-backfill-tree", "slurmopt")
#: The policies run again with the penalty off (the bound needs only the two contenders).
BOUND_POLICIES = ("slurm-backfill-tree", "slurmopt")
#: Levers measured one at a time (variants of slurmopt, penalty on), beside the default.
LEVERS = (
    *lever_variants(),  # the planner knobs' own (slurmopt.policy.knobs.KNOBS)
    ("slurmopt:runtime=history", "run times estimated from ended jobs alike"),
    ("slurmopt:runtime=oracle", "true run times (the bound of any prediction)"),
)
#: Checkpoint-acknowledged preemption needs jobs marked preemptible, which no public trace has:
#: a seeded synthetic workload with half of them preemptible, on a fixed fabric.
PREEMPT_TRACE = "jobs=2000,preemptible=0.5,seed=7"
PREEMPT_FABRIC = "fat-tree:64:8"
PREEMPT_POLICIES = ("slurm-backfill-tree", "slurmopt:preempt=off", "slurmopt")
PREEMPT_METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_queue_delay_not_preemptible_s",
    "preemptions",
    "preemption_lost_gpu_h",
    "gpu_allocation_ratio_when_queued",
)
#: Elastic starts need jobs marked elastic, which no public trace has either: the same
#: workload with half the multi-node jobs elastic (from half their nodes to all).
ELASTIC_TRACE = "jobs=2000,elastic=0.5,seed=7"
ELASTIC_POLICIES = ("slurm-backfill-tree", "slurmopt:elastic=off", "slurmopt")
ELASTIC_METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_wait_multinode_s",
    "elastic_smaller_starts",
    "gpu_allocation_ratio_when_queued",
    "avg_stranded_gpus",
    "avg_stranded_gpus_floor",
)
LEVER_METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_stranded_gpus",
    "avg_stranded_gpus_when_queued",
    "gpu_allocation_ratio_when_queued",
    "avg_wait_multinode_s",
    "avg_jct_multinode_s",
)
GPUS_PER_NODE = 8
NODES_PER_LEAF = 8
#: The cluster holds at least this many copies of the window's largest job.
LARGEST_JOB_COPIES = 4
FILL_SEEDS = (42,)
FILL_POLICIES = ("best-fit", "slurmopt")
#: Per-metric targets for slurmopt / slurm-backfill-tree (docs: the issue's goals).
METRICS = (
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_slowdown",
    "gpu_allocation_ratio",
    "gpu_allocation_ratio_when_queued",
    "avg_stranded_gpus",
    "avg_stranded_gpus_when_queued",
    "avg_stranded_gpus_usable_when_queued",
    "avg_wait_multinode_s",
    "avg_jct_multinode_s",
    "avg_leaves_spanned_multinode",
)
#: Shown beside the targets in the across-windows table, as geometric means only.
ACROSS_EXTRA = ("avg_stranded_gpus_usable_when_queued",)
#: metric -> (comparison, bound): slurmopt/backfill must be <= or >= bound to count as better.
TARGETS: dict[str, tuple[str, float]] = {
    "avg_jct_s": ("<=", 1.02),
    "p95_queue_delay_s": ("<=", 1.02),
    "avg_slowdown": ("<=", 1.02),
    "gpu_allocation_ratio_when_queued": (">", 1.0),
    "avg_stranded_gpus": ("<=", 0.5),
    "avg_wait_multinode_s": ("<", 1.0),
    "avg_leaves_spanned_multinode": ("<=", 1.0),
}
#: Ratios this close to 1 are ties, not shortfalls with a cause.
TIE = 0.005
#: Below this p95 queueing delay under backfill (s) the load is too low for jobs to queue.
NO_QUEUE_S = 60.0


@dataclass(frozen=True)
class TraceSpec:
    """One window of a trace: its label, reader format, file, and which jobs by submit."""

    label: str
    fmt: str
    relpath: str
    limit_jobs: int | None
    skip_jobs: int = 0
    #: The trace the window is from (windows of one trace are summed up together).
    family: str = ""

    @property
    def trace(self) -> str:
        return self.family or self.label

    def window_text(self, limit: int | None) -> str:
        if limit is None:
            return "whole file"
        first = self.skip_jobs + 1
        return f"jobs {first:,}-{self.skip_jobs + limit:,} by submit"


def _windows(
    label: str, fmt: str, relpath: str, size: int, skips: Sequence[int]
) -> list[TraceSpec]:
    """Windows of ``size`` jobs after skipping each of ``skips``; the first keeps the bare label."""
    return [
        TraceSpec(
            label if not skip else f"{label} #{skip // size + 1}", fmt, relpath, size, skip, label
        )
        for skip in skips
    ]


#: A single window is one draw of a chaotic system: placement changes cascade, and a policy
#: can look better or worse by 5-10% on one window for no reason it would keep on another.
#: Three windows per trace far apart (levers run on the first only).
TRACES = (
    *_windows("philly", "philly-sia", "philly-sia/philly.csv", 2000, (0, 20000, 40000)),
    *_windows("itp-cluster04", "itp", "itp-microsoft/cluster04.csv", 2000, (0, 4000, 8000)),
    TraceSpec("tiresias", "tiresias", "tiresias/60_job.csv", None),
)
OPENB_PODS = "openb-alibaba-gpu-v2023/openb_pod_list_default.csv"
OPENB_NODES = "openb-alibaba-gpu-v2023/openb_node_list_gpu_node.csv"
FGD_RESULTS = "fgd-results/analysis_allo_discrete.csv"
OPENB_WORKLOAD = "openb_pod_list_default"


class MissingTraces(SystemExit):
    """The traces directory or one of its files is not there (one line, exit 66)."""

    def __init__(self, what: str) -> None:
        print(f"benchmarks.policies: {what} (use --traces DIR)", file=sys.stderr)
        super().__init__(66)


def check_traces(root: Path, relpaths: Iterable[str]) -> None:
    """Fail with one line before any run when a trace file is missing."""
    if not root.is_dir():
        raise MissingTraces(f"no traces directory at {root}")
    for rel in relpaths:
        if not (root / rel).is_file():
            raise MissingTraces(f"missing trace file {root / rel}")
