"""Ratios against the baseline, the targets they meet, and the measured cause of each miss."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from benchmarks.policies.settings import (
    ACROSS_EXTRA,
    LEVER_METRICS,
    LEVERS,
    METRICS,
    NO_QUEUE_S,
    TARGETS,
    TIE,
)


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """slurmopt / baseline; None when either is missing or the baseline is 0 and ours is not."""
    if ours is None or theirs is None:
        return None
    if theirs == 0:
        return 1.0 if ours == 0 else None
    return ours / theirs


def meets(metric: str, value: float | None) -> bool | None:
    """Whether a ratio meets the metric's target (None: no target or no ratio)."""
    if value is None or metric not in TARGETS:
        return None
    op, bound = TARGETS[metric]
    return {"<=": value <= bound, "<": value < bound, ">": value > bound}[op]


def shortfall_reason(
    metric: str,
    ours: Mapping[str, Any],
    base: Mapping[str, Any],
    gang: tuple[str, float, float] | None = None,
) -> str:
    """A short cause for a missed target, when the figures show one.

    ``gang`` is :func:`worst_gang` of the two runs, when their per-job waits are known.
    """
    if metric == "avg_stranded_gpus":
        if (base.get("avg_stranded_gpus") or 0) < 1:
            return "backfill strands under one GPU on average already"
        target = TARGETS["avg_stranded_gpus"][1] * base["avg_stranded_gpus"]
        floor = ours.get("avg_stranded_gpus_floor")
        if floor is not None and floor > target:
            return (
                f"below the packing floor: the target is {target:.2f} GPUs, and any packing of "
                f"the jobs slurmopt runs strands at least {floor:.2f} (it strands "
                f"{ours.get('avg_stranded_gpus', 0):.2f})"
            )
        idle = ours.get("stranded_share_queue_empty")
        if idle is not None and idle >= 0.5:
            usable = ratio(
                ours.get("avg_stranded_gpus_usable_when_queued"),
                base.get("avg_stranded_gpus_usable_when_queued"),
            )
            while_waiting = (
                ""
                if usable is None
                else (
                    f"; while jobs wait, the stranded GPUs a waiting job could use are "
                    f"{usable:.2f}x backfill's "
                    f"({_fmt(ours.get('avg_stranded_gpus_usable_when_queued'))} vs "
                    f"{_fmt(base.get('avg_stranded_gpus_usable_when_queued'))})"
                )
            )
            return (
                f"{idle:.0%} of slurmopt's stranded GPU-time "
                f"({_fmt_share(base.get('stranded_share_queue_empty'))} of backfill's) is with "
                f"nobody waiting: spare capacity no job is kept from, which only moving running "
                f"jobs would pack{while_waiting}"
            )
    if base.get("p95_queue_delay_s") is not None and base["p95_queue_delay_s"] < NO_QUEUE_S:
        return "load too low to queue (backfill's p95 delay under 1 min)"
    if metric in ("avg_wait_multinode_s", "avg_leaves_spanned_multinode"):
        if not base.get("multinode_jobs"):
            return "no multi-node jobs in the window"
        tied = ratio(ours.get(metric), base.get(metric))
        if tied is not None and abs(tied - 1) < TIE:
            return f"a tie (within {TIE:.1%}): these jobs start at nearly the same times under both"
        done = ratio(ours.get("avg_jct_multinode_s"), base.get("avg_jct_multinode_s"))
        if metric == "avg_wait_multinode_s" and done is not None and done < 1:
            return (
                f"gangs wait longer for compact placements but finish sooner (their mean "
                f"completion time x{done:.3f})"
            )
        if metric == "avg_wait_multinode_s":
            causes = []
            if (ours.get("avg_leaves_spanned_multinode") or 0) < (
                base.get("avg_leaves_spanned_multinode") or 0
            ):
                causes.append("gangs wait for one leaf instead of spreading (fewer leaves spanned)")
            causes.append(_one_gang_carries(ours, base, gang))
            if any(causes):
                return "; ".join(c for c in causes if c)
    if metric == "avg_stranded_gpus":
        queued = ratio(
            ours.get("avg_stranded_gpus_when_queued"), base.get("avg_stranded_gpus_when_queued")
        )
        if queued is not None and queued <= TARGETS["avg_stranded_gpus"][1]:
            return (
                f"while jobs wait slurmopt strands {queued:.2f}x; the rest is free GPUs on "
                "partly used nodes with nobody waiting for them"
            )
        if (ours.get("avg_leaves_spanned_multinode") or 0) < (
            base.get("avg_leaves_spanned_multinode") or 0
        ):
            return (
                "consistent with partly used nodes held for one-leaf gang reservations "
                "(fewer leaves spanned)"
            )
    if metric == "gpu_allocation_ratio_when_queued":
        if base.get("gpu_allocation_ratio_when_queued") is None:
            return "no job ever waited under backfill"
        idle = idle_split(ours, base)
        tied = ratio(ours.get(metric), base.get(metric))
        if tied is not None and abs(tied - 1) < TIE:
            return f"a tie (within {TIE:.1%}){idle}"
        if idle:
            return idle.lstrip("; ")
    if ours.get("never_started") or base.get("never_started"):
        return "jobs left pending at the end of the window (overload)"
    return "no single cause visible in these figures"


