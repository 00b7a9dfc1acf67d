"""The policy benchmark's trace windows on three-tier Clos fabrics: slurmopt against backfill.

Every window of ``benchmarks.policies`` (its ``TRACES``, at its ``LOADS``)
replays under ``slurm-backfill-tree`` and ``slurmopt`` on a Clos of as
many nodes as the benchmark's leaf-spine for that window (leaves of 8
nodes), split into at least two pods, the pod uplinks to the core
``--oversub``:1, communication penalty on.  One table row per window and
load: the two ratios the policy benchmark's targets hold to 1.02 (mean
JCT, p95 queueing delay; slurmopt / backfill) and the tier metrics of
``slurmopt.sim.comm.tier_metrics`` under both policies.

    python -m benchmarks.tiers [--workers 2] [--json FILE] [--oversub 2] [--traces DIR]
                               [--contender slurmopt:KNOB=VALUE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.policies.cli import command_line
from benchmarks.policies.runs import Case, load_window, run_case, size_cluster
from benchmarks.policies.settings import (
    DEFAULT_TRACES,
    LOADS,
    NODES_PER_LEAF,
    TARGETS,
    TRACES,
    TraceSpec,
    check_traces,
)

BASELINE = "slurm-backfill-tree"
CONTENDER = "slurmopt"
#: The two ratios every cell is held to (the policy benchmark's own targets).
RATIOS = ("avg_jct_s", "p95_queue_delay_s")
TIER_METRICS = ("avg_tier_multinode", "multinode_above_best_tier")
MAX_LEAVES_PER_POD = 8


def clos_layout(nodes: int) -> tuple[int, int, int]:
    """(pods, leaves per pod, nodes) of the Clos for a leaf-spine of ``nodes``.

    Leaves of ``NODES_PER_LEAF``; at least two pods of 2 to 8 leaves each, so
    every pod's spine joins leaves; whole pods, so the node count is rounded
    up to the fewest leaves that whole pods allow (a window of one to three
    leaves gets four), the larger pods first among equals.
    """
    leaves = math.ceil(nodes / NODES_PER_LEAF)
    largest = max(2, min(MAX_LEAVES_PER_POD, leaves // 2))

    def total(per_pod: int) -> tuple[int, int]:
        return max(2, math.ceil(leaves / per_pod)) * per_pod, -per_pod

    per_pod = min(range(2, largest + 1), key=total)
    pods = max(2, math.ceil(leaves / per_pod))
    return pods, per_pod, pods * per_pod * NODES_PER_LEAF


def clos_spec(nodes: int, oversub: float) -> str:
    pods, per_pod, _ = clos_layout(nodes)
    return f"clos:{pods}:{per_pod}:{NODES_PER_LEAF}:{oversub:g}"


def _ratio(contender: Any, baseline: Any) -> float | None:
    if contender is None or baseline is None:
        return None
    if baseline == 0:
        return 1.0 if contender == 0 else None
    return float(contender) / float(baseline)


def cell_rows(
    results: Sequence[Mapping[str, Any]], fabrics: Mapping[str, str], contender: str = CONTENDER
) -> list[dict[str, Any]]:
    """One row per window and load from ``run_case`` results of the baseline and ``contender``."""
    by_key = {(r["label"], r["load"], r["policy"]): r for r in results}
    rows = []
    for label, load in dict.fromkeys((r["label"], r["load"]) for r in results):
        pair = [by_key.get((label, load, p)) for p in (BASELINE, contender)]
        base, cont = ((r or {}).get("metrics", {}) for r in pair)
        errors = [r["error"] for r in pair if r is not None and "error" in r]
        row: dict[str, Any] = {"label": label, "load": load, "fabric": fabrics.get(label, "")}
        for metric in RATIOS:
            row[metric] = _ratio(cont.get(metric), base.get(metric))
        for metric in TIER_METRICS:
            row[metric] = {BASELINE: base.get(metric), contender: cont.get(metric)}
        row["within"] = not errors and all(
            row[m] is not None and row[m] <= TARGETS[m][1] for m in RATIOS
        )
        if errors:
            row["error"] = errors[0]
        rows.append(row)
    return rows


def _num(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: Sequence[Mapping[str, Any]], contender: str = CONTENDER) -> list[str]:
    """The Markdown table of ``cell_rows`` and the line counting cells within the bound."""
    bound = TARGETS[RATIOS[0]][1]
    out = [
        "| trace | load | fabric | mean JCT ratio | p95 wait ratio "
        f"| avg tier, multi-node (backfill / {contender}) "
        f"| multi-node above best tier (backfill / {contender}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tier, above = (r[m] for m in TIER_METRICS)
        jct, p95 = (_num(r[m], 3) for m in RATIOS)
        if "error" in r:
            jct = p95 = f"not run: {r['error']}"
        out.append(
            f"| {r['label']} | {r['load']} | `{r['fabric']}` | {jct} | {p95} "
            f"| {_num(tier[BASELINE], 2)} / {_num(tier[contender], 2)} "
            f"| {_num(above[BASELINE], 0)} / {_num(above[contender], 0)} |"
        )
    within = sum(r["within"] for r in rows)
    out += ["", f"{within} of {len(rows)} cells within <= {bound} on both ratios."]
    return out


def section(doc: Mapping[str, Any]) -> list[str]:
    """The "Three-tier fabrics" section of ``docs/benchmarks.md`` from a ``--json`` file."""
    return [
        "## Three-tier fabrics",
        "",
        "The windows above on a three-tier Clos (leaf, pod spine, core) of the leaf-spine's "
        f"nodes, leaves of {NODES_PER_LEAF}, at least two pods of 2 to {MAX_LEAVES_PER_POD} "
        "leaves, whole pods (nodes rounded up to the fewest leaves that whole pods allow), "
        f"core uplinks {doc['oversub']:g}:1, penalty on. Tier: "
        "0 one leaf, 1 one pod, 2 across pods; above best tier: multi-node jobs crossing a "
        "tier their best placement on the idle fabric does not. Ratios slurmopt / "
        f"slurm-backfill-tree. Run {doc['date']} on {doc['machine']} "
        f"({doc['wall_s']:.0f} s wall) by:",
        "",
        "```",
        doc["command"],
        "```",
        "",
        *table(doc["rows"], doc.get("contender", CONTENDER)),
    ]


def _cases(
    root: Path, windows: Sequence[TraceSpec], oversub: float, contender: str = CONTENDER
) -> tuple[list[Case], list[dict[str, Any]]]:
    cases, fabrics = [], []
    for spec in windows:
        path = str(root / spec.relpath)
        leaf_spine_nodes, _ = size_cluster(
            load_window(path, spec.fmt, spec.limit_jobs, spec.skip_jobs)
        )
        fabric = clos_spec(leaf_spine_nodes, oversub)
        fabrics.append(
            {
                "label": spec.label,
                "leaf_spine_nodes": leaf_spine_nodes,
                "nodes": clos_layout(leaf_spine_nodes)[2],
                "fabric": fabric,
            }
        )
        for load in LOADS:
            for policy in (BASELINE, contender):
                cases.append(
                    Case(
                        spec.label,
                        path,
                        spec.fmt,
                        spec.limit_jobs,
                        fabric,
                        load,
                        True,
                        policy,
                        spec.skip_jobs,
                    )
                )
    return cases, fabrics


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="traces directory")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument(
        "--oversub", type=float, default=2.0, help="core oversubscription, N:1 (default 2)"
    )
    parser.add_argument(
        "--window",
        action="append",
        metavar="LABEL",
        help="only this window of benchmarks.policies' TRACES (repeatable; default all)",
    )
    parser.add_argument(
        "--contender",
        default=CONTENDER,
        help="the policy compared with backfill, e.g. a variant "
        "'slurmopt:compact_wait_share=0.05' (default slurmopt)",
    )
    args = parser.parse_args(argv)
    windows = [t for t in TRACES if args.window is None or t.label in args.window]
    if not windows:
        parser.error(f"no window named {args.window}; known: {[t.label for t in TRACES]}")
    root = args.traces.resolve()
    check_traces(root, [t.relpath for t in windows])
    started = time.perf_counter()
    cases, fabrics = _cases(root, windows, args.oversub, args.contender)
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        results = list(pool.map(run_case, cases))
    for result in results:
        result.pop("gang_waits", None)
    rows = cell_rows(results, {f["label"]: f["fabric"] for f in fabrics}, args.contender)
    wall = time.perf_counter() - started
    lines = table(rows, args.contender)
    print("\n".join(lines))
    print(f"\n{wall:.0f} s wall")
    for f in fabrics:
        if f["nodes"] != f["leaf_spine_nodes"]:
            print(f"{f['label']}: {f['leaf_spine_nodes']} nodes rounded up to {f['nodes']}")
    if args.json is not None:
        doc = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, nproc {os.cpu_count()}",
            "command": command_line("benchmarks.tiers", argv),
            "wall_s": round(wall, 1),
            "oversub": args.oversub,
            "contender": args.contender,
            "fabrics": fabrics,
            "rows": rows,
            "runs": results,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
