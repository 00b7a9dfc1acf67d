"""The ``slurmopt-daemon`` policy: the real daemon loop over the simulated Slurm.

Checks that :class:`~slurmopt.sim.slurm.SimSlurmClient` behaves as the shared
fake of Slurm does, that the daemon's loop starts every job exactly where and
when the ``slurmopt`` policy does, that preemption in this mode goes through the
daemon's own state machine, and that the loop is not bypassed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from slurmopt.cli import cli
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, JobState
from slurmopt.sim.cluster import SimCluster
from slurmopt.sim.daemon import DaemonScheduler
from slurmopt.sim.engine import Simulation
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.metrics import SimResult
from slurmopt.sim.schedulers import make_scheduler
from slurmopt.sim.slurm import SimSlurmClient, plugin_admit
from slurmopt.sim.traces import Trace, TraceJob, read_trace, scale_load
from slurmopt.store import ManagedJob, PlanRecord, Preemption
from tests.fakes.slurm import FakeSlurm

FABRIC = "fat-tree:16:4"  # two levels: 4 leaves of 4 nodes under one spine
MIX = "1:0.3/2:0.1/4:0.1/8:0.25/16:0.15/32:0.1"


def _trace(jobs: int, seed: int, **extra: Any) -> Trace:
    spec = ",".join(
        [f"jobs={jobs}", f"mix={MIX}", "duration_s=900", f"seed={seed}"]
        + [f"{k}={v}" for k, v in extra.items()]
    )
    trace = read_trace(spec, "synthetic")
    return scale_load(trace, 16 * 8, 1.3)[0]


def _run(trace: Trace, policy: str) -> tuple[SimResult, Any]:
    fabric = parse_fabric_spec(FABRIC)
    scheduler = make_scheduler(policy, fabric)
    result = Simulation(trace, SimCluster(fabric, 8), scheduler).run()
    return result, scheduler


@pytest.fixture
def daemon_runs() -> Iterator[list[DaemonScheduler]]:
    """Schedulers to close after the test (their store and heartbeat directory)."""
    made: list[DaemonScheduler] = []
    yield made
    for scheduler in made:
        scheduler.close()


def _daemon_run(trace: Trace, made: list[DaemonScheduler]) -> tuple[SimResult, DaemonScheduler]:
    result, scheduler = _run(trace, "slurmopt-daemon")
    assert isinstance(scheduler, DaemonScheduler)
    made.append(scheduler)
    return result, scheduler


# -- (a) the simulated Slurm against the shared fake -----------------------------------------
def _view(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """What the daemon reads: job fields and node allocation."""
    jobs = {
        j.job_id: (
            j.state,
            j.held,
            j.reason,
            j.priority,
            j.nodes,
            j.required_nodes,
            j.node_count,
            j.start_time,
            j.submit_time,
            j.restarts,
            j.comment,
            j.admin_comment,
        )
        for j in snapshot.jobs.values()
    }
    nodes = {n.name: (n.state, n.gpus_alloc) for n in snapshot.nodes.values()}
    return {"jobs": jobs, "nodes": nodes, "taken_at": snapshot.taken_at}


def test_sim_client_changes_jobs_as_the_shared_fake_does() -> None:
    fabric = Fabric.from_leaf_map({"leafA": ["a0", "a1"], "leafB": ["b0", "b1"]})
    cluster = SimCluster(fabric, 8)
    clock = [1000.0]
    sim = SimSlurmClient(cluster, lambda: clock[0], ack_s=60.0)
    # A 2-node preemptible job: id, submit, run time, nodes, GPUs per node, limit, GPUs asked.
    cluster.submit(TraceJob(1, 1000.0, 5000.0, 2, 8, 7200, 16, preemptible=True))
    # The fake has no job-submit plugin: it is given the job as the plugin leaves it.
    arrived = plugin_admit(cluster.pending[1], None)
    fake = FakeSlurm(cluster.nodes.values(), [arrived], [cluster.partition], clock=clock[0])

    def both(step: Callable[[Any], object]) -> None:
        fake.clock = clock[0]
        step(fake)
        step(sim)
        assert _view(sim.snapshot()) == _view(fake.snapshot())
        assert sim.job_status(1) == fake.job_status(1)
        assert sim.job_status(99) is fake.job_status(99) is None

    both(lambda _c: None)
    assert sim.snapshot().jobs[1].reason == "JobHeldUser"
    both(lambda c: c.hold(1))
    both(lambda c: c.pin(1, ["a0", "a1"]))
    both(lambda c: c.release(1))
    both(lambda c: c.schedule())  # Slurm's pass starts it on its pinned nodes
    assert sim.snapshot().jobs[1].state is JobState.RUNNING
    clock[0] += 100
    both(lambda c: c.signal(1, "USR2"))
    assert sim.next_ack() == clock[0] + 60
    clock[0] += 60
    # The simulated job writes its acknowledgement itself; the fake is told to.
    both(lambda c: c.ack(1, int(clock[0])) if c is fake else None)
    assert "ckpt=1160@1160" in sim.snapshot().jobs[1].comment
    clock[0] += 5
    both(lambda c: c.requeue(1, hold=True))
    job = sim.snapshot().jobs[1]
    assert job.is_pending and job.held and job.restarts == 1 and job.submit_time == clock[0]
    assert sim.take_requeues() == [(1, 1000.0, 1100.0)]
    assert (sim.writes["signal"], sim.writes["requeue"]) == (1, 1)


# -- (b) the daemon's loop and the planner policy agree -------------------------------------
@pytest.mark.parametrize(
    ("jobs", "seed", "elastic"), [(60, 1, 0.0), (100, 2, 0.0), (140, 3, 0.0), (100, 5, 0.6)]
)
def test_daemon_loop_starts_every_job_as_the_planner_policy_does(
    jobs: int, seed: int, elastic: float, daemon_runs: list[DaemonScheduler]
) -> None:
    """Same start time and nodes for every job, with no preemptible jobs.

    Exact by construction: a trace's priorities are all equal, so the daemon's
    rule for held jobs (every priority unknown: order by submit time, then id)
    gives the planner the order it gets from the trace; a released job starts
    at the cycle's own instant; and cycles run at the passes the engine runs.
    """
    trace = _trace(jobs, seed, elastic=elastic)
    assert {j.priority for j in trace.jobs} == {0}
    assert any(j.nodes > 1 for j in trace.jobs) and any(j.nodes == 1 for j in trace.jobs)
    planner, _ = _run(trace, "slurmopt")
    looped, scheduler = _daemon_run(trace, daemon_runs)
    placed = {o.job.job_id: (o.start, o.nodes, o.end) for o in planner.outcomes}
    assert {o.job.job_id: (o.start, o.nodes, o.end) for o in looped.outcomes} == placed
    assert looped.metrics["finished"] == jobs
    assert looped.metrics["scheduler_passes"] == planner.metrics["scheduler_passes"]
    assert scheduler.last is not None and scheduler.last.mode.value == "enforcing"
    # Elastic jobs started smaller went through the daemon's NumNodes= change.
    assert scheduler.client is not None
    smaller = looped.metrics["elastic_smaller_starts"]
    shrinks = scheduler.client.writes["shrink"]
    assert (shrinks > 0, smaller > 0) == (elastic > 0, elastic > 0)


# -- (c) preemption is the daemon's own ------------------------------------------------------
def test_daemon_mode_preempts_through_the_client_and_every_job_completes(
    daemon_runs: list[DaemonScheduler],
) -> None:
    trace = _trace(80, 3, preemptible=0.5)
    result, scheduler = _daemon_run(trace, daemon_runs)
    assert not hasattr(scheduler, "victims")  # the engine's own preemption stays off
    assert scheduler.client is not None
    signals, requeues = scheduler.client.writes["signal"], scheduler.client.writes["requeue"]
    assert signals > 0 and requeues > 0
    assert result.metrics["preemptions"] == requeues
    assert result.metrics["finished"] == len(trace.jobs)
    with scheduler.store().begin() as session:
        rows = session.scalars(select(Preemption)).all()
        assert len(rows) == signals
        assert sum(r.outcome == "requeued" for r in rows) == requeues
        assert all(r.checkpoint_step is not None for r in rows if r.outcome == "requeued")


# -- (d) the loop is not bypassed -------------------------------------------------------------
def test_every_pass_is_one_daemon_cycle_with_its_plan_stored(
    daemon_runs: list[DaemonScheduler],
) -> None:
    trace = _trace(50, 4)
    result, scheduler = _daemon_run(trace, daemon_runs)
    with scheduler.store().begin() as session:
        plans = session.scalar(select(func.count()).select_from(PlanRecord))
        managed = session.scalars(select(ManagedJob)).all()
    assert plans == scheduler.cycles == result.metrics["scheduler_passes"]
    assert len(managed) == len(trace.jobs)
    # Every job was pinned and released by the daemon; none is left waiting.  A job that
    # started and ended between two cycles stays ``pinned`` (no later cycle) or is
    # recorded ``cancelled`` (the reconciler's rule for a pinned job that vanished).
    assert {m.state.value for m in managed} <= {"pinned", "running", "done", "cancelled"}
    assert scheduler.client is not None
    assert scheduler.client.writes["release"] == scheduler.client.writes["pin"] == len(trace.jobs)


def test_simulate_cli_runs_the_daemon_policy_only_when_named() -> None:
    args = ["simulate", "--trace", "jobs=20,seed=5", "--trace-format", "synthetic",
            "--fabric", FABRIC, "--json", "--no-series"]  # fmt: skip
    named = CliRunner().invoke(cli, [*args, "--policy", "slurmopt-daemon"])
    assert named.exit_code == 0, named.output
    assert "slurmopt-daemon" in named.output
    default = CliRunner().invoke(cli, ["simulate", "--help"])
    assert "slurmopt-daemon" in default.output and default.exit_code == 0