def worst_gang(
    ours: Mapping[str, float] | None, base: Mapping[str, float] | None
) -> tuple[str, float, float] | None:
    """The multi-node job that waited longest beyond its wait under backfill: (id, ours, base)."""
    if not ours or not base:
        return None
    common = [j for j in ours if j in base]
    if not common:
        return None
    job = max(common, key=lambda j: (ours[j] - base[j], j))
    return job, ours[job], base[job]


def _one_gang_carries(
    ours: Mapping[str, Any], base: Mapping[str, Any], gang: tuple[str, float, float] | None
) -> str:
    """Whether one gang's extra wait makes most of the difference in the mean gang wait."""
    n = base.get("multinode_jobs") or 0
    mean_o, mean_b = ours.get("avg_wait_multinode_s"), base.get("avg_wait_multinode_s")
    if gang is None or not n or mean_o is None or mean_b is None or mean_o <= mean_b:
        return ""
    job, wait_o, wait_b = gang
    if wait_o - wait_b < 0.5 * n * (mean_o - mean_b):
        return ""
    return (
        f"one gang makes most of the difference: job {job} waited {_fmt(wait_o)} s against "
        f"{_fmt(wait_b)} s under backfill ({n} multi-node jobs)"
    )


def idle_split(ours: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """While jobs wait: idle GPUs under each policy, stranded ones and whole free nodes' ones."""
    idle_o, idle_b = (m.get("avg_idle_gpus_when_queued") for m in (ours, base))
    st_o, st_b = (m.get("avg_stranded_gpus_when_queued") for m in (ours, base))
    if idle_o is None or idle_b is None or st_o is None or st_b is None:
        return ""
    return (
        f"; while jobs wait slurmopt leaves {_fmt(idle_o)} GPUs idle against {_fmt(idle_b)}: "
        f"{_fmt(st_o)} vs {_fmt(st_b)} stranded on partly used nodes, "
        f"{_fmt(idle_o - st_o)} vs {_fmt(idle_b - st_b)} on whole free nodes (kept for a "
        f"reservation, or too few for the jobs that wait)"
    )


def by_case(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, float, bool, str], Any]:
    """Each run's metrics by (trace, load, penalty, policy)."""
    return {(r["label"], r["load"], r["penalty"], r["policy"]): r["metrics"] for r in rows}


