"""How fast the state database grows per daemon cycle, and its size once retention holds it.

One seeded cluster (a fat tree of 4,096 nodes, 8 GPUs each; 3,000 running and
10,000 pending jobs) is run for a number of cycles ``--interval`` seconds
apart, as an enforcing daemon sees it: the jobs the last plan started are
running (on its nodes), jobs that reach their time limit end, and new jobs
arrive so the queue stays at 10,000.  Each cycle's plan and fragmentation
sample are written to two SQLite stores: one storing plans as changes (the
daemon's way), one writing every line of every plan (``change_only`` off: the
behaviour before plans were stored as changes, the baseline).

Bytes are the pages SQLite uses per table and index (``dbstat``), after a
WAL checkpoint.  The first cycle writes every line in both stores; the next
``--warmup`` cycles start the backlog the seeded queue begins with (hundreds
of starts at once, which a running daemon never sees).  ``bytes_per_cycle``:
the growth per cycle over the ``--cycles`` after those.  ``steady_state_bytes``: the
extrapolation to the default retention: the first plan, plus
``plan_bytes_per_cycle`` for every cycle in ``retain_plans_s`` (7 days), plus
``sample_bytes_per_cycle`` for every cycle in ``retain_samples_s`` (30 days),
plus one managed-job record and transitions per job started in
``retain_finished_jobs_s`` (not measured here: small beside the plans).  The
baseline's steady state is that of retention alone; with neither (the
behaviour before), the store grew without bound at ``baseline.bytes_per_day``.

    python -m benchmarks.store_growth            # table, then one JSON object (about 2 minutes)
    python -m benchmarks.store_growth --json     # the JSON object only
    python -m benchmarks.store_growth --cycles 12 --nodes 1024 --pending 2500   # quicker
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from benchmarks.synthetic import (
    GPUS_PER_NODE,
    LEAVES_PER_POD,
    NODES_PER_LEAF,
    NOW,
    synthetic_snapshot,
)
from slurmopt.config import Config
from slurmopt.fabric.generators import fat_tree
from slurmopt.model import ClusterSnapshot, JobState, NodeState
from slurmopt.policy.fragmentation import fragmentation_report
from slurmopt.policy.plan import Plan, PlanRequest, plan
from slurmopt.store import FragmentationSample, Store

PLAN_TABLES = frozenset({"plans", "decisions"})
SAMPLE_TABLES = frozenset({"fragmentation_samples"})
SAMPLE_COLUMNS = (
    "partition",
    "total_gpus",
    "allocated_gpus",
    "unavailable_gpus",
    "free_gpus",
    "stranded_gpus",
    "fragmentation_index",
    "largest_job_nodes",
    "largest_single_leaf_job_nodes",
    "fgd_unusable_share",
)
GIB = 1024**3


def table_bytes(path: Path) -> dict[str, int]:
    """Bytes of pages each table uses, its indexes counted with it (after a checkpoint)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master"))
        out: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table = owner.get(name, name)
            out[table] = out.get(table, 0) + int(size)
    return out


def sample_bytes(path: Path, report: Any, rows: int = 20_000) -> float:
    """Bytes one fragmentation sample takes: ``rows`` of them written, divided (pages round)."""
    store = Store.open(f"sqlite:///{path}")
    sample = {c: getattr(report, c, None) for c in SAMPLE_COLUMNS}
    with store.begin() as session:
        session.execute(
            insert(FragmentationSample),
            [{**sample, "at": report.taken_at + i} for i in range(rows)],
        )
    store.close()
    return _group(table_bytes(path), SAMPLE_TABLES) / rows


def _group(sizes: dict[str, int], tables: frozenset[str]) -> int:
    return sum(v for k, v in sizes.items() if k in tables)


def next_snapshot(
    snapshot: ClusterSnapshot, made: Plan, now: float, pending: int, rng: random.Random
) -> ClusterSnapshot:
    """What Slurm shows ``interval`` later: the plan's starts running, ended jobs gone, arrivals."""
    nodes = dict(snapshot.nodes)
    jobs = dict(snapshot.jobs)

    def use(names: tuple[str, ...], gpus: int) -> None:
        for name in names:
            node = nodes[name]
            alloc = min(node.gpus_total, max(0, node.gpus_alloc + gpus))
            state = (
                NodeState.IDLE
                if alloc == 0
                else NodeState.ALLOCATED
                if alloc == node.gpus_total
                else NodeState.MIXED
            )
            nodes[name] = dataclasses.replace(node, gpus_alloc=alloc, state=state)

    for action in made.actions:
        job = jobs[action.job_id]
        jobs[job.job_id] = dataclasses.replace(
            job,
            state=JobState.RUNNING,
            nodes=tuple(action.nodes),
            node_count=len(action.nodes),
            start_time=made.now,
            reason="None",
        )
        use(tuple(action.nodes), job.gpus_per_node)
    for job in list(jobs.values()):
        if job.is_active and job.start_time is not None and job.time_limit_s is not None:
            if job.start_time + job.time_limit_s <= now:
                del jobs[job.job_id]
                use(job.nodes, -job.gpus_per_node)
    waiting = [j for j in jobs.values() if j.state is JobState.PENDING]
    donors = [j for j in snapshot.jobs.values() if j.state is JobState.PENDING]
    next_id = max(jobs) + 1
    for _ in range(max(0, pending - len(waiting))):
        shape = rng.choice(donors)
        jobs[next_id] = dataclasses.replace(
            shape, job_id=next_id, submit_time=now, priority=rng.randint(1, 100_000)
        )
        next_id += 1
    return ClusterSnapshot.build(now, nodes.values(), jobs.values(), snapshot.partitions.values())


