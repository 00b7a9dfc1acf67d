"""The schedulers a simulation can run: slurmopt's planner and two Slurm baselines.

* ``slurmopt``: :func:`slurmopt.policy.plan.plan` with its default
  :class:`~slurmopt.policy.plan.Policy`, called on a snapshot of the
  simulated cluster at every scheduling event, exactly as the daemon calls
  it on Slurm's (preemption included).
* ``slurmopt-daemon`` (opt-in): the daemon's own cycle against a simulated
  Slurm (:mod:`slurmopt.sim.daemon`).
* ``slurm-fifo`` and ``slurm-backfill-tree``: Slurm's ``sched/builtin`` and
  ``sched/backfill`` with ``topology/tree``, modelled in
  :mod:`slurmopt.sim.slurm_baseline`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from slurmopt.fabric import Fabric
from slurmopt.model import Job
from slurmopt.policy.knobs import FLAG, VARIANT_KNOBS
from slurmopt.policy.plan import (
    PlannerCache,
    PlanRequest,
    Policy,
    PreemptionAsk,
    PreemptionChoice,
    PreemptionCost,
    plan,
)
from slurmopt.sim.cluster import SimCluster
from slurmopt.sim.slurm_baseline import (
    BF_INTERVAL_S,
    BF_MAX_JOB_TEST,
    BF_RESOLUTION_S,
    BF_WINDOW_S,
    SlurmBackfillTree,
    SlurmFifo,
    StartList,
)

POLICIES = ("slurmopt", "slurm-fifo", "slurm-backfill-tree")
#: Policies run only when named (``--policy``), not by default: ``slurmopt-daemon``
#: (:mod:`slurmopt.sim.daemon`) runs the daemon's whole loop, far slower than ``slurmopt``.
OPT_IN_POLICIES = ("slurmopt-daemon",)


class Scheduler(Protocol):
    """One scheduling policy driven by the simulator.

    ``schedule`` returns the jobs to start now and their nodes; it must not
    change the cluster (the engine applies the starts).  ``tick_s`` asks
    the engine for a periodic pass (``tick=True``), timed as Slurm's backfill
    agent times its passes; None means event passes only.
    """

    name: str

    @property
    def tick_s(self) -> float | None: ...

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList: ...


#: In the simulator a signalled job acknowledges its checkpoint after ``ack_s`` (its GPUs do no
#: training meanwhile) and a requeued job spends ``restart_s`` reloading when it starts again.
SIM_PREEMPTION = PreemptionCost(ack_s=60.0, restart_s=120.0)

#: What the planner takes as a job's run time: ``limit`` (the user's time limit, as the daemon
#: does), ``history`` (estimated from jobs that ended, :class:`HistoryEstimate`) or ``oracle``
#: (the true run time at the best placement: the bound of any run-time prediction).
RUNTIMES = ("limit", "history", "oracle")


@dataclass
class HistoryEstimate:
    """Run time from the history of jobs alike: same GPUs, same time limit.

    The estimate is ``margin`` x the longest of the last ``window`` such jobs
    that ended, never above the limit; with fewer than ``min_samples`` of
    them, the limit.  A running job that outlives its estimate is planned
    with its limit from then on (the estimate failed; Slurm still ends it
    at the limit), so a reservation behind it moves later, never earlier.
    """

    window: int = 20
    min_samples: int = 3
    margin: float = 1.2
    _seen: int = 0
    _runs: dict[tuple[int, int, int], list[float]] = field(default_factory=dict)

    def observe(self, cluster: SimCluster) -> None:
        for job, run_s in cluster.ended[self._seen :]:
            runs = self._runs.setdefault(self._key(job), [])
            runs.append(run_s)
            if len(runs) > self.window:
                del runs[0]
        self._seen = len(cluster.ended)

    @staticmethod
    def _key(job: Job) -> tuple[int, int, int]:
        return (job.node_count, job.gpus_per_node, job.time_limit_s or 0)

    def estimate(self, job: Job, cluster: SimCluster) -> float | None:
        runs = self._runs.get(self._key(job))
        if not runs or len(runs) < self.min_samples:
            return None
        return self.margin * max(runs)


@dataclass
class OracleEstimate:
    """The true run time at the best placement (a bound, not a predictor)."""

    def observe(self, cluster: SimCluster) -> None:
        return None

    def estimate(self, job: Job, cluster: SimCluster) -> float | None:
        return cluster.durations.get(job.job_id)


class RuntimeEstimate(Protocol):
    def observe(self, cluster: SimCluster) -> None: ...

    def estimate(self, job: Job, cluster: SimCluster) -> float | None: ...


@dataclass
class PlannerScheduler:
    """slurmopt's planner on a snapshot of the simulated cluster.

    With a run-time ``estimate`` the planner sees each job's time limit
    replaced by the estimate (whole seconds, at least 1, at most the limit);
    a running job past its estimate keeps its limit.
    """

    fabric: Fabric
    policy: Policy = field(default_factory=Policy)
    name: str = "slurmopt"
    tick_s: float | None = None
    #: Keeps what passes share (fabric layout, indexes, job sizes): same decisions, far cheaper.
    cache: PlannerCache = field(default_factory=PlannerCache)
    estimate: RuntimeEstimate | None = None
    #: Checkpoint-acknowledged preemption of ``preemptible`` jobs, as the daemon does it.
    preempt: bool = True
    #: job id -> (the job as Slurm shows it, the job as the planner sees it).
    _seen: dict[int, tuple[Job, Job]] = field(default_factory=dict)
    #: What each victim spends on a preemption (the engine's checkpoint and restart times).
    preempt_cost: PreemptionCost = SIM_PREEMPTION
    #: The preemption the last pass chose, and when (the engine takes it right after the pass).
    _choice: tuple[float, PreemptionChoice] | None = None
    #: The daemon's cycle (s; 0: none): the planner runs only at multiples of it, so a change
    #: between two cycles waits for the next one, as a daemon-managed job does.
    cycle_s: float = 0.0
    #: Seconds from a cycle's decision to the job's start (the pin and release), read by the engine.
    start_delay_s: float = 0.0
    #: The cycle boundary a deferred pass runs at (inf: none due).
    _due: float = math.inf

    def wake_at(self) -> float:
        """When the engine must pass again though nothing happens: the next cycle, if one is due."""
        return self._due

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList:
        if self.cycle_s > 0:
            boundary = _next_boundary(now, self.cycle_s)
            if boundary > now:
                self._due = min(self._due, boundary)
                self._choice = None
                return []
            self._due = math.inf
        snapshot = cluster.snapshot(now)
        if self.estimate is not None:
            snapshot = replace(snapshot, jobs=self._estimated(cluster, snapshot.jobs, now))
        ask = None
        if self.preempt and cluster.preemptible_running and not cluster.preemption_in_flight:
            ask = PreemptionAsk(cost=self.preempt_cost)
        request = PlanRequest(snapshot, self.fabric, self.policy, now, preemption=ask)
        result = plan(request, cache=self.cache)
        self._choice = (now, result.preemptions[0]) if result.preemptions else None
        return [(a.job_id, a.nodes) for a in result.actions]

    def victims(self, cluster: SimCluster, now: float) -> PreemptionChoice | None:
        """The preemption the pass at ``now`` planned, once its starts are made: the daemon's
        own rule (:func:`slurmopt.policy.preemption.preemption_for`), one at a time."""
        choice, self._choice = self._choice, None
        if choice is None or choice[0] != now:
            return None
        return choice[1]

    def _estimated(
        self, cluster: SimCluster, jobs: Mapping[int, Job], now: float
    ) -> dict[int, Job]:
        assert self.estimate is not None
        self.estimate.observe(cluster)
        out: dict[int, Job] = {}
        seen: dict[int, tuple[Job, Job]] = {}
        for job_id, job in jobs.items():
            known = self._seen.get(job_id)
            if known is not None and known[0] is job:
                shown = known[1]
            else:
                shown = self._with_estimate(job, cluster)
            limit = job.time_limit_s
            if (
                shown is not job
                and job.start_time is not None
                and shown.time_limit_s is not None
                and job.start_time + shown.time_limit_s <= now
            ):
                shown = replace(shown, time_limit_s=limit)  # outlived its estimate
            seen[job_id] = (job, shown)
            out[job_id] = shown
        self._seen = seen
        return out

    def _with_estimate(self, job: Job, cluster: SimCluster) -> Job:
        assert self.estimate is not None
        guess = self.estimate.estimate(job, cluster)
        limit = job.time_limit_s
        if guess is None or limit is None:
            return job
        seconds = max(1, min(limit, math.ceil(guess)))
        return job if seconds == limit else replace(job, time_limit_s=seconds)


def _next_boundary(t: float, period: float) -> float:
    """The first multiple of ``period`` at or after ``t`` (``t`` itself when it is one)."""
    boundary = math.ceil(t / period) * period
    return boundary - period if boundary - period >= t else boundary


def make_scheduler(
    name: str,
    fabric: Fabric,
    bf_max_job_test: int = BF_MAX_JOB_TEST,
    bf_window_s: float = BF_WINDOW_S,
    bf_interval_s: float = BF_INTERVAL_S,
    bf_resolution_s: float = BF_RESOLUTION_S,
    clock_origin_s: float = 0.0,
    bf_phase_s: float | None = None,
    daemon_interval_s: float = 0.0,
    pin_latency_s: float = 0.0,
    bf_pass_s: float = 0.0,
    main_pass_delay_s: float = 0.0,
) -> Scheduler:
    """The scheduler a ``--policy`` name stands for (``slurmopt:KEY=VALUE,...`` a variant).

    ``daemon_interval_s`` and ``pin_latency_s`` (0: off) delay ``slurmopt``'s starts as
    the daemon's cycle and its pin and release do; the baselines ignore them.
    ``main_pass_delay_s`` (``slurm-backfill-tree`` only) delays the main pass a job's end
    triggers, as its epilog does in Slurm.
    """
    if name == "slurmopt" or name.startswith("slurmopt:"):
        policy, runtime, preempt = parse_variant(name)
        estimate: RuntimeEstimate | None = {
            "limit": None,
            "history": HistoryEstimate(),
            "oracle": OracleEstimate(),
        }[runtime]
        return PlannerScheduler(
            fabric,
            policy,
            name=name,
            estimate=estimate,
            preempt=preempt,
            cycle_s=daemon_interval_s,
            start_delay_s=pin_latency_s,
        )
    if name == "slurmopt-daemon":
        from slurmopt.sim.daemon import DaemonScheduler  # imports the daemon, store and SQLAlchemy

        return DaemonScheduler(fabric)
    if name == "slurm-fifo":
        return SlurmFifo()
    if name == "slurm-backfill-tree":
        return SlurmBackfillTree(
            fabric,
            bf_max_job_test,
            bf_window_s,
            bf_interval_s,
            bf_resolution_s,
            clock_origin_s,
            bf_phase_s,
            bf_pass_s,
            main_pass_delay_s,
        )
    known = ", ".join((*POLICIES, *OPT_IN_POLICIES))
    raise ValueError(f"unknown policy {name!r} (known: {known})")


#: Planner knobs a ``slurmopt:`` variant may set (``slurmopt.policy.knobs.KNOBS``).
VARIANT_KEYS = tuple(VARIANT_KNOBS)


#: The policy ``slurmopt`` replays with: the daemon's defaults, but the planner cache is
#: checked against a pass without it every 1,000 passes instead of every 100.  A replay makes
#: tens of thousands of passes, which the unit tests already hold to uncached ones; a check
#: every 100th costs it about 8%.  ``slurmopt:plan_check_every=N`` sets another period.
SIM_POLICY = replace(Policy(), plan_check_every=1000)


def parse_variant(name: str) -> tuple[Policy, str, bool]:
    """The planner policy and run-time source of ``slurmopt`` or ``slurmopt:KEY=VALUE,...``.

    Keys: each of :data:`VARIANT_KEYS`, read as its knob's kind reads text
    (``compact_wait_share`` a share, or ``none`` to wait without bound; flags
    on/off; ``backfill_depth`` a whole number of jobs), ``runtime`` (one of
    :data:`RUNTIMES`), ``preempt`` (on/off: the checkpoint-acknowledged
    preemption of preemptible jobs).  Raises ValueError with a one-line
    message naming the bad part.
    """
    if name == "slurmopt":
        return SIM_POLICY, "limit", True
    base, _, spec = name.partition(":")
    if base != "slurmopt" or not spec:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    values: dict[str, Any] = {}
    runtime = "limit"
    preempt = True
    for part in spec.split(","):
        key, eq, text = part.partition("=")
        key, text = key.strip(), text.strip().lower()
        if not eq or not text:
            raise ValueError(f"policy {name!r}: {part!r} is not KEY=VALUE")
        if key not in VARIANT_KNOBS and key not in ("runtime", "preempt"):
            known = ", ".join((*VARIANT_KEYS, "runtime", "preempt"))
            raise ValueError(f"policy {name!r}: unknown key {key!r} (known: {known})")
        try:
            if key == "runtime":
                if text not in RUNTIMES:
                    raise ValueError(f"must be one of {', '.join(RUNTIMES)}, got {text!r}")
                runtime = text
            elif key == "preempt":
                preempt = FLAG.read(text)
            else:
                values[VARIANT_KNOBS[key].field] = VARIANT_KNOBS[key].read(text)
        except ValueError as exc:
            raise ValueError(f"policy {name!r}: {key} {exc}") from None
    return replace(SIM_POLICY, **values), runtime, preempt
