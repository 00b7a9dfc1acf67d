"""The daemon's cycle and pin latency as a start delay for ``slurmopt`` in the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmopt.sim import CommModel, read_trace, simulate
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.schedulers import _next_boundary

OFF = CommModel(enabled=False)
# The trace clock starts at its first submit: job 1 arrives at 0, on a cycle boundary, jobs 2
# and 3 at 3 and 4, between two; job 3 waits for job 2's node.
ROWS = "submit_s,duration_s,gpus,time_limit_s\n20,100,8,200\n23,50,8,200\n24,30,8,200\n"


def _outcomes(
    tmp_path: Path, policy: str, interval_s: float = 0.0, latency_s: float = 0.0
) -> dict[int, tuple[float | None, float | None]]:
    trace = tmp_path / "t.csv"
    trace.write_text(ROWS)
    result = simulate(
        read_trace(trace, "csv"),
        parse_fabric_spec("fat-tree:2:2"),
        policy,
        OFF,
        daemon_interval_s=interval_s,
        pin_latency_s=latency_s,
    )
    return {o.job.job_id: (o.start, o.end) for o in result.outcomes}


def test_slurmopt_starts_at_once_without_the_delay(tmp_path: Path) -> None:
    assert _outcomes(tmp_path, "slurmopt") == {1: (0, 100), 2: (3, 53), 3: (53, 83)}


def test_a_managed_job_starts_at_the_next_cycle_after_the_pin(tmp_path: Path) -> None:
    # Cycles every 10 s: job 1 is planned at 0, job 2 at 10 (job 3 does not fit); each starts
    # 1.5 s later and runs its whole duration from there.  Job 2's node frees at 61.5, so job 3
    # is planned at the cycle at 70.
    got = _outcomes(tmp_path, "slurmopt", interval_s=10, latency_s=1.5)
    assert got == {1: (1.5, 101.5), 2: (11.5, 61.5), 3: (71.5, 101.5)}


def test_the_baselines_ignore_the_daemons_delay(tmp_path: Path) -> None:
    plain = _outcomes(tmp_path, "slurm-backfill-tree")
    assert _outcomes(tmp_path, "slurm-backfill-tree", interval_s=10, latency_s=1.5) == plain


@pytest.mark.parametrize(
    ("t", "period", "boundary"),
    [(0.0, 2.0, 0.0), (0.1, 2.0, 2.0), (2.0, 2.0, 2.0), (0.7, 0.1, 0.7), (3 * 0.1, 0.1, 0.3)],
)
def test_a_time_on_a_cycle_boundary_is_its_own_boundary(
    t: float, period: float, boundary: float
) -> None:
    assert _next_boundary(t, period) == pytest.approx(boundary)
    assert _next_boundary(_next_boundary(t, period), period) == _next_boundary(t, period)
