"""The benchmark's command line: run every case (or ``--render`` the stored ones), write the doc."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.policies.causes import _fmt, compare, lever_rows
from benchmarks.policies.render import _fill_verdict, render
from benchmarks.policies.runs import (
    Case,
    FillCase,
    _run_case_with_series,
    after_last_arrival,
    fabric_spec,
    load_window,
    published_curves,
    run_case,
    run_fill,
    size_cluster,
)
from benchmarks.policies.settings import (
    BOUND_POLICIES,
    DEFAULT_OUT,
    DEFAULT_TRACES,
    ELASTIC_POLICIES,
    ELASTIC_TRACE,
    FGD_RESULTS,
    FILL_POLICIES,
    FILL_SEEDS,
    GPUS_PER_NODE,
    LEVERS,
    LOADS,
    OPENB_NODES,
    OPENB_PODS,
    OPENB_WORKLOAD,
    POLICIES,
    PREEMPT_FABRIC,
    PREEMPT_POLICIES,
    PREEMPT_TRACE,
    TRACES,
    check_traces,
)


def command_line(module: str = "benchmarks.policies", argv: Sequence[str] | None = None) -> str:
    """The command a run was made by, with its niceness: what the docs show to run it again."""
    niceness = os.nice(0)
    prefix = f"nice -n {niceness} " if niceness > 0 else ""
    args = sys.argv[1:] if argv is None else argv
    return (prefix + f"python -m {module} " + shlex.join(args)).rstrip()


def _fixed_fabric_nodes(parser: argparse.ArgumentParser, spec: str | None) -> int | None:
    """Nodes of the ``--fabric`` every window replays on; None without one (each is sized)."""
    if spec is None:
        return None
    from slurmopt.errors import SlurmoptError
    from slurmopt.sim.fabrics import parse_fabric_spec

    try:
        return len(parse_fabric_spec(spec).compute_nodes)
    except SlurmoptError as exc:
        parser.error(str(exc))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="traces directory")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where benchmarks.md goes")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument(
        "--limit-scale", type=float, default=1.0, help="multiply every window by this"
    )
    parser.add_argument("--no-fill", action="store_true", help="skip the openb fill runs")
    parser.add_argument(
        "--fabric",
        metavar="SPEC|FILE",
        help="replay every trace window on this fabric (a `slurmopt simulate --fabric` spec, "
        "such as clos:6:12:12:2, or a topology file) instead of a leaf-spine sized to it",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only write benchmarks.md again from a run's policies.json",
    )
    parser.add_argument(
        "--update",
        type=Path,
        metavar="JSON",
        help="run only --policy's cases and put their rows into this run's policies.json "
        "(the other rows are kept), then write benchmarks.md",
    )
    parser.add_argument("--policy", help="with --update: the policy whose cases run again")
    args = parser.parse_args(argv)
    if (args.update is None) != (args.policy is None):
        parser.error("--update and --policy go together")
    if args.update is not None:
        args.no_fill = True
    if args.render is not None:
        stored: dict[str, Any] = json.loads(args.render.read_text())
        # Ratios and their causes are derived from the runs: derive them again, so the page
        # says what the current rules make of the same figures.
        stored["comparison"] = compare(stored["rows"], penalty=True)
        stored["comparison_off"] = compare(stored["rows"], penalty=False)
        _write_doc(args.out, stored)
        return
    fixed_nodes = _fixed_fabric_nodes(parser, args.fabric)
    root = args.traces.resolve()
    needed = [t.relpath for t in TRACES]
    if not args.no_fill:
        needed += [OPENB_PODS, OPENB_NODES, FGD_RESULTS]
    check_traces(root, needed)
    started = time.perf_counter()
    traces, cases = [], []
    for spec in TRACES:
        limit = None if spec.limit_jobs is None else max(1, int(spec.limit_jobs * args.limit_scale))
        path = str(root / spec.relpath)
        window = load_window(path, spec.fmt, limit, spec.skip_jobs)
        nodes, demand = size_cluster(window)
        fabric = args.fabric or fabric_spec(nodes)
        if fixed_nodes is not None:
            nodes = fixed_nodes
        multinode = sum(j.nodes > 1 for j in window.jobs)
        traces.append(
            {
                "label": spec.label,
                "file": spec.relpath,
                "limit_jobs": limit,
                "skip_jobs": spec.skip_jobs,
                "window": spec.window_text(limit),
                "trace": spec.trace,
                "jobs": len(window.jobs),
                "multinode": multinode,
                "demand": demand,
                "fabric": fabric,
                "gpus": nodes * GPUS_PER_NODE,
            }
        )
        for load in LOADS:
            for penalty in (True, False):
                if not penalty and not multinode:
                    continue  # nothing to stretch: the bound equals the run with the penalty
                names: Sequence[str] = BOUND_POLICIES
                if penalty:
                    names = [*POLICIES, *(name for name, _ in LEVERS)]
                for policy in names:
                    cases.append(
                        Case(
                            spec.label,
                            path,
                            spec.fmt,
                            limit,
                            fabric,
                            load,
                            penalty,
                            policy,
                            spec.skip_jobs,
                        )
                    )
    preempt_cases, elastic_cases = (
        [
            Case("synthetic", spec, "synthetic", None, PREEMPT_FABRIC, load, True, policy)
            for load in LOADS
            for policy in policies
        ]
        for spec, policies in ((PREEMPT_TRACE, PREEMPT_POLICIES), (ELASTIC_TRACE, ELASTIC_POLICIES))
    )
    if args.update is not None:
        parts = {"rows": cases, "preempt_rows": preempt_cases, "elastic_rows": elastic_cases}
        _update(args.update, args.out, args.policy, args.workers, {
            part: [c for c in found if c.policy == args.policy] for part, found in parts.items()
        })  # fmt: skip
        return
    plotted = [
        c
        for c in cases
        if c.label == TRACES[0].label and c.load == 1.0 and c.penalty and c.policy in POLICIES
    ]
    fills = [
        FillCase(str(root / OPENB_PODS), str(root / OPENB_NODES), p, s)
        for p in FILL_POLICIES
        for s in FILL_SEEDS
    ] if not args.no_fill else []  # fmt: skip
    rows: list[dict[str, Any]] = []
    fill_runs: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        fill_futures = [pool.submit(run_fill, f) for f in fills]  # longest first
        preempt_futures = [pool.submit(run_case, c) for c in preempt_cases]
        elastic_futures = [pool.submit(run_case, c) for c in elastic_cases]
        futures = [
            pool.submit(_run_case_with_series if c in plotted else run_case, c) for c in cases
        ]
        for case, future in zip(cases, futures, strict=True):
            row = future.result()
            rows.append(row)
            m = row["metrics"]
            if "error" in row:
                print(f"{case.label:>14} load {case.load:<3g} {case.policy}: {row['error']}")
                continue
            print(
                f"{case.label:>14} load {case.load:<3g} penalty {'on ' if case.penalty else 'off'} "
                f"{case.policy:<20} avg JCT {m['avg_jct_s']} s, p95 wait "
                f"{m['p95_queue_delay_s']} s, {m['wall_s']:.1f} s",
                flush=True,
            )
        fill_runs = [f.result() for f in fill_futures]
        preempt_rows = [f.result() for f in preempt_futures]
        elastic_rows = [f.result() for f in elastic_futures]
    args.out.mkdir(parents=True, exist_ok=True)
    plots = args.out / "benchmarks"
    plots.mkdir(exist_ok=True)
    from slurmopt.sim.plots import plot_fill, plot_over_time

    series = {r["policy"]: r.pop("series") for r in rows if "series" in r}
    plot_doc = None
    if series:
        trace = traces[0]
        title = f"{trace['label']}: {trace['jobs']:,} jobs, {trace['gpus']} GPUs, load 1.0"
        plot_over_time(series, plots / "over-time.png", title)
        plot_doc = {
            "file": "benchmarks/over-time.png",
            "what": f"{trace['label']} at load 1.0, penalty on, every policy",
        }
    fill_doc = None
    if fill_runs:
        from slurmopt.sim.fill import published_allocation

        fgd = root / FGD_RESULTS
        published = {
            name: published_allocation(fgd, OPENB_WORKLOAD, name, 130)
            for name in ("BestFit", "FGD")
        }
        curves = {f"{r['policy']} (seed {r['seed']})": r["curve"] for r in fill_runs}
        plot_fill(
            curves,
            plots / "openb-fill.png",
            f"openb on {fill_runs[0]['gpus']:,} GPUs",
            published_curves(fgd, OPENB_WORKLOAD, ("BestFit", "FGD")),
        )
        for r in fill_runs:
            r.pop("curve")
        fill_doc = {
            "gpus": fill_runs[0]["gpus"],
            "seeds": list(FILL_SEEDS),
            "runs": fill_runs,
            "published": published,
            "verdict": _fill_verdict(fill_runs, published),
            "plot": "benchmarks/openb-fill.png",
        }
    windows = []
    for t in traces:
        spec = next(s for s in TRACES if s.label == t["label"])
        window = load_window(str(root / spec.relpath), spec.fmt, t["limit_jobs"], spec.skip_jobs)
        for load in LOADS:
            scales = [
                r["arrival_scale"]
                for r in rows
                if r["label"] == t["label"] and r["load"] == load and "error" not in r
            ]
            if not scales:
                continue
            scale = scales[0]
            span_h = (window.jobs[-1].submit_s - window.jobs[0].submit_s) * scale / 3600
            windows.append(
                {
                    "label": t["label"],
                    "load": load,
                    "arrival_scale": scale,
                    "window_h": span_h,
                    "after_last_arrival": after_last_arrival(window, scale),
                }
            )
    doc: dict[str, Any] = {
        "windows": windows,
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.node() or 'unknown host'}, nproc {os.cpu_count()}, "
        f"Python {platform.python_version()}",
        "command": command_line(),
        "wall_s": time.perf_counter() - started,
        "traces": traces,
        "rows": rows,
        "comparison": compare(rows, penalty=True),
        "comparison_off": compare(rows, penalty=False),
        "levers": lever_rows(rows),
        "preempt_rows": preempt_rows,
        "elastic_rows": elastic_rows,
        "plot": plot_doc,
        "fill": fill_doc,
    }
    results = plots / "policies.json"
    results.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"wrote {results}")
    _write_doc(args.out, doc)


def _update(
    path: Path, out: Path, policy: str, workers: int, cases: Mapping[str, Sequence[Case]]
) -> None:
    """Run ``cases`` (one policy's, by part of the run) again into the stored run at ``path``.

    Rows are matched within their part: the preemption and elastic workloads share labels.
    """
    if not any(cases.values()):
        raise SystemExit(f"benchmarks.policies: no case runs policy {policy!r}")
    doc: dict[str, Any] = json.loads(path.read_text())
    started = time.perf_counter()
    key = ("label", "load", "penalty", "policy")
    made = 0
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        for part, part_cases in cases.items():
            by_key = {tuple(r[k] for k in key): r for r in pool.map(run_case, part_cases)}
            made += len(by_key)
            doc[part] = [by_key.pop(tuple(r[k] for k in key), r) for r in doc[part]]
            if by_key:
                raise SystemExit(f"benchmarks.policies: {len(by_key)} new {part} match no row")
    doc["comparison"] = compare(doc["rows"], penalty=True)
    doc["comparison_off"] = compare(doc["rows"], penalty=False)
    doc["levers"] = lever_rows(doc["rows"])
    doc.setdefault("updates", []).append(
        {
            "date": datetime.date.today().isoformat(),
            "policy": policy,
            "rows": made,
            "command": command_line(),
            "wall_s": time.perf_counter() - started,
        }
    )
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"wrote {path}")
    _write_doc(out, doc)


def _write_doc(out: Path, doc: Mapping[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    target = out / "benchmarks.md"
    target.write_text(render(doc))
    print(f"wrote {target} ({doc['wall_s']:.0f} s)")
    for c in doc["comparison"]:
        print(c["label"], c["load"], {m: _fmt(v) for m, v in c["ratios"].items()})
