"""Smoke test of ``benchmarks.policies`` on the tiny trace fixtures (never the real traces)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"


import benchmarks.policies as bench  # noqa: E402 - after the fixture paths


def test_cluster_rule_holds_four_copies_of_the_largest_job_on_whole_leaves() -> None:
    trace = bench.load_window(str(FIXTURES / "philly.csv"), "philly-sia", None)
    nodes, demand = bench.size_cluster(trace)
    largest = max(j.nodes for j in trace.jobs)
    assert largest > 1  # the fixture has a 16-GPU gang
    assert nodes % bench.NODES_PER_LEAF == 0
    assert nodes >= bench.LARGEST_JOB_COPIES * largest
    assert nodes >= 2 * bench.NODES_PER_LEAF  # gangs need at least two leaves to choose from
    assert demand > 0


def _doc(jobs: int, nodes: int, rows: list[Any], preempt_rows: list[Any]) -> dict[str, Any]:
    """A stored run of the tiny window ``tiny`` (as ``policies.json`` holds one)."""
    return {
        "date": "2000-01-01",
        "machine": "test, nproc 1",
        "command": "python -m benchmarks.policies",
        "wall_s": 1.0,
        "traces": [
            {
                "label": "tiny",
                "file": "tiresias.csv",
                "limit_jobs": None,
                "window": "whole file",
                "trace": "tiny",
                "jobs": jobs,
                "multinode": 1,
                "demand": 1.0,
                "fabric": bench.fabric_spec(nodes),
                "gpus": nodes * 8,
            }
        ],
        "rows": rows,
        "comparison": bench.compare(rows),
        "comparison_off": [],
        "levers": bench.lever_rows(rows),
        "preempt_rows": preempt_rows,
        "elastic_rows": [],
        "plot": None,
        "fill": None,
    }


def test_replay_compare_and_render_on_a_fixture() -> None:
    trace = bench.load_window(str(FIXTURES / "tiresias.csv"), "tiresias", None)
    nodes, _ = bench.size_cluster(trace)
    rows = []
    for policy in ("slurm-backfill-tree", "slurmopt", "slurmopt:runtime=oracle"):
        case = bench.Case(
            "tiny", str(FIXTURES / "tiresias.csv"), "tiresias", None, bench.fabric_spec(nodes),
            0.01, True, policy,
        )  # fmt: skip
        row = bench.run_case(case, series=True)
        assert "error" not in row, row
        assert row["metrics"]["finished"] == len(trace.jobs)
        assert row["series"]
        row.pop("series")
        rows.append(row)
    synthetic = "jobs=40,preemptible=0.5,seed=3"
    preempt_case = bench.Case(
        "synthetic", synthetic, "synthetic", None, "fat-tree:4:2", 1.2, True, "slurmopt"
    )
    preempt_row = bench.run_case(preempt_case)
    assert preempt_row["metrics"]["finished"] == 40
    comparison = bench.compare(rows)
    assert [(c["label"], c["load"]) for c in comparison] == [("tiny", 0.01)]
    assert set(comparison[0]["ratios"]) == set(bench.METRICS)
    text = bench.render(_doc(len(trace.jobs), nodes, rows, [preempt_row]))
    assert "| tiny | 0.01 |" in text
    assert "python -m benchmarks.policies" in text
    levers = bench.lever_rows(rows)
    assert [r["policy"] for r in levers] == ["slurmopt", "slurmopt:runtime=oracle"]
    assert "| tiny | 0.01 | 1 | `slurmopt:runtime=oracle` |" in text
    assert "- `slurmopt:runtime=oracle` (true run times" in text
    assert "| 1.2 | `slurmopt` |" in text and "## Preemption (synthetic workload)" in text
    assert "### Over each trace's windows" in text and "| tiny | 0.01 | 1 |" in text


def test_across_windows_takes_the_geometric_mean_and_counts_the_windows_met() -> None:
    traces = [{"label": "t", "trace": "t"}, {"label": "t #2", "trace": "t"}]
    base = {m: None for m in bench.METRICS}
    comparison: list[dict[str, Any]] = [
        {"label": "t", "load": 1.0, "ratios": {**base, "avg_jct_s": 0.5}},
        {"label": "t #2", "load": 1.0, "ratios": {**base, "avg_jct_s": 2.0}},
        {"label": "t", "load": 1.2, "ratios": {**base, "avg_jct_s": 0.9}},
    ]
    rows = bench.across_windows(comparison, traces)
    assert [(r["trace"], r["load"], r["windows"]) for r in rows] == [("t", 1.0, 2), ("t", 1.2, 1)]
    mean, met, n = rows[0]["cells"]["avg_jct_s"]
    assert mean == pytest.approx(1.0) and (met, n) == (1, 2)
    assert rows[0]["cells"]["avg_stranded_gpus"] == (None, 0, 0)


def test_later_windows_are_labelled_and_skip_the_jobs_before_them() -> None:
    specs = bench._windows("tr", "csv", "tr.csv", 100, (0, 300))
    got = [(s.label, s.skip_jobs, s.trace) for s in specs]
    assert got == [("tr", 0, "tr"), ("tr #4", 300, "tr")]
    assert specs[1].window_text(100) == "jobs 301-400 by submit"


def test_ratio_targets() -> None:
    assert bench.ratio(2.0, 4.0) == 0.5
    assert bench.ratio(0.0, 0.0) == 1.0
    assert bench.ratio(1.0, 0.0) is None
    assert bench.meets("avg_jct_s", 1.02) is True
    assert bench.meets("avg_jct_s", 1.03) is False
    assert bench.meets("avg_stranded_gpus", 0.6) is False
    assert bench.meets("gpu_allocation_ratio_when_queued", 1.0) is False
    assert bench.meets("gpu_allocation_ratio", 0.5) is None


def test_fill_run_and_published_curve_on_fixtures() -> None:
    case = bench.FillCase(
        str(FIXTURES / "openb-fill.csv"), str(FIXTURES / "openb-nodes.csv"), "best-fit", 42
    )
    result = bench.run_fill(case)
    assert result["gpus"] == 10
    assert 0 < result["allocation_pct"] <= 100
    curves = bench.published_curves(
        FIXTURES / "fgd-results.csv", "openb_pod_list_default", ("BestFit",)
    )
    assert curves["BestFit"] == [(0, 0.0), (1, 1.0), (2, pytest.approx(1.95))]


def test_missing_traces_fail_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(["--traces", str(tmp_path / "nowhere"), "--out", str(tmp_path)])
    assert info.value.code == 66
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no traces directory" in err
    assert not (tmp_path / "benchmarks.md").exists()


def test_stranded_shortfall_names_the_idle_time_when_waiting_jobs_lose_less() -> None:
    base = {
        "avg_stranded_gpus": 4.0,
        "avg_stranded_gpus_when_queued": 2.0,
        "p95_queue_delay_s": 900,
    }
    ours = {
        "avg_stranded_gpus": 3.0,
        "avg_stranded_gpus_when_queued": 0.5,
        "p95_queue_delay_s": 600,
    }
    why = bench.shortfall_reason("avg_stranded_gpus", ours, base)
    assert why.startswith("while jobs wait slurmopt strands 0.25x")
    ours["avg_stranded_gpus_when_queued"] = 1.5
    assert bench.shortfall_reason("avg_stranded_gpus", ours, base) == (
        "no single cause visible in these figures"
    )


def test_stranded_shortfall_names_the_share_with_nobody_waiting_when_it_dominates() -> None:
    base = {
        "avg_stranded_gpus": 4.0,
        "stranded_share_queue_empty": 0.8,
        "avg_stranded_gpus_usable_when_queued": 2.0,
        "p95_queue_delay_s": 900,
    }
    ours = {
        "avg_stranded_gpus": 3.0,
        "stranded_share_queue_empty": 0.9,
        "avg_stranded_gpus_usable_when_queued": 0.5,
        "p95_queue_delay_s": 600,
    }
    why = bench.shortfall_reason("avg_stranded_gpus", ours, base)
    assert why.startswith("90% of slurmopt's stranded GPU-time (80% of backfill's)")
    assert "0.25x backfill's (0.5 vs 2)" in why
    ours["stranded_share_queue_empty"] = 0.3  # most stranding is while jobs wait: no excuse
    assert "nobody waiting" not in bench.shortfall_reason("avg_stranded_gpus", ours, base)


def test_allocation_shortfall_splits_the_idle_gpus_and_names_a_tie() -> None:
    base = {
        "gpu_allocation_ratio_when_queued": 0.9,
        "avg_idle_gpus_when_queued": 6.0,
        "avg_stranded_gpus_when_queued": 3.0,
        "p95_queue_delay_s": 900,
    }
    ours = dict(base, gpu_allocation_ratio_when_queued=0.88, avg_idle_gpus_when_queued=10.0)
    ours["avg_stranded_gpus_when_queued"] = 2.0
    why = bench.shortfall_reason("gpu_allocation_ratio_when_queued", ours, base)
    assert why.startswith("while jobs wait slurmopt leaves 10 GPUs idle against 6")
    assert "8 vs 3 on whole free nodes" in why
    ours["gpu_allocation_ratio_when_queued"] = 0.8999
    assert bench.shortfall_reason("gpu_allocation_ratio_when_queued", ours, base).startswith(
        "a tie (within 0.5%); while jobs wait"
    )


def test_stranded_shortfall_names_the_packing_floor_when_the_target_is_under_it() -> None:
    base = {"avg_stranded_gpus": 4.0, "avg_stranded_gpus_floor": 2.5, "p95_queue_delay_s": 900}
    ours = {"avg_stranded_gpus": 3.0, "avg_stranded_gpus_floor": 2.4, "p95_queue_delay_s": 600}
    why = bench.shortfall_reason("avg_stranded_gpus", ours, base)
    assert why.startswith("below the packing floor: the target is 2.00 GPUs")
    assert "at least 2.40" in why
    ours["avg_stranded_gpus_floor"] = 1.5  # reachable: the floor is no excuse
    assert not bench.shortfall_reason("avg_stranded_gpus", ours, base).startswith("below")


def test_multinode_wait_within_half_a_percent_is_named_a_tie() -> None:
    base = {"avg_wait_multinode_s": 1000.0, "multinode_jobs": 5, "p95_queue_delay_s": 900}
    ours = {"avg_wait_multinode_s": 1001.0, "multinode_jobs": 5, "p95_queue_delay_s": 600}
    assert bench.shortfall_reason("avg_wait_multinode_s", ours, base).startswith("a tie")
    ours["avg_wait_multinode_s"] = 1100.0
    assert not bench.shortfall_reason("avg_wait_multinode_s", ours, base).startswith("a tie")


def test_longer_multinode_wait_with_sooner_completion_is_named() -> None:
    base = {"avg_wait_multinode_s": 1000.0, "avg_jct_multinode_s": 9000.0, "multinode_jobs": 5,
            "p95_queue_delay_s": 900}  # fmt: skip
    ours = {"avg_wait_multinode_s": 1500.0, "avg_jct_multinode_s": 8100.0, "multinode_jobs": 5,
            "p95_queue_delay_s": 600}  # fmt: skip
    why = bench.shortfall_reason("avg_wait_multinode_s", ours, base)
    assert why.endswith("(their mean completion time x0.900)")
    ours["avg_jct_multinode_s"] = 9900.0
    assert "finish sooner" not in bench.shortfall_reason("avg_wait_multinode_s", ours, base)


def test_stranded_shortfall_in_a_window_without_multinode_jobs() -> None:
    base = {"avg_stranded_gpus": 4.0, "avg_leaves_spanned_multinode": None,
            "p95_queue_delay_s": 900}  # fmt: skip
    ours = {"avg_stranded_gpus": 3.0, "avg_leaves_spanned_multinode": None,
            "p95_queue_delay_s": 600}  # fmt: skip
    assert bench.shortfall_reason("avg_stranded_gpus", ours, base) == (
        "no single cause visible in these figures"
    )


def test_multinode_wait_shortfall_names_the_gang_that_carries_the_mean() -> None:
    base = {
        "avg_wait_multinode_s": 1000.0,
        "multinode_jobs": 10,
        "avg_leaves_spanned_multinode": 1.5,
        "p95_queue_delay_s": 900,
    }
    ours = dict(base, avg_wait_multinode_s=1300.0)
    # 10 gangs, 3000 s more waiting in all; job 7 alone waited 2000 s longer.
    gang = bench.worst_gang({"3": 500.0, "7": 6000.0, "9": 100.0}, {"3": 400.0, "7": 4000.0})
    assert gang == ("7", 6000.0, 4000.0)
    why = bench.shortfall_reason("avg_wait_multinode_s", ours, base, gang)
    assert why == (
        "one gang makes most of the difference: job 7 waited 6,000 s against 4,000 s under "
        "backfill (10 multi-node jobs)"
    )
    ours["avg_leaves_spanned_multinode"] = 1.0  # both causes at once
    assert bench.shortfall_reason("avg_wait_multinode_s", ours, base, gang).startswith(
        "gangs wait for one leaf instead of spreading (fewer leaves spanned); one gang"
    )
    ours["avg_leaves_spanned_multinode"] = 1.5
    spread_thin = ("7", 4500.0, 4000.0)  # 500 s of the 3000 s: not one gang's doing
    assert bench.shortfall_reason("avg_wait_multinode_s", ours, base, spread_thin) == (
        "no single cause visible in these figures"
    )
    assert bench.worst_gang(None, {"1": 0.0}) is None


def test_summary_counts_met_cells_and_groups_misses_by_cause() -> None:
    comparison: list[dict[str, Any]] = [
        {"ratios": {"avg_jct_s": 0.9, "avg_stranded_gpus": 0.8}, "missed": {
            "avg_stranded_gpus": "below the packing floor: the target is 2.00 GPUs"}},
        {"ratios": {"avg_jct_s": 1.1, "avg_stranded_gpus": 0.9}, "missed": {
            "avg_jct_s": "something new",
            "avg_stranded_gpus": "90% of slurmopt's stranded GPU-time (80% of backfill's) is "
            "with nobody waiting: spare capacity"}},
        {"ratios": {"avg_jct_s": 1.0, "avg_stranded_gpus": 0.4}, "missed": {}},
    ]  # fmt: skip
    rows = {line.split(" | ")[0]: line for line in bench._summary(comparison)}
    assert rows["| `avg_jct_s` <= 1.02"].endswith("| 2 of 3 | no single cause visible (1) |")
    stranded = rows["| `avg_stranded_gpus` <= 0.5"]
    assert "| 1 of 3 |" in stranded
    assert "target below the packing floor (1)" in stranded
    assert "most stranding with nobody waiting (1)" in stranded
    assert rows["| `avg_wait_multinode_s` < 1"].endswith("| 0 of 0 | - |")


def test_update_runs_one_policy_again_and_keeps_the_other_rows(tmp_path: Path) -> None:
    from benchmarks.policies.cli import _update

    trace = bench.load_window(str(FIXTURES / "tiresias.csv"), "tiresias", None)
    nodes, _ = bench.size_cluster(trace)
    cases = [
        bench.Case(
            "tiny", str(FIXTURES / "tiresias.csv"), "tiresias", None, bench.fabric_spec(nodes),
            0.01, True, policy,
        )  # fmt: skip
        for policy in ("slurm-backfill-tree", "slurmopt")
    ]
    rows = [bench.run_case(c) for c in cases]
    fresh_jct = rows[0]["metrics"]["avg_jct_s"]
    rows[0]["metrics"]["avg_jct_s"] *= 2  # as an older model of the baseline gave it
    kept = dict(rows[1]["metrics"], avg_jct_s=123.0)
    rows[1]["metrics"] = kept
    # The preemption and elastic workloads share a label: each part keeps its own row.
    synthetic = {
        part: bench.Case(
            "synthetic", spec, "synthetic", None, "fat-tree:4:2", 1.2, True, "slurm-backfill-tree"
        )
        for part, spec in (
            ("preempt_rows", "jobs=20,preemptible=0.5,seed=3"),
            ("elastic_rows", "jobs=30,elastic=0.5,seed=4"),
        )
    }
    stored = tmp_path / "policies.json"
    old = _doc(len(trace.jobs), nodes, rows, [{**rows[0], "label": "synthetic", "load": 1.2}])
    old["elastic_rows"] = old["preempt_rows"]
    stored.write_text(json.dumps(old))
    parts = {"rows": cases[:1], **{part: [case] for part, case in synthetic.items()}}
    _update(stored, tmp_path, "slurm-backfill-tree", 1, parts)
    doc = json.loads(stored.read_text())
    for part, case in synthetic.items():
        assert doc[part][0]["metrics"]["jobs"] == bench.run_case(case)["metrics"]["jobs"]
    assert doc["rows"][0]["metrics"]["avg_jct_s"] == fresh_jct
    assert doc["rows"][1]["metrics"] == kept
    assert doc["comparison"][0]["ratios"]["avg_jct_s"] == pytest.approx(123.0 / fresh_jct)
    assert [(u["policy"], u["rows"]) for u in doc["updates"]] == [("slurm-backfill-tree", 3)]
    text = (tmp_path / "benchmarks.md").read_text()
    assert "the 3 runs of `slurm-backfill-tree` made again" in text


def test_update_needs_a_policy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(["--update", "policies.json"])
    assert info.value.code == 2
    assert "--update and --policy go together" in capsys.readouterr().err


def test_a_bad_fabric_fails_before_any_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(["--fabric", "clos:2:2", "--traces", str(tmp_path), "--out", str(tmp_path)])
    assert info.value.code == 2
    assert "clos:PODS:LEAVES_PER_POD:NODES_PER_LEAF" in capsys.readouterr().err
    assert not (tmp_path / "benchmarks.md").exists()


def test_a_case_replays_on_a_clos_fabric() -> None:
    case = bench.Case(
        "tiny", str(FIXTURES / "tiresias.csv"), "tiresias", None, "clos:2:2:4:2", 1.0, True,
        "slurmopt",
    )  # fmt: skip
    row = bench.run_case(case)
    assert "error" not in row and row["metrics"]["jobs"] > 0


def test_the_committed_benchmarks_page_is_what_its_json_and_sources_render(tmp_path: Path) -> None:
    """docs/benchmarks.md is generated: a hand edit there is lost on the next run, so it must
    match what ``--render`` makes of the committed JSON, evidence and three-tier sources."""
    from benchmarks.policies.cli import main

    root = Path(__file__).resolve().parents[2]
    main(["--render", str(root / "docs/benchmarks/policies.json"), "--out", str(tmp_path)])
    assert (tmp_path / "benchmarks.md").read_text() == (root / "docs/benchmarks.md").read_text()
