"""The simulator replays jobs that ask for an NVLink domain with the planner's own rule."""

from __future__ import annotations

import pytest

from slurmopt.fabric.generators import leaf_spine
from slurmopt.sim import simulate
from slurmopt.sim.traces import Trace, TraceJob


def _trace() -> Trace:
    jobs = []
    for i in range(12):
        nodes = (1, 2, 4)[i % 3]
        jobs.append(
            TraceJob(
                job_id=i + 1,
                submit_s=10.0 * i,
                duration_s=300.0 + 50 * i,
                nodes=nodes,
                gpus_per_node=8,
                time_limit_s=3600,
                gpus_asked=8 * nodes,
                domain=0 if nodes == 4 else (2 if i == 4 else None),
            )
        )
    return Trace("domains", "test", tuple(jobs))


def test_domain_jobs_run_each_inside_one_domain() -> None:
    fabric = leaf_spine(16, 4, nvlink_domain_size=4)
    result = simulate(_trace(), fabric, "slurmopt")
    asking = [o for o in result.outcomes if o.job.domain is not None]
    assert asking and all(o.start is not None for o in result.outcomes)
    for outcome in asking:
        segment = outcome.job.domain or outcome.job.nodes
        domains = [fabric.domain_of(n) for n in outcome.nodes]
        for d in set(domains):
            assert domains.count(d) % segment == 0


@pytest.mark.parametrize("policy", ["slurm-backfill-tree", "slurm-fifo"])
def test_baselines_run_domain_jobs_without_modelling_segments(policy: str) -> None:
    result = simulate(_trace(), leaf_spine(16, 4, nvlink_domain_size=4), policy)
    assert all(o.start is not None for o in result.outcomes)
