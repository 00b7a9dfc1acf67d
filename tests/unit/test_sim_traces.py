"""Trace readers: each format on a tiny hand-made file, gang and time-limit rules, load scaling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmopt.fabric import leaf_spine
from slurmopt.sim import CommModel, simulate
from slurmopt.sim.traces import (
    TraceError,
    read_trace,
    scale_load,
    slurm_duration_s,
    time_limit_for,
)

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def _shapes(trace: object) -> list[tuple[float, float, int, int, int]]:
    return [
        (j.submit_s, j.duration_s, j.nodes, j.gpus_per_node, j.time_limit_s)
        for j in trace.jobs  # type: ignore[attr-defined]
    ]


def test_philly_sorts_by_submit_and_turns_wide_jobs_into_gangs_of_whole_nodes() -> None:
    trace = read_trace(TRACES / "philly.csv", "philly-sia")
    # 07:00:00 16 GPUs, 07:01:55 1 GPU, 07:02:00 12 GPUs -> 2 whole nodes (rounded up).
    assert _shapes(trace) == [
        (0.0, 3600.0, 2, 8, 3600),
        (115.0, 66.0, 1, 1, 1800),
        (120.0, 7200.5, 2, 8, 4 * 3600),
    ]
    assert [j.job_id for j in trace.jobs] == [1, 2, 3]
    assert trace.jobs[2].gpus_asked == 12
    assert any("2 jobs asking for more than 8 GPUs" in n and "1 of them" in n for n in trace.notes)


def test_itp_skips_jobs_without_gpus_and_says_so() -> None:
    trace = read_trace(TRACES / "itp.csv", "itp")
    assert _shapes(trace) == [(0.0, 1200.0, 8, 8, 1800), (100.0, 600.0, 1, 8, 1800)]
    assert "1 jobs skipped: no GPUs" in trace.notes


def test_tiresias_reads_its_own_columns() -> None:
    trace = read_trace(TRACES / "tiresias.csv", "tiresias")
    assert _shapes(trace) == [
        (0.0, 164.0, 1, 1, 1800),
        (30.0, 147.0, 1, 8, 1800),
        (40.0, 5000.0, 2, 8, 2 * 3600),
    ]


def test_openb_counts_gpu_shares_as_one_gpu_and_runs_from_scheduling_to_deletion() -> None:
    trace = read_trace(TRACES / "openb.csv", "openb")
    assert _shapes(trace) == [
        (0.0, 500.0, 1, 1, 1800),
        (100.0, 250.0, 1, 1, 1800),
        (200.0, 2000.0, 1, 8, 3600),
    ]
    assert any("share of one GPU" in n for n in trace.notes)
    assert "1 jobs skipped: no GPUs" in trace.notes


def test_sacct_text_keeps_limits_nodes_and_priorities_and_skips_what_never_ran() -> None:
    trace = read_trace(TRACES / "sacct.txt", "sacct")
    assert _shapes(trace) == [(0.0, 3600.0, 1, 8, 7200), (60.0, 1800.0, 4, 8, 86400)]
    assert [j.priority for j in trace.jobs] == [5000, 4000]
    assert trace.skipped == {"never ran or still running": 1, "no GPUs": 1}


def test_sacct_json_reads_wrapped_numbers_and_infinite_limits() -> None:
    trace = read_trace(TRACES / "sacct.json", "sacct-json")
    # Job 7: 2 nodes x 8 GPUs, limit 120 min; job 8: 2 GPUs, no limit -> the ladder.
    assert _shapes(trace) == [(0.0, 3600.0, 2, 8, 7200), (10.0, 600.0, 1, 2, 1800)]
    assert [j.priority for j in trace.jobs] == [900, 100]


def test_plain_csv_reads_optional_columns() -> None:
    trace = read_trace(TRACES / "load.csv", "csv")
    assert [(j.nodes, j.gpus_per_node, j.priority, j.preemptible) for j in trace.jobs] == [
        (1, 8, 0, False),
        (1, 8, 0, False),
        (1, 8, 5, True),
    ]


def test_limit_jobs_keeps_the_first_by_submit_time() -> None:
    trace = read_trace(TRACES / "philly.csv", "philly-sia", limit_jobs=2)
    assert [j.gpus_asked for j in trace.jobs] == [16, 1]


def test_gpus_per_node_changes_the_gang_rule() -> None:
    trace = read_trace(TRACES / "philly.csv", "philly-sia", gpus_per_node=4)
    assert [(j.nodes, j.gpus_per_node) for j in trace.jobs] == [(4, 4), (1, 1), (3, 4)]


def test_bad_value_names_file_and_line() -> None:
    with pytest.raises(TraceError, match=r"bad\.csv:3: duration_s is not a number: 'abc'"):
        read_trace(TRACES / "bad.csv", "csv")


def test_missing_column_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("\njob_id,submission_time,duration\n1,2,3\n")
    with pytest.raises(TraceError, match=r"t\.csv:2: missing column\(s\) num_gpu"):
        read_trace(bad, "itp")


def test_missing_file_and_unknown_format_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "none.csv", "csv")
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(TRACES / "load.csv", "swf")


def test_bad_json_names_the_job(tmp_path: Path) -> None:
    bad = tmp_path / "s.json"
    bad.write_text('{"jobs": [{"time": {"submission": "soon"}}]}')
    with pytest.raises(TraceError, match=r"s\.json:jobs\[0\]: time\.submission: expected a number"):
        read_trace(bad, "sacct-json")


def test_time_limit_ladder() -> None:
    assert time_limit_for(1) == 1800
    assert time_limit_for(1800) == 1800
    assert time_limit_for(1801) == 3600
    assert time_limit_for(40 * 86400 + 1) == 41 * 86400
    assert slurm_duration_s("1-02:03:04") == 93784
    assert slurm_duration_s("30") == 1800
    assert slurm_duration_s("UNLIMITED") is None


def test_load_scaling_stretches_inter_arrival_times() -> None:
    trace = read_trace(TRACES / "load.csv", "csv")
    # Arrivals 0, 100, 200 of 8 GPUs x 100 s on 8 GPUs: 2,400 GPU-s of work over a 200 s
    # window of 8 GPUs is load 1.5; 0.75 stretches the window to 400 s.
    assert trace.offered_load(8) == pytest.approx(1.5)
    scaled, factor = scale_load(trace, 8, 0.75)
    assert factor == pytest.approx(2.0)
    assert [j.submit_s for j in scaled.jobs] == pytest.approx([0.0, 200.0, 400.0])
    assert [j.duration_s for j in scaled.jobs] == [100.0, 100.0, 100.0]
    assert scaled.offered_load(8) == pytest.approx(0.75)


def _write(tmp_path: Path, rows: list[tuple[float, float, int]]) -> Path:
    path = tmp_path / "t.csv"
    lines = ["submit_s,duration_s,gpus"] + [f"{s},{d},{g}" for s, d, g in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_offered_load_counts_every_job_whole(tmp_path: Path) -> None:
    # A 10,000 s job first, then 10 short jobs over 1,000 s on 8 GPUs: the long job brings all
    # of its work, though most of it runs after the last arrival.
    rows = [(0.0, 10_000.0, 8)] + [(100.0 * i, 50.0, 8) for i in range(1, 11)]
    trace = read_trace(_write(tmp_path, rows), "csv")
    assert trace.offered_load(8) == pytest.approx((8 * 10_000 + 10 * 8 * 50) / (8 * 1000))
    with pytest.raises(TraceError, match="positive"):
        scale_load(trace, 8, 0.0)


@pytest.mark.parametrize("load", [0.8, 1.0, 1.2])
def test_scaled_load_means_under_at_and_over_capacity(tmp_path: Path, load: float) -> None:
    # 200 jobs of 8 GPUs x 100 s, one every 50 s, on one 8-GPU node (native load 2).
    rows = [(50.0 * i, 100.0, 8) for i in range(200)]
    trace = read_trace(_write(tmp_path, rows), "csv")
    scaled, _ = scale_load(trace, 8, load)
    result = simulate(scaled, leaf_spine(1, 1), "slurm-fifo", CommModel(enabled=False))
    waits = result.metrics["avg_queue_delay_s"]
    if load < 1:
        assert waits == 0.0  # every job finds the node free
        assert result.metrics["gpu_allocation_ratio"] == pytest.approx(load, abs=0.01)
    elif load == 1:
        assert waits == 0.0 and result.metrics["gpu_allocation_ratio"] > 0.99
    else:
        # The queue grows by 20% of a job per arrival: the last waits about 200 x 0.2 x 100 s.
        assert waits > 1000 and result.metrics["gpu_allocation_ratio"] > 0.99


@pytest.mark.parametrize(
    ("job", "words"),
    [
        ('{"time": {"submission": NaN, "start": 1, "end": 9}}', "time.submission"),
        ('{"time": {"submission": 1, "start": Infinity, "end": 9}}', "time.start"),
        ('{"time": {"submission": 1, "start": 2, "end": 1e308}}', "time.end"),
        ('{"time": {"submission": 1, "start": 2, "end": 9}, "allocation_nodes": 0.5}', "nodes"),
        (
            '{"time": {"submission": 1, "start": 2, "end": 9}, '
            '"tres": {"allocated": [{"type": "gres", "name": "gpu", "count": "8"}]}}',
            "GPU count",
        ),
        ('{"time": [1, 2]}', "time: expected an object"),
    ],
)
def test_json_values_out_of_range_name_the_field(tmp_path: Path, job: str, words: str) -> None:
    bad = tmp_path / "s.json"
    bad.write_text('{"jobs": [' + job + "]}")
    with pytest.raises(TraceError, match=r"jobs\[0\]: " + re.escape(words)):
        read_trace(bad, "sacct-json")


def test_deeply_nested_json_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "deep.json"
    bad.write_text('{"jobs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(TraceError, match="nested too deeply"):
        read_trace(bad, "sacct-json")


def test_csv_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    bom = tmp_path / "bom.csv"
    bom.write_text("submit_s,duration_s,gpus\n0,10,1\n5,10,2\n", encoding="utf-8-sig")
    assert [j.gpus for j in read_trace(bom, "csv").jobs] == [1, 2]


def test_csv_durations_past_the_cap_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_text("submit_s,duration_s,gpus\n0,1e308,1\n")
    with pytest.raises(TraceError, match="duration_s must be a finite number"):
        read_trace(big, "csv")
