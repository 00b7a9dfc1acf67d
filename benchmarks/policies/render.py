"""``docs/benchmarks.md`` from the stored runs: every table, the summary and the verdicts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.policies.causes import (
    _fmt,
    _fmt_share,
    _geomean,
    across_windows,
    by_case,
    cause_kind,
    meets,
    ratio,
)
from benchmarks.policies.settings import (
    ACROSS_EXTRA,
    ELASTIC_METRICS,
    ELASTIC_TRACE,
    GPUS_PER_NODE,
    LARGEST_JOB_COPIES,
    LEVER_METRICS,
    LEVERS,
    METRICS,
    NODES_PER_LEAF,
    PREEMPT_FABRIC,
    PREEMPT_METRICS,
    PREEMPT_TRACE,
    REPO,
    TARGETS,
)


def _across_table(summary: Sequence[Mapping[str, Any]]) -> list[str]:
    metrics = [*TARGETS, *ACROSS_EXTRA]
    lines = [
        "| trace | load | windows | " + " | ".join(f"`{m}`" for m in metrics) + " |",
        "|" + "---|" * (len(metrics) + 3),
    ]
    for row in summary:
        cells = []
        for m in metrics:
            mean, met, n = row["cells"].get(m, (None, 0, 0))
            if not n:
                cells.append("-")
            else:
                cells.append(f"{_fmt(mean)} ({met}/{n})" if m in TARGETS else _fmt(mean))
        lines.append(
            f"| {row['trace']} | {row['load']:g} | {row['windows']} | " + " | ".join(cells) + " |"
        )
    return lines


#: How a shortfall's cause reads in the summary: the opening words of shortfall_reason's text.


def _summary(comparison: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each target: in how many (window, load) cells slurmopt meets it, and why it misses."""
    lines = [
        "## Summary",
        "",
        "Each target over every (window, load) cell with the penalty on; the causes of the "
        "misses are those named in the tables below.",
        "",
        "| target | met | missed, by cause (cells) |",
        "|---|---|---|",
    ]
    for metric, (op, bound) in TARGETS.items():
        cells = [c for c in comparison if c["ratios"].get(metric) is not None]
        met = sum(bool(meets(metric, c["ratios"][metric])) for c in cells)
        kinds: dict[str, int] = {}
        for c in cells:
            reason = c["missed"].get(metric)
            if reason is not None:
                kind = cause_kind(reason)
                kinds[kind] = kinds.get(kind, 0) + 1
        causes = "; ".join(f"{k} ({n})" for k, n in sorted(kinds.items(), key=lambda x: -x[1]))
        lines.append(f"| `{metric}` {op} {bound:g} | {met} of {len(cells)} | {causes or '-'} |")
    return lines


def _metric_table(rows: Sequence[Mapping[str, Any]], label: str, penalty: bool) -> list[str]:
    head = "| load | policy | " + " | ".join(f"`{m}`" for m in METRICS) + " |"
    lines = [head, "|" + "---|" * (len(METRICS) + 2)]
    for r in rows:
        if r["label"] != label or r["penalty"] != penalty:
            continue
        cells = " | ".join(_fmt(r["metrics"].get(m)) for m in METRICS)
        lines.append(f"| {r['load']:g} | `{r['policy']}` | {cells} |")
    return lines


def _ratio_table(comparison: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| trace | load | "
        + " | ".join(f"`{m}`" for m in METRICS)
        + " | where slurmopt is not better |",
        "|" + "---|" * (len(METRICS) + 3),
    ]
    for c in comparison:
        cells = []
        for m in METRICS:
            text = _fmt(c["ratios"][m])
            cells.append(f"**{text}**" if meets(m, c["ratios"][m]) is False else text)
        missed = "; ".join(f"`{m}`: {why}" for m, why in c["missed"].items()) or "none"
        lines.append(f"| {c['label']} | {c['load']:g} | " + " | ".join(cells) + f" | {missed} |")
    return lines


