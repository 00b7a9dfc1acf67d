"""``slurmopt:KEY=VALUE`` policy variants and the run-time estimates the planner may plan with."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmopt.cli import cli
from slurmopt.model import Job, JobState
from slurmopt.policy.plan import Policy
from slurmopt.sim import CommModel, SimResult, read_trace, simulate
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.schedulers import SIM_POLICY, HistoryEstimate, PlannerScheduler, parse_variant

OFF = CommModel(enabled=False)
# Job 1 holds 3 of 4 nodes until 100; job 2 needs all 4 from then.  Job 3 asks for
# 200 s but runs 10 s: by its limit it would delay job 2, by its true run time it would not.
SHORT_BUT_ASKS_LONG = (
    "submit_s,duration_s,gpus,time_limit_s\n0,100,24,100\n1,50,32,100\n2,10,8,200\n"
)


def _run(tmp_path: Path, text: str, policy: str) -> SimResult:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return simulate(
        read_trace(path, "csv"), parse_fabric_spec("fat-tree:4:4"), policy, OFF, bf_interval_s=0
    )


def _starts(result: SimResult) -> dict[int, float | None]:
    return {o.job.job_id: o.start for o in result.outcomes}


def test_plain_name_is_the_default_policy_planning_with_limits() -> None:
    # The daemon's defaults but for how often the planner cache is checked (see SIM_POLICY).
    assert parse_variant("slurmopt") == (SIM_POLICY, "limit", True)
    assert replace(SIM_POLICY, plan_check_every=Policy().plan_check_every) == Policy()
    assert parse_variant("slurmopt:plan_check_every=1")[0].plan_check_every == 1


def test_variant_sets_each_named_knob_and_nothing_else() -> None:
    policy, runtime, preempt = parse_variant(
        "slurmopt:compact_wait_share=none,align_ends=off,backfill_depth=5,runtime=history,"
        "preempt=off,reserve_one_leaf=off"
    )
    assert preempt is False and policy.reserve_one_leaf is False
    assert policy.compact_wait_share is None and policy.align_ends is False
    assert policy.backfill_depth == 5 and runtime == "history"
    assert policy.require_single_leaf is Policy().require_single_leaf


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("slurmopt:bogus=1", "unknown key 'bogus'"),
        ("slurmopt:align_ends=maybe", "align_ends must be on or off"),
        ("slurmopt:compact_wait_share=-1", "compact_wait_share must be a share"),
        ("slurmopt:runtime=psychic", "runtime must be one of limit, history, oracle"),
        ("slurmopt:align_ends", "is not KEY=VALUE"),
        ("slurm-fifo:align_ends=on", "unknown policy"),
    ],
)
def test_bad_variant_is_one_line_naming_the_part(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_variant(name)


def test_with_limits_the_short_job_waits_behind_the_reservation(tmp_path: Path) -> None:
    result = _run(tmp_path, SHORT_BUT_ASKS_LONG, "slurmopt")
    assert _starts(result) == {1: 0.0, 2: 100.0, 3: 150.0}


def test_with_true_run_times_the_short_job_backfills_at_once(tmp_path: Path) -> None:
    result = _run(tmp_path, SHORT_BUT_ASKS_LONG, "slurmopt:runtime=oracle")
    assert _starts(result) == {1: 0.0, 2: 100.0, 3: 2.0}


def test_history_learns_the_run_time_of_jobs_alike(tmp_path: Path) -> None:
    # Three 10-s jobs with 200-s limits end first; the fourth alike is then estimated at
    # 1.2 x 10 = 12 s and backfills before the 4-node job's reservation; with limits it waits.
    lines = ["submit_s,duration_s,gpus,time_limit_s"]
    lines += [f"{i},10,8,200" for i in range(3)]
    lines += ["100,100,24,100", "101,50,32,100", "102,10,8,200"]
    text = "\n".join(lines) + "\n"
    assert _starts(_run(tmp_path, text, "slurmopt"))[6] == 250.0
    assert _starts(_run(tmp_path, text, "slurmopt:runtime=history"))[6] == 102.0


def test_history_needs_enough_samples_and_never_exceeds_the_limit() -> None:
    estimate = HistoryEstimate(min_samples=2, margin=1.5)
    job = Job(job_id=1, state=JobState.PENDING, node_count=1, gpus_per_node=8, time_limit_s=60)
    assert estimate.estimate(job, None) is None  # type: ignore[arg-type]
    estimate._runs[(1, 8, 60)] = [10.0]
    assert estimate.estimate(job, None) is None  # type: ignore[arg-type]
    estimate._runs[(1, 8, 60)] = [10.0, 30.0]
    assert estimate.estimate(job, None) == 45.0  # type: ignore[arg-type]
    estimate._runs[(1, 8, 60)] = [10.0, 50.0]
    planner = PlannerScheduler(parse_fabric_spec("fat-tree:4:4"), estimate=estimate)
    assert planner._with_estimate(job, None).time_limit_s == 60  # type: ignore[arg-type]


def test_cli_runs_a_variant_beside_the_default(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(SHORT_BUT_ASKS_LONG)
    args = ["simulate", "--trace", str(path), "--trace-format", "csv", "--fabric"]
    args += ["fat-tree:4:4", "--json", "--policy", "slurmopt", "--policy"]
    args += ["slurmopt:runtime=oracle"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert '"slurmopt:runtime=oracle"' in result.output


def test_cli_rejects_a_bad_variant_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(SHORT_BUT_ASKS_LONG)
    args = ["simulate", "--trace", str(path), "--trace-format", "csv"]
    result = CliRunner().invoke(cli, [*args, "--policy", "slurmopt:runtime=psychic"])
    assert result.exit_code == 2
    assert "runtime must be one of" in result.output