def compare(rows: Sequence[Mapping[str, Any]], penalty: bool = True) -> list[dict[str, Any]]:
    """Per (trace, load): slurmopt / slurm-backfill-tree for every metric, and what fell short."""
    index = by_case(rows)
    waits = {(r["label"], r["load"], r["penalty"], r["policy"]): r.get("gang_waits") for r in rows}
    out = []
    keys = sorted({(r["label"], r["load"]) for r in rows if r["penalty"] == penalty})
    order = {label: i for i, label in enumerate(dict.fromkeys(r["label"] for r in rows))}
    for label, load in sorted(keys, key=lambda k: (order[k[0]], k[1])):
        ours = index.get((label, load, penalty, "slurmopt"))
        base = index.get((label, load, penalty, "slurm-backfill-tree"))
        if not ours or not base:
            continue
        ratios = {m: ratio(ours.get(m), base.get(m)) for m in METRICS}
        gang = worst_gang(
            waits.get((label, load, penalty, "slurmopt")),
            waits.get((label, load, penalty, "slurm-backfill-tree")),
        )
        missed = {
            m: shortfall_reason(m, ours, base, gang)
            for m in TARGETS
            if meets(m, ratios[m]) is False
        }
        if not base.get("multinode_jobs"):
            missed["multi-node metrics"] = "n/a, no multi-node jobs in the window"
        out.append({"label": label, "load": load, "ratios": ratios, "missed": missed})
    return out


def across_windows(
    comparison: Sequence[Mapping[str, Any]], traces: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per trace and load, over its windows: each target metric's geometric-mean ratio and
    in how many windows the target was met."""
    family = {t["label"]: t.get("trace", t["label"]) for t in traces}
    groups: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    for c in comparison:
        groups.setdefault((family.get(c["label"], c["label"]), c["load"]), []).append(c)
    out = []
    for (trace, load), rows in groups.items():
        cells: dict[str, tuple[float | None, int, int]] = {}
        for m in (*TARGETS, *ACROSS_EXTRA):
            values = [r["ratios"][m] for r in rows if r["ratios"].get(m) is not None]
            cells[m] = (_geomean(values), sum(bool(meets(m, v)) for v in values), len(values))
        out.append({"trace": trace, "load": load, "windows": len(rows), "cells": cells})
    return out


CAUSE_KINDS = (
    ("a tie", "a tie (within 0.5%)"),
    ("load too low", "load too low to queue"),
    ("below the packing floor", "target below the packing floor"),
    ("no multi-node jobs", "no multi-node jobs"),
    ("one gang makes", "one gang's wait"),
    ("gangs wait for one leaf", "gangs wait for one leaf"),
    ("gangs wait longer", "gangs wait longer but finish sooner"),
    ("while jobs wait slurmopt leaves", "more GPUs idle while jobs wait (split in the table)"),
    ("while jobs wait slurmopt strands", "stranding while jobs wait is low"),
    ("consistent with", "consistent with partly used nodes held for gang reservations"),
    ("backfill strands under one", "backfill strands under one GPU"),
    ("jobs left pending", "overload"),
    ("no job ever waited", "no job waited"),
)


def cause_kind(reason: str) -> str:
    """A short name for a shortfall's cause, for the summary."""
    for opening, kind in CAUSE_KINDS:
        if reason.startswith(opening):
            return kind
    if "stranded GPU-time" in reason and "nobody waiting" in reason:
        return "most stranding with nobody waiting"
    return "no single cause visible"


def _fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def lever_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per trace, load and slurmopt variant (default first): ratios to slurm-backfill-tree."""
    index = {(r["label"], r["load"], r["policy"]): r["metrics"] for r in rows if r["penalty"]}
    names = ["slurmopt", *(name for name, _ in LEVERS)]
    out = []
    for label, load, policy in index:
        if policy != "slurm-backfill-tree":
            continue
        base = index[(label, load, policy)]
        for name in names:
            ours = index.get((label, load, name))
            if ours:
                ratios = {m: ratio(ours.get(m), base.get(m)) for m in LEVER_METRICS}
                out.append({"label": label, "load": load, "policy": name, "ratios": ratios})
    return out


def _geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there is none)."""
    positive = [v for v in values if v is not None and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in positive)) if positive else None
