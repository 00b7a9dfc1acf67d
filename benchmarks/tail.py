"""Which jobs make one benchmark cell's p95 queueing delay, and which jobs it turns on.

A p95 ratio over a window of 2,000 jobs is decided by its 100 longest waits,
often all from one burst, so one decision can move it.  This replays one
window of ``benchmarks.policies`` (its ``TRACES``) on one fabric at one load
under a baseline and a contender and prints, per policy, the p95 and the
tail behind it; then the jobs whose wait differs most between the two.
``--without JOB,JOB`` replays the cell with those jobs left out (the rest
arrive at the same times), to test whether they are the cause.

    python -m benchmarks.tail --window "philly #11" --fabric clos:4:2:8:2 --load 1.0
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.policies.runs import Case, case_inputs
from benchmarks.policies.settings import DEFAULT_TRACES, GPUS_PER_NODE, TRACES, check_traces

#: Jobs listed by how much longer or shorter they waited under the contender.
SHOWN = 5


@dataclass(frozen=True)
class Wait:
    """One started job's queueing delay and what it asked for."""

    job_id: int
    submit_s: float
    wait_s: float
    gpus: int
    nodes: int


def tail(waits: Sequence[Wait], p95: float) -> list[str]:
    """The jobs at or above ``p95`` (the run's own figure): how many, when, how large."""
    jobs = [w for w in waits if w.wait_s >= p95]
    if not jobs:
        return ["  tail: none"]
    sizes = sorted({w.gpus for w in jobs})
    first, last = min(w.submit_s for w in jobs), max(w.submit_s for w in jobs)
    gpu_s = sum(w.wait_s * w.gpus for w in waits)
    return [
        f"  tail: {len(jobs)} jobs waiting {p95:.0f}-{max(w.wait_s for w in jobs):.0f} s, "
        f"submitted {first:.0f}-{last:.0f} s ({last - first:.0f} s), GPUs {sizes}",
        f"  all jobs: {sum(w.wait_s > 0 for w in waits)} waited, "
        f"{sum(w.wait_s for w in waits):.0f} s in all, {gpu_s:.0f} GPU-s",
    ]


def differences(base: Sequence[Wait], cont: Sequence[Wait], shown: int = SHOWN) -> list[str]:
    """Jobs waiting longer and shorter under the contender, and those that differ most."""
    theirs = {w.job_id: w for w in base}
    pairs = [(w, w.wait_s - theirs[w.job_id].wait_s) for w in cont if w.job_id in theirs]
    longer = [(w, d) for w, d in pairs if d >= 1]
    shorter = [(w, d) for w, d in pairs if d <= -1]
    out = []
    for name, group in (("longer", longer), ("shorter", shorter)):
        if group:
            med = statistics.median(abs(d) for _, d in group)
            out.append(f"  {len(group)} jobs wait {name} under the contender (median {med:.0f} s)")
    for w, d in sorted(pairs, key=lambda p: -abs(p[1]))[:shown]:
        out.append(
            f"    job {w.job_id} ({w.gpus} GPU, {w.nodes} node), submitted {w.submit_s:.0f}, "
            f"waits {theirs[w.job_id].wait_s:.0f} -> {w.wait_s:.0f} s ({d:+.0f})"
        )
    return out


def _replay(
    label: str, fabric_spec: str, load: float, policy: str, without: Collection[int], root: Path
) -> tuple[float, list[Wait]]:
    from slurmopt.sim import CommModel, scale_load, simulate

    spec = next(t for t in TRACES if t.label == label)
    case = Case(
        label, str(root / spec.relpath), spec.fmt, spec.limit_jobs, fabric_spec, load, True,
        policy, spec.skip_jobs,
    )  # fmt: skip
    # The load is scaled with every job in, so leaving one out moves no other arrival.
    trace, fabric, total = case_inputs(case)
    scaled, _ = scale_load(trace, total, load)
    scaled = replace(scaled, jobs=tuple(j for j in scaled.jobs if j.job_id not in without))
    result = simulate(scaled, fabric, policy, CommModel(True), GPUS_PER_NODE)
    waits = [
        Wait(o.job.job_id, o.job.submit_s, o.start - o.job.submit_s, o.job.gpus, o.job.nodes)
        for o in result.outcomes
        if o.start is not None
    ]
    return float(result.metrics["p95_queue_delay_s"] or 0.0), waits


def report(runs: Mapping[str, tuple[float, list[Wait]]], baseline: str) -> list[str]:
    """Per policy its p95 and tail; for each other policy its differences from ``baseline``."""
    out = []
    base_p95, base_waits = runs[baseline]
    for policy, (p95, waits) in runs.items():
        ratio = f", ratio {p95 / base_p95:.3f}" if policy != baseline and base_p95 > 0 else ""
        out += [f"{policy}: p95 wait {p95:.0f} s{ratio}", *tail(waits, p95)]
        if policy != baseline:
            out += differences(base_waits, waits)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="traces directory")
    parser.add_argument("--window", required=True, help="a window label of benchmarks.policies")
    parser.add_argument("--fabric", required=True, help="a `slurmopt simulate --fabric` spec")
    parser.add_argument("--load", type=float, required=True)
    parser.add_argument(
        "--policy",
        action="append",
        help="baseline first, then contenders (default slurm-backfill-tree, slurmopt)",
    )
    parser.add_argument(
        "--without", default="", help="job ids to leave out, comma-separated (JOB,JOB)"
    )
    args = parser.parse_args(argv)
    if args.window not in {t.label for t in TRACES}:
        parser.error(f"no window named {args.window!r}; known: {[t.label for t in TRACES]}")
    policies = args.policy or ["slurm-backfill-tree", "slurmopt"]
    without = {int(j) for j in args.without.split(",") if j.strip()}
    root = args.traces.resolve()
    check_traces(root, [t.relpath for t in TRACES if t.label == args.window])
    runs = {p: _replay(args.window, args.fabric, args.load, p, without, root) for p in policies}
    print("\n".join(report(runs, policies[0])))


if __name__ == "__main__":
    main()
