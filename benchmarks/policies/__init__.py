"""The standard policy comparison: slurmopt against Slurm's schedulers on real traces.

Replays windows of three public traces (Philly, one Microsoft ITP cluster,
Tiresias) at offered loads 0.8, 1.0 and 1.2 under ``slurm-fifo``,
``slurm-backfill-tree`` and ``slurmopt``, with the communication penalty on
and again off (the topology bound: with the penalty off placement costs
nothing, so the gap between the two runs is what badly placed gangs cost),
measures the levers one at a time (``LEVERS``: variants of slurmopt; and
preemption on a synthetic workload, since no public trace marks jobs
preemptible),
then fills the cluster of the openb trace in arrival-fill mode (best-fit
against slurmopt, next to the FGD paper's published figures).  Writes
``docs/benchmarks.md`` and its plots; the document is generated, never
edited by hand.

Cluster size rule (per trace, from its window): leaves of 8 nodes of 8 GPUs;
enough nodes for the window's native average GPU demand (so load 1.0 is the
trace's own arrival rate give or take) and for 4 copies of its largest job,
at least 2 leaves when the window has multi-node jobs, rounded up to whole
leaves.

    nice -n 10 python -m benchmarks.policies              # full run, writes the doc
    python -m benchmarks.policies --limit-scale 0.1 --out /tmp/b   # a quick look
    python -m benchmarks.policies --traces DIR            # traces elsewhere
    python -m benchmarks.policies --fabric clos:6:12:12:2 --out /tmp/b   # one fabric for all

``--fabric`` (a ``slurmopt simulate --fabric`` spec or a topology file)
replays every trace window on that fabric instead of the sized leaf-spine;
load scaling then works from that fabric's GPUs.

The package: ``settings`` (traces, loads, policies, levers, metrics),
``runs`` (one case), ``causes`` (ratios, targets, the cause of each miss),
``render`` (the document), ``cli`` (the command).
"""

from __future__ import annotations

from benchmarks.policies.causes import (
    across_windows,
    compare,
    lever_rows,
    meets,
    ratio,
    shortfall_reason,
    worst_gang,
)
from benchmarks.policies.cli import main
from benchmarks.policies.render import _summary, render
from benchmarks.policies.runs import (
    Case,
    FillCase,
    fabric_spec,
    load_window,
    published_curves,
    run_case,
    run_fill,
    size_cluster,
)
from benchmarks.policies.settings import LARGEST_JOB_COPIES, METRICS, NODES_PER_LEAF, _windows

__all__ = [
    "LARGEST_JOB_COPIES",
    "METRICS",
    "NODES_PER_LEAF",
    "Case",
    "FillCase",
    "_summary",
    "_windows",
    "across_windows",
    "compare",
    "fabric_spec",
    "lever_rows",
    "load_window",
    "main",
    "meets",
    "published_curves",
    "ratio",
    "render",
    "run_case",
    "run_fill",
    "shortfall_reason",
    "size_cluster",
    "worst_gang",
]
