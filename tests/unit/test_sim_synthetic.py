"""The synthetic workload generator behind ``--trace-format synthetic``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmopt.cli import cli
from slurmopt.sim import read_trace
from slurmopt.sim.traces import TraceError


def _jobs(spec: str) -> list[tuple[float, float, int, int]]:
    trace = read_trace(spec, "synthetic")
    return [(j.submit_s, j.duration_s, j.nodes, j.gpus_per_node) for j in trace.jobs]


def test_same_seed_same_workload_other_seed_another() -> None:
    assert _jobs("jobs=50,seed=1") == _jobs("jobs=50,seed=1")
    assert _jobs("jobs=50,seed=1") != _jobs("jobs=50,seed=2")


def test_mix_sets_the_job_sizes_and_wide_jobs_become_gangs() -> None:
    shapes = {(n, g) for _, _, n, g in _jobs("jobs=200,mix=2:1/16:1,seed=5")}
    assert shapes == {(1, 2), (2, 8)}


def test_mix_weights_set_the_shares() -> None:
    sizes = [n * g for _, _, n, g in _jobs("jobs=4000,mix=1:3/8:1,seed=9")]
    assert 0.72 < sizes.count(1) / len(sizes) < 0.78


def test_sigma_zero_gives_every_job_the_median_and_arrivals_are_increasing() -> None:
    jobs = _jobs("jobs=100,duration_s=600,sigma=0")
    assert {d for _, d, _, _ in jobs} == {600.0}
    submits = [s for s, _, _, _ in jobs]
    assert submits == sorted(submits) and submits[0] == 0.0


def test_preemptible_share() -> None:
    trace = read_trace("jobs=100,preemptible=1", "synthetic")
    assert all(j.preemptible for j in trace.jobs)
    assert not any(j.preemptible for j in read_trace("jobs=100", "synthetic").jobs)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("jobz=3", "'jobz=3' is not KEY=VALUE"),
        ("jobs=0", "1 <= jobs <= 1000000"),
        ("jobs=100000000", "1 <= jobs <= 1000000"),
        ("duration_s=inf", "0 < duration_s <= 1e"),
        ("sigma=nan", "0 <= sigma <= 10"),
        ("mix=8:inf", "finite weights"),
        ("mix=8", "mix needs GPUS:WEIGHT pairs"),
        ("mix=8:x", "bad number"),
        ("preemptible=2", "preemptible <= 1"),
    ],
)
def test_bad_spec_is_one_trace_error(spec: str, needle: str) -> None:
    with pytest.raises(TraceError, match=needle):
        read_trace(spec, "synthetic")


def test_cli_scales_a_synthetic_workload_to_load_one_by_default() -> None:
    args = ["simulate", "--trace", "jobs=60,seed=4", "--trace-format", "synthetic"]
    args += ["--fabric", "fat-tree:4:2", "--policy", "slurmopt", "--json", "--no-series"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["policies"]["slurmopt"]["finished"] == 60
    assert doc["trace"]["format"] == "synthetic"
    assert doc["load"]["requested"] == 1.0 and doc["load"]["offered"] == pytest.approx(1.0)


def test_elastic_share_makes_multi_node_jobs_elastic_from_half_their_nodes() -> None:
    jobs = read_trace("jobs=300,mix=4:1/32:1,elastic=1,seed=3", "synthetic").jobs
    wide = [j for j in jobs if j.nodes > 1]
    assert wide and all(j.min_nodes == j.nodes // 2 for j in wide)
    # The time limit is the budget on the fewest nodes: at least twice the run time on all.
    assert all(j.time_limit_s >= 2 * j.duration_s for j in wide)
    assert all(j.min_nodes is None for j in jobs if j.nodes == 1)
    rigid = read_trace("jobs=300,mix=4:1/32:1,seed=3", "synthetic").jobs
    assert all(j.min_nodes is None for j in rigid)
    with pytest.raises(TraceError, match="0 <= elastic <= 1"):
        read_trace("jobs=10,elastic=2", "synthetic")
