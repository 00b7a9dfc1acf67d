"""How fast one ``plan()`` pass is on large synthetic clusters, and how much memory it needs.

Each size runs in a fresh Python process: a fat tree (16 nodes per leaf, 16
leaves per pod, 8 GPUs per node), a seeded snapshot of running jobs (3,000
at 4,096 nodes, scaled by node count) with finite time limits, and a
pending queue of 1-8 GPU and multi-node jobs.  The pass time is the median
of several passes; peak RSS is the child's own ``ru_maxrss``.

    python -m benchmarks.plan_speed           # tables, then one JSON object
    python -m benchmarks.plan_speed --json    # the JSON object only
    python -m benchmarks.plan_speed --fabric clos:16:16:16:2   # one row on that fabric
    python -m benchmarks.plan_speed --nodes 4096,16384 --pending 10000,50000   # a grid

``--fabric`` (a ``slurmopt simulate --fabric`` spec or a topology file)
measures the headline's pass (10,000 pending, running jobs scaled by node
count, or each of ``--pending``) on that fabric instead of the series.
``--nodes`` / ``--pending`` (comma-separated lists) measure every pair on
the fat tree instead, each row with its ratio to the smallest node count
of the same queue.

Reported: the 4,096-node / 10,000-pending headline (``median_pass_s``,
``peak_rss_mb``), pass time as nodes grow (pending fixed at 10,000) and as
pending grows (nodes fixed at 4,096), each with its ratio to the smallest
size of the same run; and the scale rows (``scale``): 4,096 and 16,384
nodes with 50,000 pending, on the fat tree and on the three-tier ``clos``
fabric of the same leaves and pods, with the 16,384/4,096 ratio of each
(``scale_ratio``).  ``cached_median_pass_s``: the same pass again with a
warm :class:`~slurmopt.policy.plan.PlannerCache` and an unchanged snapshot
(what a planning loop pays when little changed between passes).
CPU seconds, best of the passes: ``full_cpu_s`` the pass without a cache;
``incremental_cpu_s`` and ``next_full_cpu_s`` the next cycles' passes (the
last plan's starts made, a few jobs ended and arrived, 30 s on) with the
loop's cache and without, whose plans must agree (``consecutive_cycles``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import TYPE_CHECKING, Any

from benchmarks.synthetic import (
    LEAVES_PER_POD,
    NODES_PER_LEAF,
    child_json,
    next_cycle,
    peak_rss_mb,
    synthetic_snapshot,
)

if TYPE_CHECKING:
    from slurmopt.fabric import Fabric
    from slurmopt.model import ClusterSnapshot
    from slurmopt.policy.plan import Plan, PlannerCache

RUNNING_AT_4096 = 3000
HEADLINE = (4096, 10_000)
NODE_SIZES = (512, 1024, 2048, 4096, 8192)
PENDING_SIZES = (1000, 2500, 5000, 10_000, 20_000)
#: The scale rows: (fabric family, spec or None for the fat tree, nodes, pending); the ratio is
#: to the smallest node count of the family.  clos PODS:LEAVES:NODES has the fat tree's 16-node
#: leaves and 16-leaf pods under a 2:1 core.
SCALE = (
    ("fat-tree", None, 4096, 50_000),
    ("fat-tree", None, 16_384, 50_000),
    ("clos", "clos:16:16:16:2", 4096, 50_000),
    ("clos", "clos:64:16:16:2", 16_384, 50_000),
)


def run_child(
    num_nodes: int, num_pending: int, reps: int, seed: int, fabric_spec: str | None = None
) -> dict[str, Any]:
    from slurmopt.fabric.generators import fat_tree
    from slurmopt.policy.plan import PlannerCache, PlanRequest, plan
    from slurmopt.sim.fabrics import parse_fabric_spec

    if fabric_spec is None:
        fabric = fat_tree(num_nodes, NODES_PER_LEAF, LEAVES_PER_POD)
    else:
        fabric = parse_fabric_spec(fabric_spec)
        num_nodes = len(fabric.compute_nodes)
    running = round(RUNNING_AT_4096 * num_nodes / 4096)
    snapshot = synthetic_snapshot(sorted(fabric.compute_nodes), running, num_pending, seed)
    times, cpu = [], []
    result = None
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(PlanRequest(snapshot, fabric))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    assert result is not None
    # A planning loop passes one cache to every pass; here the snapshot has not changed since
    # the warm-up pass, so this is the set-up cost a pass no longer pays, at its largest.
    cache = PlannerCache()
    plan(PlanRequest(snapshot, fabric), cache=cache)
    cached_times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        cached = plan(PlanRequest(snapshot, fabric), cache=cache)
        cached_times.append(time.perf_counter() - t0)
    assert cached.to_json() == result.to_json()
    cycles = consecutive_cycles(snapshot, fabric, cached, cache, reps, seed)
    row: dict[str, Any] = {} if fabric_spec is None else {"fabric": fabric.source}
    return {
        **row,
        "nodes": num_nodes,
        "pending": num_pending,
        "running": sum(1 for j in snapshot.jobs.values() if j.is_active),
        "median_pass_s": round(statistics.median(times), 4),
        "cached_median_pass_s": round(statistics.median(cached_times), 4),
        "full_cpu_s": round(min(cpu), 4),
        **cycles,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "starts": len(result.actions),
        "reservations": len(result.reservations),
        "unplaced": len(result.unplaced),
    }


def consecutive_cycles(
    snapshot: ClusterSnapshot,
    fabric: Fabric,
    last: Plan,
    cache: PlannerCache,
    reps: int,
    seed: int,
) -> dict[str, float]:
    """CPU seconds of the passes a planning loop makes from one cycle to the next.

    Each cycle carries out the last plan's starts, ends a few running jobs and
    adds a few pending ones, 30 s on (``next_cycle``).  The first cycle, which
    carries out the whole first plan, is not timed.  Each timed cycle is planned
    with the loop's cache (``incremental_cpu_s``, the best of ``reps``) and by
    a fresh full pass (``next_full_cpu_s``); the two plans must be equal.
    """
    from slurmopt.policy.plan import PlanRequest, plan

    rng = random.Random(seed)
    snapshot = next_cycle(snapshot, ((a.job_id, a.nodes) for a in last.actions), rng)
    last = plan(PlanRequest(snapshot, fabric), cache=cache)
    incremental, full = [], []
    for _ in range(reps):
        snapshot = next_cycle(snapshot, ((a.job_id, a.nodes) for a in last.actions), rng)
        c0 = time.process_time()
        last = plan(PlanRequest(snapshot, fabric), cache=cache)
        c1 = time.process_time()
        whole = plan(PlanRequest(snapshot, fabric))
        c2 = time.process_time()
        assert whole.to_json() == last.to_json()
        incremental.append(c1 - c0)
        full.append(c2 - c1)
    return {
        "incremental_cpu_s": round(min(incremental), 4),
        "next_full_cpu_s": round(min(full), 4),
        "incremental_ratio": round(min(incremental) / (min(full) or 1e-9), 2),
    }


def _child(
    nodes: int, pending: int, reps: int, seed: int, fabric: str | None = None
) -> dict[str, Any]:
    extra = ["--fabric", fabric] if fabric else []
    return child_json(
        "plan_speed",
        "--child",
        f"{nodes},{pending}",
        "--reps",
        str(reps),
        "--seed",
        str(seed),
        *extra,
    )


def _series(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = rows[0]["median_pass_s"] or 1e-9
    return [{**r, "ratio_to_smallest": round(r["median_pass_s"] / base, 2)} for r in rows]


def _by_nodes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its pass time over the smallest node count's of the same queue and fabric."""

    def key(row: dict[str, Any]) -> tuple[str | None, int]:
        return row.get("family"), row["pending"]

    smallest: dict[tuple[str | None, int], dict[str, Any]] = {}
    for r in rows:
        if key(r) not in smallest or r["nodes"] < smallest[key(r)]["nodes"]:
            smallest[key(r)] = r
    return [
        {
            **r,
            "ratio_to_smallest": round(
                r["median_pass_s"] / (smallest[key(r)]["median_pass_s"] or 1e-9), 2
            ),
        }
        for r in rows
    ]


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return sizes