def measure(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    fabric = fat_tree(args.nodes, NODES_PER_LEAF, LEAVES_PER_POD)
    snapshot = synthetic_snapshot(
        sorted(fabric.compute_nodes), args.running, args.pending, args.seed
    )
    defaults = Config()
    interval = defaults.interval_s
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"change_only": Path(tmp) / "changes.db", "baseline": Path(tmp) / "full.db"}
        stores = {name: Store.open(f"sqlite:///{path}") for name, path in paths.items()}
        stores["baseline"].change_only = False
        first: dict[str, dict[str, int]] = {}
        settled: dict[str, dict[str, int]] = {}
        write_s: dict[str, list[float]] = {name: [] for name in stores}
        lines = []
        now = NOW
        for cycle in range(args.warmup + args.cycles + 1):
            made = plan(PlanRequest(snapshot, fabric, now=now))
            report = fragmentation_report(snapshot, fabric)
            lines.append(len(made.actions) + len(made.reservations) + len(made.unplaced))
            for name, store in stores.items():
                t0 = time.perf_counter()
                store.record_plan(made, snapshot.taken_at, 0.0)
                store.record_fragmentation(report)
                if cycle:
                    write_s[name].append(time.perf_counter() - t0)
            if cycle == 0:
                first = {name: table_bytes(path) for name, path in paths.items()}
            if cycle == args.warmup:
                settled = {name: table_bytes(path) for name, path in paths.items()}
            now += interval
            snapshot = next_snapshot(snapshot, made, now, args.pending, rng)
        last = {name: table_bytes(path) for name, path in paths.items()}
        with sqlite3.connect(paths["change_only"]) as conn:
            (rows_written,) = conn.execute(
                "SELECT sum(stored_lines) FROM plans WHERE id > ?", (args.warmup + 1,)
            ).fetchone()
        per_sample = sample_bytes(Path(tmp) / "samples.db", report)
        for store in stores.values():
            store.close()

    per_day = 86400 / interval
    result: dict[str, Any] = {}
    for name in stores:
        plan_first = _group(first[name], PLAN_TABLES)
        plan_growth = (
            _group(last[name], PLAN_TABLES) - _group(settled[name], PLAN_TABLES)
        ) / args.cycles
        sample_growth = per_sample
        steady = (
            plan_first
            + plan_growth * defaults.retain_plans_s / interval
            + sample_growth * defaults.retain_samples_s / interval
        )
        result[name] = {
            "first_plan_bytes": plan_first,
            "plan_bytes_per_cycle": round(plan_growth),
            "sample_bytes_per_cycle": round(sample_growth, 1),
            "bytes_per_cycle": round(plan_growth + sample_growth),
            "bytes_per_day": round((plan_growth + sample_growth) * per_day),
            "steady_state_bytes": round(steady),
            "median_write_ms": round(sorted(write_s[name])[len(write_s[name]) // 2] * 1000, 1),
        }
    new, old = result["change_only"], result["baseline"]
    return {
        "benchmark": "store_growth",
        "nodes": args.nodes,
        "running": args.running,
        "pending": args.pending,
        "gpus_per_node": GPUS_PER_NODE,
        "cycles_measured": args.cycles,
        "warmup_cycles": args.warmup,
        "interval_s": interval,
        "retain_plans_s": defaults.retain_plans_s,
        "retain_samples_s": defaults.retain_samples_s,
        "median_plan_lines": sorted(lines)[len(lines) // 2],
        "rows_written_per_cycle": round((rows_written or 0) / args.cycles, 1),
        "bytes_per_cycle": new["bytes_per_cycle"],
        "steady_state_bytes": new["steady_state_bytes"],
        "steady_state_gib": round(new["steady_state_bytes"] / GIB, 3),
        "under_1_gib": new["steady_state_bytes"] < GIB,
        "baseline_bytes_per_cycle": old["bytes_per_cycle"],
        "baseline_bytes_per_day": old["bytes_per_day"],
        "baseline_steady_state_bytes": old["steady_state_bytes"],
        "ratio_bytes_per_cycle": round(old["bytes_per_cycle"] / max(1, new["bytes_per_cycle"]), 1),
        "change_only": new,
        "baseline": old,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument(
        "--cycles",
        type=int,
        default=360,
        help="cycles measured after warm-up (default 360: 30 min, three waiting-line refreshes)",
    )
    parser.add_argument(
        "--warmup", type=int, default=3, help="cycles first (the seeded queue starts many at once)"
    )
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--running", type=int, default=3000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.running == 3000 and args.nodes != 4096:
        args.running = round(3000 * args.nodes / 4096)
    summary = measure(args)
    if not args.json:
        print(
            f"{args.nodes} nodes, {summary['running']} running, {args.pending} pending, "
            f"{args.cycles} cycles every {summary['interval_s']:g} s"
        )
        print(
            f"{'store':<12} {'first plan':>11} {'B/cycle':>9} {'plans':>8} {'samples':>8} "
            f"{'per day':>10} {'steady':>10} {'write ms':>8}"
        )
        for name in ("baseline", "change_only"):
            r = summary[name]
            print(
                f"{name:<12} {r['first_plan_bytes']:>11,} {r['bytes_per_cycle']:>9,} "
                f"{r['plan_bytes_per_cycle']:>8,} {r['sample_bytes_per_cycle']:>8,} "
                f"{r['bytes_per_day'] / GIB:>7.2f} GiB {r['steady_state_bytes'] / GIB:>6.2f} GiB "
                f"{r['median_write_ms']:>8.1f}"
            )
        print(
            f"ratio of bytes per cycle, baseline / change-only: {summary['ratio_bytes_per_cycle']}"
        )
    print(json.dumps(summary, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
