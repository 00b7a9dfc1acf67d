"""Trace-driven simulation of slurmopt's planner and Slurm's own schedulers.

``simulate()`` replays a :class:`~slurmopt.sim.traces.Trace` on a fabric
under each policy and returns one :class:`~slurmopt.sim.metrics.SimResult`
per policy; ``docs/simulator.md`` describes the model and its limits.
"""

from __future__ import annotations

from collections.abc import Callable

from slurmopt.fabric import Fabric
from slurmopt.sim.cluster import SimCluster, SimulationError
from slurmopt.sim.comm import CommModel, tier_metrics
from slurmopt.sim.engine import Simulation
from slurmopt.sim.metrics import SimResult
from slurmopt.sim.schedulers import POLICIES, make_scheduler
from slurmopt.sim.slurm_baseline import (
    BF_INTERVAL_S,
    BF_MAX_JOB_TEST,
    BF_RESOLUTION_S,
    BF_WINDOW_S,
)
from slurmopt.sim.traces import Trace, TraceError, TraceJob, read_trace, scale_load


def simulate(
    trace: Trace,
    fabric: Fabric,
    policy: str,
    comm: CommModel | None = None,
    gpus_per_node: int = 8,
    bf_max_job_test: int = BF_MAX_JOB_TEST,
    bf_window_s: float = BF_WINDOW_S,
    bf_interval_s: float = BF_INTERVAL_S,
    progress: Callable[[int, int], None] | None = None,
    bf_resolution_s: float = BF_RESOLUTION_S,
    clock_origin_s: float = 0.0,
    bf_phase_s: float | None = None,
    daemon_interval_s: float = 0.0,
    pin_latency_s: float = 0.0,
    bf_pass_s: float = 0.0,
    main_pass_delay_s: float = 0.0,
) -> SimResult:
    """Replay ``trace`` on ``fabric`` (every node ``gpus_per_node`` GPUs) under ``policy``.

    ``progress(arrived, total)`` is called as jobs arrive (for a progress bar).
    ``clock_origin_s`` is the wall-clock time of the trace's time 0, which Slurm's
    backfill map rounds against (``bf_resolution_s``); ``bf_phase_s`` when Slurm's
    backfill agent, already busy, passes first (None: it is idle at time 0), and
    ``bf_pass_s`` how long each of its passes takes (they come every ``bf_interval_s`` plus
    that); ``main_pass_delay_s`` how long after a job's end the main pass it triggers
    runs (Slurm runs it when the job's epilog completes; 0: at the end).
    ``daemon_interval_s`` and ``pin_latency_s`` (0: off) make ``slurmopt``'s jobs start
    as the daemon starts them: at its next cycle, after the pin and release.
    """
    scheduler = make_scheduler(
        policy,
        fabric,
        bf_max_job_test,
        bf_window_s,
        bf_interval_s,
        bf_resolution_s,
        clock_origin_s,
        bf_phase_s,
        daemon_interval_s,
        pin_latency_s,
        bf_pass_s,
        main_pass_delay_s,
    )
    cluster = SimCluster(fabric, gpus_per_node)
    sim = Simulation(trace, cluster, scheduler, comm or CommModel(), progress=progress)
    result = sim.run()
    result.metrics.update(tier_metrics(result.outcomes, fabric))
    return result


__all__ = [
    "POLICIES",
    "CommModel",
    "SimResult",
    "SimulationError",
    "Trace",
    "TraceError",
    "TraceJob",
    "read_trace",
    "scale_load",
    "simulate",
]
