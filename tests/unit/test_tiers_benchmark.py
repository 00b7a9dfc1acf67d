"""``benchmarks.tiers``' pure parts on a tiny synthetic window (no replay, no real traces)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.policies import size_cluster
from benchmarks.tiers import (
    BASELINE,
    CONTENDER,
    cell_rows,
    clos_layout,
    clos_spec,
    section,
    table,
)
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.traces import Trace, TraceJob


def _window(gang_nodes: int) -> Trace:
    """Forty single-node jobs and one gang of ``gang_nodes`` nodes, one an hour."""
    jobs = [TraceJob(i, 3600.0 * i, 7200.0, 1, 8, 14400, 8) for i in range(40)] + [
        TraceJob(40, 3600.0 * 40, 7200.0, gang_nodes, 8, 14400, 8 * gang_nodes)
    ]
    return Trace("synthetic", "synthetic", tuple(jobs))


@pytest.mark.parametrize("gang_nodes", [1, 2, 4, 16])
def test_clos_has_at_least_two_pods_three_tiers_and_the_leaf_spines_nodes(gang_nodes: int) -> None:
    leaf_spine, _ = size_cluster(_window(gang_nodes))
    pods, per_pod, nodes = clos_layout(leaf_spine)
    assert pods >= 2 and per_pod >= 2  # every pod's spine joins leaves
    assert nodes >= leaf_spine
    assert nodes - leaf_spine < max(per_pod * 8, 32)  # rounded up by less than a pod
    fabric = parse_fabric_spec(clos_spec(leaf_spine, 2.0))
    assert len(fabric.compute_nodes) == nodes
    assert max(fabric.tiers().tier.values()) == 2  # leaf, pod, core


def _run(label: str, load: float, policy: str, jct: float, p95: float, tier: float) -> Any:
    metrics = {
        "avg_jct_s": jct,
        "p95_queue_delay_s": p95,
        "avg_tier_multinode": tier,
        "multinode_above_best_tier": 3 if policy == CONTENDER else 1,
    }
    return {"label": label, "load": load, "policy": policy, "metrics": metrics}


def test_rows_and_table_from_given_results() -> None:
    results = [
        _run("w", 1.0, BASELINE, 100.0, 50.0, 1.5),
        _run("w", 1.0, CONTENDER, 101.0, 40.0, 1.25),
        _run("w", 1.2, BASELINE, 100.0, 0.0, 1.0),
        _run("w", 1.2, CONTENDER, 110.0, 0.0, 2.0),
        {"label": "w", "load": 0.8, "policy": BASELINE, "metrics": {}, "error": "too low"},
        {"label": "w", "load": 0.8, "policy": CONTENDER, "metrics": {}, "error": "too low"},
    ]
    rows = cell_rows(results, {"w": "clos:2:1:8:2"})
    assert [(r["load"], r["within"]) for r in rows] == [(1.0, True), (1.2, False), (0.8, False)]
    assert rows[0]["avg_jct_s"] == pytest.approx(1.01)
    assert rows[0]["p95_queue_delay_s"] == pytest.approx(0.8)
    assert rows[1]["p95_queue_delay_s"] == 1.0  # no wait under either: a tie
    assert rows[0]["avg_tier_multinode"] == {BASELINE: 1.5, CONTENDER: 1.25}
    lines = table(rows)
    assert lines[2] == "| w | 1.0 | `clos:2:1:8:2` | 1.010 | 0.800 | 1.50 / 1.25 | 1 / 3 |"
    assert "not run: too low" in lines[4]
    assert lines[-1] == "1 of 3 cells within <= 1.02 on both ratios."


def test_section_says_command_and_date_and_ends_with_the_count() -> None:
    results = [
        _run("w", 1.0, BASELINE, 100.0, 50.0, 1.5),
        _run("w", 1.0, CONTENDER, 99.0, 50.0, 1.0),
    ]
    doc = {
        "date": "2000-01-01",
        "machine": "test, nproc 1",
        "command": "python -m benchmarks.tiers --workers 2",
        "wall_s": 1.0,
        "oversub": 2.0,
        "rows": cell_rows(results, {"w": "clos:2:1:8:2"}),
    }
    lines = section(doc)
    assert lines[0] == "## Three-tier fabrics"
    assert "python -m benchmarks.tiers --workers 2" in lines
    assert "2000-01-01" in lines[2] and "2:1" in lines[2]
    assert lines[-1] == "1 of 1 cells within <= 1.02 on both ratios."


def test_a_variant_contender_is_compared_and_named() -> None:
    variant = "slurmopt:compact_wait_share=0.05"
    results = [
        _run("w", 1.0, BASELINE, 100.0, 50.0, 1.5),
        _run("w", 1.0, CONTENDER, 50.0, 10.0, 1.0),  # not the contender: left out
        _run("w", 1.0, variant, 102.0, 55.0, 0.5),
    ]
    rows = cell_rows(results, {"w": "clos:2:1:8:2"}, variant)
    assert rows[0]["avg_jct_s"] == pytest.approx(1.02)
    assert rows[0]["avg_tier_multinode"] == {BASELINE: 1.5, variant: 0.5}
    lines = table(rows, variant)
    assert f"(backfill / {variant})" in lines[0]
    assert lines[2] == "| w | 1.0 | `clos:2:1:8:2` | 1.020 | 1.100 | 1.50 / 0.50 | 1 / 1 |"