def _print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    print(title)
    print(
        f"{'fabric':<16} {'nodes':>6} {'pending':>7} {'pass ms':>8} {'ratio':>6} "
        f"{'cached':>7} {'full CPU':>8} {'next CPU':>8} {'incr CPU':>8} {'RSS MB':>7} "
        f"{'starts':>6} {'resv':>5}"
    )
    for r in rows:
        fabric = (r.get("spec") or "fat-tree")[:16]
        print(
            f"{fabric:<16} {r['nodes']:>6} {r['pending']:>7} {r['median_pass_s'] * 1000:>8.1f} "
            f"{r['ratio_to_smallest']:>6.2f} {r['cached_median_pass_s'] * 1000:>7.1f} "
            f"{r['full_cpu_s'] * 1000:>8.1f} {r['next_full_cpu_s'] * 1000:>8.1f} "
            f"{r['incremental_cpu_s'] * 1000:>8.1f} {r['peak_rss_mb']:>7.1f} "
            f"{r['starts']:>6} {r['reservations']:>5}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--reps", type=int, default=3, help="passes per size (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--fabric",
        metavar="SPEC|FILE",
        help="one headline-sized pass on this fabric (a simulator --fabric spec or a file)",
    )
    parser.add_argument(
        "--nodes", type=_sizes, metavar="N,N,...", help="fat-tree node counts to measure"
    )
    parser.add_argument(
        "--pending", type=_sizes, metavar="N,N,...", help="pending queue lengths to measure"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        nodes, pending = (int(x) for x in args.child.split(","))
        print(json.dumps(run_child(nodes, pending, args.reps, args.seed, args.fabric)))
        return
    if args.fabric:
        if args.nodes:
            parser.error("--fabric sets the node count; give --pending only")
        rows = [
            {**_child(0, p, args.reps, args.seed, args.fabric), "spec": args.fabric}
            for p in args.pending or [HEADLINE[1]]
        ]
        if not args.json:
            for row in rows:
                print(
                    f"{row['fabric']}: {row['nodes']} nodes, {row['pending']} pending, "
                    f"{row['median_pass_s'] * 1000:.1f} ms per pass "
                    f"({row['cached_median_pass_s'] * 1000:.1f} ms cached; CPU "
                    f"{row['full_cpu_s'] * 1000:.1f} ms full, "
                    f"{row['incremental_cpu_s'] * 1000:.1f} ms next cycle incremental, "
                    f"{row['next_full_cpu_s'] * 1000:.1f} ms full), "
                    f"{row['peak_rss_mb']:.0f} MB, "
                    f"{row['starts']} starts, {row['reservations']} reservations"
                )
        doc: dict[str, Any] = {"benchmark": "plan_speed", "fabric": args.fabric}
        doc.update({"headline": rows[0]} if len(rows) == 1 else {"rows": rows})
        print(json.dumps(doc))
        return
    if args.nodes or args.pending:
        grid = [
            _child(n, p, args.reps, args.seed)
            for p in args.pending or [HEADLINE[1]]
            for n in args.nodes or [HEADLINE[0]]
        ]
        rows = _by_nodes(grid)
        if not args.json:
            _print_rows("grid", rows)
        print(json.dumps({"benchmark": "plan_speed", "rows": rows}))
        return

    headline = _child(*HEADLINE, args.reps, args.seed)
    by_nodes = _series([_child(n, HEADLINE[1], args.reps, args.seed) for n in NODE_SIZES])
    by_pending = _series([_child(HEADLINE[0], p, args.reps, args.seed) for p in PENDING_SIZES])
    scale = _by_nodes(
        [
            {**_child(n, p, args.reps, args.seed, spec), "spec": spec, "family": family}
            for family, spec, n, p in SCALE
        ]
    )
    summary = {
        "benchmark": "plan_speed",
        "median_pass_s": headline["median_pass_s"],
        "peak_rss_mb": headline["peak_rss_mb"],
        "headline": headline,
        "nodes_grow": by_nodes,
        "pending_grow": by_pending,
        "scale": scale,
        "scale_ratio": {r["family"]: r["ratio_to_smallest"] for r in scale if r["nodes"] > 4096},
    }
    if not args.json:
        _print_rows("nodes grow", by_nodes)
        _print_rows("pending grow", by_pending)
        _print_rows("scale (ratio: to 4,096 nodes on the same fabric)", scale)
    print(json.dumps(summary, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