def _bound_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """JCT with the penalty on and off: the share of the penalty each policy pays."""
    index = by_case(rows)
    lines = [
        "| trace | load | policy | avg JCT, penalty on (s) | off (s) | penalty cost | "
        "avg stretch, multi-node |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, load, penalty, policy in index:
        if penalty or (label, load, True, policy) not in index:
            continue
        on, off = index[(label, load, True, policy)], index[(label, load, False, policy)]
        cost = ratio(on.get("avg_jct_s"), off.get("avg_jct_s"))
        cost_text = "-" if cost is None else f"{100 * (cost - 1):+.1f}%"
        lines.append(
            f"| {label} | {load:g} | `{policy}` | {_fmt(on.get('avg_jct_s'))} | "
            f"{_fmt(off.get('avg_jct_s'))} | {cost_text} | "
            f"{_fmt(on.get('avg_stretch_multinode'))} |"
        )
    return lines


def _table(keys: Sequence[str], metrics: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table: the ``keys`` columns, then one column per metric name in backticks."""
    lines = [
        "| " + " | ".join([*keys, *(f"`{m}`" for m in metrics)]) + " |",
        "|" + "---|" * (len(keys) + len(metrics)),
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _lever_table(
    levers: Sequence[Mapping[str, Any]], traces: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Per trace, load and variant: each ratio's geometric mean over the trace's windows."""
    family = {t["label"]: t.get("trace", t["label"]) for t in traces}
    groups: dict[tuple[str, float, str], list[Mapping[str, Any]]] = {}
    for r in levers:
        key = (family.get(r["label"], r["label"]), r["load"], r["policy"])
        groups.setdefault(key, []).append(r)
    rows = [
        [
            trace,
            f"{load:g}",
            str(len(group)),
            f"`{policy}`",
            *(_fmt(_geomean(r["ratios"][m] for r in group)) for m in LEVER_METRICS),
        ]
        for (trace, load, policy), group in groups.items()
    ]
    return _table(("trace", "load", "windows", "policy"), LEVER_METRICS, rows)


def lever_summary(levers: Sequence[Mapping[str, Any]]) -> list[str]:
    """How often each lever beats the default slurmopt, over the cells where both ran.

    Lower is better for every metric but allocation while jobs queue.
    """
    default = {(r["label"], r["load"]): r["ratios"] for r in levers if r["policy"] == "slurmopt"}
    lines = []
    for name, what in LEVERS:
        better: list[str] = []
        worse: list[str] = []
        for r in levers:
            base = default.get((r["label"], r["load"]))
            if r["policy"] != name or base is None:
                continue
            for m in LEVER_METRICS:
                a, b = r["ratios"][m], base[m]
                if a is None or b is None or abs(a - b) <= 0.02 * abs(b):
                    continue
                higher_is_better = m == "gpu_allocation_ratio_when_queued"
                (better if (a > b) == higher_is_better else worse).append(m)
        lines.append(
            f"- `{name}` ({what}): better than the default in {len(better)} and worse in "
            f"{len(worse)} (trace, load, metric) cells by more than 2%."
        )
    return lines


def _floor_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Stranded GPUs beside the packing floor, and when they are stranded, penalty on."""
    index = by_case(rows)
    lines = [
        "| trace | load | backfill: stranded | its floor | slurmopt: stranded | its floor | "
        "target (half of backfill's) | target above slurmopt's floor | "
        "stranded GPU-time with nobody waiting: backfill / slurmopt | "
        "while jobs wait, stranded GPUs a waiting job could use: backfill / slurmopt |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cases = [(label, load) for label, load, on, policy in index if on and policy == "slurmopt"]
    for label, load in cases:
        base = index.get((label, load, True, "slurm-backfill-tree"))
        ours = index[(label, load, True, "slurmopt")]
        if not base or base.get("avg_stranded_gpus") is None:
            continue
        target = TARGETS["avg_stranded_gpus"][1] * base["avg_stranded_gpus"]
        floor = ours.get("avg_stranded_gpus_floor")
        reachable = "-" if floor is None else ("yes" if target >= floor else "no")
        usable = "avg_stranded_gpus_usable_when_queued"
        lines.append(
            f"| {label} | {load:g} | {_fmt(base['avg_stranded_gpus'])} | "
            f"{_fmt(base.get('avg_stranded_gpus_floor'))} | {_fmt(ours.get('avg_stranded_gpus'))} "
            f"| {_fmt(floor)} | {_fmt(target)} | {reachable} | "
            f"{_fmt_share(base.get('stranded_share_queue_empty'))} / "
            f"{_fmt_share(ours.get('stranded_share_queue_empty'))} | "
            f"{_fmt(base.get(usable))} / {_fmt(ours.get(usable))} |"
        )
    return lines


def _synthetic_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[str]:
    """One synthetic study's runs: a row per load and policy, raw figures."""
    cells = [
        [f"{r['load']:g}", f"`{r['policy']}`", *(_fmt(r["metrics"].get(m)) for m in metrics)]
        for r in rows
    ]
    return _table(("load", "policy"), metrics, cells)


#: Measurements on the real sandbox cluster (the baseline's validation, the live A/B): they take
#: minutes of real Slurm time and run by hand, so their tables and commands are kept in this
#: file and opened with, before the simulated ratios that rest on them.
EVIDENCE = Path(__file__).resolve().parents[1] / "evidence.md"


#: The same windows on three-tier Clos fabrics (``python -m benchmarks.tiers``, run by hand):
#: its stored figures, and the hand-written reading of them kept beside it.
TIERS_JSON = REPO / "docs" / "benchmarks" / "tiers.json"
TIERS_NOTE = Path(__file__).resolve().parents[1] / "tiers.md"


def _included(path: Path) -> list[str]:
    if not path.is_file():
        return []
    return [path.read_text(encoding="utf-8").rstrip("\n"), ""]


def _evidence() -> list[str]:
    return _included(EVIDENCE)


def _tiers() -> list[str]:
    if not TIERS_JSON.is_file():
        return []
    from benchmarks.tiers import section

    stored = json.loads(TIERS_JSON.read_text(encoding="utf-8"))
    return [*section(stored), "", *_included(TIERS_NOTE)]


def _updates(updates: Sequence[Mapping[str, Any]]) -> list[str]:
    """Which policy's rows were run again since (``--update``), when and by what command."""
    out = []
    for u in updates:
        out += [
            f"{u['date']}: the {u['rows']} runs of `{u['policy']}` made again "
            f"({u['wall_s']:.0f} s wall), every other row kept from the run above, by:",
            "",
            "```",
            u["command"],
            "```",
            "",
        ]
    return out


def render(doc: Mapping[str, Any]) -> str:
    """The Markdown of ``docs/benchmarks.md`` from the run's results."""
    out = [
        "# Benchmarks: slurmopt against Slurm's schedulers",
        "",
        "<!-- Generated by python -m benchmarks.policies; do not edit by hand: rerun it. -->",
        "",
        f"Generated {doc['date']} on {doc['machine']} by:",
        "",
        "```",
        doc["command"],
        "```",
        "",
        f"Whole run: {doc['wall_s']:.0f} s wall. Simulator and metrics: `docs/simulator.md`.",
        "",
        *_updates(doc.get("updates", ())),
        *_evidence(),
        *_summary(doc["comparison"]),
        "",
        "## Setup",
        "",
        "- Policies: `slurm-fifo` (Slurm `sched/builtin`), `slurm-backfill-tree` (Slurm "
        "`sched/backfill` + `topology/tree`, default `bf_*` settings) and `slurmopt` (the "
        "daemon's `plan()`). Ratios below are slurmopt / slurm-backfill-tree.",
        "- Loads 0.8, 1.0, 1.2: offered load as `--load` defines it (arrival times scaled, "
        "durations kept). At 1.2 the queue grows for the whole window by construction.",
        "- Communication penalty on (the simulator's default model); the contenders are run "
        "again with it off, the topology bound.",
        "- Gangs: a job of more than 8 GPUs becomes whole 8-GPU nodes (no trace records nodes).",
        f"- Cluster size rule: leaves of {NODES_PER_LEAF} nodes of {GPUS_PER_NODE} GPUs; enough "
        "nodes for the window's native average GPU demand (so load 1.0 is near the trace's own "
        f"arrival rate) and for {LARGEST_JOB_COPIES} copies of its largest job, at least 2 leaves "
        "when the window has multi-node jobs, rounded up to whole leaves.",
        "",
        "| trace | file | window | jobs | multi-node jobs | native demand (GPUs) | fabric | GPUs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in doc["traces"]:
        window = t["window"]
        out.append(
            f"| {t['label']} | `{t['file']}` | {window} | {t['jobs']:,} | {t['multinode']} | "
            f"{t['demand']:,.0f} | `{t['fabric']}` | {t['gpus']:,} |"
        )
    errors = sorted({f"{r['label']} at load {r['load']:g}: {r['error']}" for r in doc["rows"]
                     if "error" in r})  # fmt: skip
    if errors:
        out += ["", "Not run (the window cannot offer that load on its cluster):", ""]
        out += [f"- {e}" for e in errors]
    out += [
        "",
        "What each load means for each window: the arrival scale `--load` chose (the offered "
        "load is the window's whole work, GPUs x duration, over capacity x the arrival window), "
        "the arrival window it gives, and the share of the work that would still run after the "
        "last arrival if every job started on arrival: that part is a drain at any load.",
        "",
        "| trace | load | arrival scale | arrival window (h) | work after the last arrival |",
        "|---|---|---|---|---|",
    ]
    for w in doc.get("windows", []):
        out.append(
            f"| {w['label']} | {w['load']:g} | {_fmt(w['arrival_scale'])} | "
            f"{_fmt(w['window_h'])} | {w['after_last_arrival']:.0%} |"
        )
    out += [
        "",
        "## slurmopt / slurm-backfill-tree (penalty on)",
        "",
        "Targets: `avg_jct_s`, `p95_queue_delay_s` and `avg_slowdown` ratio <= 1.02; "
        "`avg_stranded_gpus` <= 0.5; `avg_wait_multinode_s` below 1; "
        "`gpu_allocation_ratio_when_queued` (allocation while jobs queue) above 1; "
        "`avg_leaves_spanned_multinode` at most 1. A missed target is in bold and named in the "
        "last column with the cause the figures show. `gpu_allocation_ratio` over the whole run "
        "is shown without a target: with the same jobs it differs only through the makespan.",
        "",
        *_ratio_table(doc["comparison"]),
        "",
        "### Over each trace's windows",
        "",
        "The geometric mean of each ratio over a trace's windows, and in how many windows the "
        "target was met (a ratio of 0, when slurmopt's figure is 0, counts as met and is left "
        "out of the mean):",
        "",
        *_across_table(across_windows(doc["comparison"], doc["traces"])),
        "",
        "### Stranded GPUs: the packing floor, and when they are stranded",
        "",
        "The floor (`avg_stranded_gpus_floor`, docs/simulator.md) is what a perfect repacking "
        "of the jobs running at each instant would strand: jobs smaller than a node need whole "
        "nodes between them, so `-S mod 8` GPUs stay free beside `S` GPUs of such jobs. No "
        "placement gets below it without changing which jobs run (elastic jobs growing into the "
        "gaps, migration). Where the target is under slurmopt's floor, only that could meet it.",
        "",
        "The last two columns say when the GPUs are stranded. With nobody waiting "
        "(`stranded_share_queue_empty`) a stranded GPU is spare capacity no job is kept from; "
        "placement fills such gaps with the jobs that arrive, and the rest only moving a running "
        "job could pack. "
        "While jobs wait, `avg_stranded_gpus_usable_when_queued` counts the stranded GPUs on "
        "nodes with room for the smallest per-node ask of a waiting job: capacity a waiting job "
        "could use by size but does not get (a reservation holds the node, or the job needs "
        "more nodes); the other stranded GPUs are too few on their node for any job that waits.",
        "",
        *_floor_table(doc["rows"]),
        "",
        "## The same with the penalty off (the topology bound)",
        "",
        *_ratio_table(doc["comparison_off"]),
        "",
        "What the penalty costs each policy (avg JCT on / off - 1; 0% means placement cost "
        "nothing, the bound reached):",
        "",
        *_bound_table(doc["rows"]),
        "",
        "## Levers, one at a time (penalty on)",
        "",
        "Variants of `slurmopt` (`--policy 'slurmopt:KEY=VALUE'`, docs/simulator.md), each "
        "against slurm-backfill-tree in the same run, on every window; the table gives each "
        "ratio's geometric mean over a trace's windows, the default `slurmopt` row first. The "
        "counts below are over single (window, load, metric) cells.",
        "",
        *lever_summary(doc["levers"]),
        "",
        *_lever_table(doc["levers"], doc["traces"]),
        "",
        "## Preemption (synthetic workload)",
        "",
        "No public trace marks jobs preemptible, so this lever runs on a seeded synthetic "
        f"workload (`--trace-format synthetic --trace '{PREEMPT_TRACE}'`: the generator's "
        "default job-size mix and lognormal run times, half the jobs preemptible) on "
        f"`{PREEMPT_FABRIC}`, penalty on. `slurmopt` preempts as the daemon does (signal, "
        "checkpoint acknowledged after 60 s, requeue, 120 s restart, only when it pays); "
        "`slurmopt:preempt=off` is the same planner without it.",
        "",
        *_synthetic_table(doc.get("preempt_rows", []), PREEMPT_METRICS),
        "",
        "## Elastic jobs (synthetic workload)",
        "",
        "No public trace marks jobs elastic either: the same generator with half the multi-node "
        f"jobs elastic (`--trace '{ELASTIC_TRACE}'`: each runs on half its nodes up to all, its "
        f"time limit the budget at half), on `{PREEMPT_FABRIC}`, penalty on. `slurmopt` starts an "
        "elastic job that cannot get all its nodes on fewer when that finishes sooner "
        "(docs/planner.md); the simulator runs it `nodes asked / nodes given` times longer. "
        "`slurmopt:elastic=off` is the same planner starting every job whole, as the baseline "
        "does.",
        "",
        *_synthetic_table(doc.get("elastic_rows", []), ELASTIC_METRICS),
        "",
        *_tiers(),
        "## All figures",
        "",
    ]
    for t in doc["traces"]:
        for penalty in (True, False):
            out += [f"### {t['label']}, penalty {'on' if penalty else 'off'}", ""]
            out += _metric_table(doc["rows"], t["label"], penalty) + [""]
    plot = doc.get("plot")
    if plot:
        out += [
            "## Over time",
            "",
            f"{plot['what']}: GPU allocation and pending jobs over time.",
            "",
            f"![allocation and queue over time]({plot['file']})",
            "",
        ]
    fill = doc.get("fill")
    if fill:
        out += [
            "## openb in arrival-fill mode",
            "",
            f"`--mode fill` on openb's default pod list and node list ({fill['gpus']:,} GPUs), "
            f"seed(s) {', '.join(map(str, fill['seeds']))}, tasks drawn until 130% of the GPUs "
            "is asked for; GPU allocation at 130%. Published figures: mean of 10 seeds from "
            "`fgd-results`.",
            "",
            "| policy | GPU allocation at 130% | GPU tasks turned away | wall (s) |",
            "|---|---|---|---|",
        ]
        for name, value in fill["published"].items():
            out.append(f"| published {name} | {value:.2f}% | - | - |")
        for r in fill["runs"]:
            out.append(
                f"| `{r['policy']}` (seed {r['seed']}) | {r['allocation_pct']:.2f}% | "
                f"{r['rejected_gpu_pods']:,} | {r['wall_s']:.0f} |"
            )
        out += ["", fill["verdict"], ""]
        if fill.get("plot"):
            out += [f"![allocation against GPUs asked for]({fill['plot']})", ""]
    return "\n".join(out).rstrip() + "\n"


def _fill_verdict(runs: Sequence[Mapping[str, Any]], published: Mapping[str, float]) -> str:
    by = {r["policy"]: r["allocation_pct"] for r in runs}
    ours, best = by.get("slurmopt"), by.get("best-fit")
    if ours is None or best is None:
        return ""
    text = f"slurmopt minus best-fit: {ours - best:+.2f} points"
    if "FGD" in published:
        text += f"; slurmopt minus published FGD: {ours - published['FGD']:+.2f} points"
    if ours <= best:
        text += (
            ". slurmopt is NOT better here: fill mode's share approximation (the planner sees "
            "whole GPUs only, a device with a share on it counts as taken, and shares are packed "
            "without regard to FGD) fragments more than best fit on a trace where a large part "
            "of the GPU pods ask for a fraction of a GPU."
        )
    else:
        text += "."
    return text
