"""``benchmarks.tail``'s report on given waits (no replay, no real traces)."""

from __future__ import annotations

from benchmarks.tail import Wait, differences, report, tail


def _burst(extra: float, head_wait: float) -> list[Wait]:
    """One 8-GPU job at the head of a burst of twenty 1-GPU jobs that wait ``extra`` s more each."""
    small = [Wait(i, 100.0 + i, 10.0 * i + extra, 1, 1) for i in range(1, 21)]
    return [Wait(0, 100.0, head_wait, 8, 1), *small]


def test_tail_counts_the_jobs_at_or_above_the_p95_and_when_they_came() -> None:
    lines = tail(_burst(0.0, 500.0), 190.0)
    assert lines[0] == "  tail: 3 jobs waiting 190-500 s, submitted 100-120 s (20 s), GPUs [1, 8]"
    assert lines[1] == "  all jobs: 21 waited, 2600 s in all, 6100 GPU-s"


def test_differences_name_the_head_job_served_sooner_before_the_small_ones() -> None:
    base, cont = _burst(0.0, 500.0), _burst(30.0, 100.0)
    lines = differences(base, cont, shown=2)
    assert lines[0] == "  20 jobs wait longer under the contender (median 30 s)"
    assert lines[1] == "  1 jobs wait shorter under the contender (median 400 s)"
    assert lines[2] == "    job 0 (8 GPU, 1 node), submitted 100, waits 500 -> 100 s (-400)"
    assert len(lines) == 4  # the two largest differences only


def test_report_gives_the_ratio_against_the_first_policy_only() -> None:
    runs = {"base": (190.0, _burst(0.0, 500.0)), "cont": (220.0, _burst(30.0, 100.0))}
    lines = report(runs, "base")
    assert lines[0] == "base: p95 wait 190 s"
    assert "cont: p95 wait 220 s, ratio 1.158" in lines
    assert not any("under the contender" in line for line in lines[:3])
