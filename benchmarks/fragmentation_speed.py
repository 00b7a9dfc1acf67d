"""How fast ``fragmentation_report`` is on large synthetic clusters, and how much memory it needs.

For each size (512 and 4,096 nodes of 8 GPUs by default), a fresh Python
process generates a fat tree (16 nodes per leaf, 16 leaves per pod), fills a
snapshot with a seeded mix of running jobs (3,000 at 4,096 nodes, scaled by
node count), and times (a) building the fabric and (b) producing the report,
each the median of several repetitions.  Peak RSS is the child's own
``ru_maxrss``, so sizes never share a heap.

    python -m benchmarks.fragmentation_speed           # table, then one JSON object
    python -m benchmarks.fragmentation_speed --json    # the JSON object only

Targets at 4,096 nodes: report under 1 s, peak RSS under 500 MB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from benchmarks.synthetic import (
    GPUS_PER_NODE,
    LEAVES_PER_POD,
    NODES_PER_LEAF,
    child_json,
    peak_rss_mb,
    synthetic_snapshot,
)

JOBS_AT_4096 = 3000
TARGET_SECONDS = 1.0
TARGET_MB = 500.0


def _median_seconds(fn: Any, reps: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def run_child(num_nodes: int, reps: int, seed: int) -> dict[str, Any]:
    """One size, in this process: time the fabric and the report, then read peak RSS."""
    from slurmopt.fabric.generators import fat_tree
    from slurmopt.policy.fragmentation import fragmentation_report

    rss_after_imports = peak_rss_mb()
    fabric_s, fabric = _median_seconds(
        lambda: fat_tree(num_nodes, NODES_PER_LEAF, LEAVES_PER_POD), reps
    )
    num_jobs = round(JOBS_AT_4096 * num_nodes / 4096)
    snapshot = synthetic_snapshot(sorted(fabric.compute_nodes), num_jobs, 0, seed)
    report_s, report = _median_seconds(
        lambda: fragmentation_report(snapshot, fabric, partition="gpu"), reps
    )
    return {
        "nodes": num_nodes,
        "gpus": num_nodes * GPUS_PER_NODE,
        "jobs": num_jobs,
        "running_jobs": sum(1 for j in snapshot.jobs.values() if j.is_active),
        "leaves": len(fabric.leaves()),
        "repetitions": reps,
        "fabric_s": round(fabric_s, 6),
        "report_s": round(report_s, 6),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "rss_after_imports_mb": round(rss_after_imports, 1),
        "free_gpus": report.free_gpus,
        "fragmentation_index": round(report.fragmentation_index, 4),
        "fgd_unusable_share": report.fgd_unusable_share and round(report.fgd_unusable_share, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--sizes", default="512,4096", help="node counts, comma-separated")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per timing (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(run_child(args.child, args.reps, args.seed)))
        return

    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        results.append(
            child_json(
                "fragmentation_speed",
                *("--child", str(size), "--reps", str(args.reps), "--seed", str(args.seed)),
            )
        )

    summary: dict[str, Any] = {"benchmark": "fragmentation_speed", "results": results}
    by_size = {r["nodes"]: r for r in results}
    if 512 in by_size and 4096 in by_size:
        small, large = by_size[512], by_size[4096]
        summary["ratio_4096_over_512"] = {
            "report_s": round(large["report_s"] / small["report_s"], 2),
            "fabric_s": round(large["fabric_s"] / small["fabric_s"], 2),
            "peak_rss_mb": round(large["peak_rss_mb"] / small["peak_rss_mb"], 2),
        }
        summary["targets_met_at_4096"] = {
            "report_under_1s": large["report_s"] < TARGET_SECONDS,
            "rss_under_500mb": large["peak_rss_mb"] < TARGET_MB,
        }

    if not args.json:
        header = f"{'nodes':>6} {'jobs':>5} {'running':>7} {'fabric ms':>10} {'report ms':>10}"
        header += f" {'peak RSS MB':>12} {'frag index':>10} {'FGD':>6}"
        print(header)
        for r in results:
            print(
                f"{r['nodes']:>6} {r['jobs']:>5} {r['running_jobs']:>7} "
                f"{r['fabric_s'] * 1000:>10.1f} {r['report_s'] * 1000:>10.1f} "
                f"{r['peak_rss_mb']:>12.1f} {r['fragmentation_index']:>10.4f} "
                f"{r['fgd_unusable_share'] or 0:>6.4f}"
            )
    print(json.dumps(summary, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
