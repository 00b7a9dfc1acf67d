"""The discrete-event simulator: a virtual clock, a simulated Slurm, and a scheduler.

Events are job arrivals (the trace's submit times), job ends (start plus
the run time, which the comm model may stretch, cut at the time limit as
Slurm's TIMEOUT would) and, for schedulers that ask for one, a periodic
tick.  All events at one instant are applied together, then the scheduler
sees one snapshot and its starts are applied at that instant.

The tick follows Slurm's backfill agent (``backfill_agent()``): after a pass
it sleeps ``tick_s``, then polls and passes again as soon as something
changed since its last pass.  A pass that tested waiting jobs counts as a
change (it rewrites their expected start times), so while jobs wait the
passes come every ``tick_s`` from the first one; after a quiet spell the
first arrival or end is served at once.  Passes at which nothing happened
since the previous one are not run (they start nothing) but keep the rhythm.
A scheduler's ``tick_phase_s`` (None: the agent starts idle) says the agent
was already passing every ``tick_s`` when the trace began, next at that time.

A scheduler's ``main_pass_delay_s`` (0: at the end itself) is how long after a
job's end the event-driven pass that end triggers comes: slurmctld runs it when
the job's epilog-complete message arrives (``_slurm_rpc_epilog_complete()``
calls ``schedule()``), not at the end.  The job's GPUs are free from its end,
so that pass, and any pass between, sees every job that ended by then.

A pass is skipped only where it provably starts nothing: no job ended since
the last pass (so no GPU was freed), every new job ranks after every job
already waiting (so no reservation made for those moves), and no new job
fits the free GPUs now, whatever the reservations.  A pass right after
another starts nothing new (resources only shrank), and the waiting jobs'
chances cannot grow while time passes without an end, so the skipped pass
would have returned no start.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slurmopt.policy.fragmentation import JobShape, fgd_unusable_share
from slurmopt.policy.preemption import PreemptionCost
from slurmopt.sim.cluster import SimCluster
from slurmopt.sim.comm import CommModel, Stretcher
from slurmopt.sim.metrics import JobOutcome, Sample, SimResult
from slurmopt.sim.schedulers import SIM_PREEMPTION, Scheduler
from slurmopt.sim.traces import Trace, TraceError, TraceJob


@dataclass
class _Clock:
    """Time-weighted integrals of the cluster's state between events."""

    last: float = 0.0
    started: bool = False
    allocated: float = 0.0
    stranded: float = 0.0
    fgd: float = 0.0
    fgd_time: float = 0.0
    queued_time: float = 0.0
    allocated_queued: float = 0.0
    stranded_queued: float = 0.0
    stranded_usable_queued: float = 0.0
    stranded_floor: float = 0.0
    stranded_floor_queued: float = 0.0
    span: float = 0.0
    #: FGD unusable share of the free GPUs since the last event (None: nothing free).
    fgd_now: float | None = None


@dataclass
class _Agent:
    """When the periodic pass runs: Slurm's backfill agent; see the module docstring."""

    period: float
    #: The agent's last pass, run or skipped.
    last: float = -math.inf
    #: That pass tested waiting jobs, so the agent passes again ``period`` after it.
    again: bool = False
    #: First arrival or end since that pass (None: none).
    changed_at: float | None = None

    def next_pass(self) -> float:
        """When the agent passes next unless something changes first (inf: it waits)."""
        if self.changed_at is not None:
            return max(self.last + self.period, self.changed_at)
        return self.last + self.period if self.again else math.inf

    def settle(self, at: float, waiting: bool) -> None:
        """Count the passes before ``at`` the engine did not stop for: nothing new in them.

        ``waiting`` is whether jobs waited since the last instant (it cannot
        change between instants).  Such a pass tests them, so the agent keeps
        passing every ``period`` up to ``at``; with none waiting it sleeps.
        """
        t = self.next_pass()
        if t >= at:
            return
        self.last, self.again, self.changed_at = t, waiting, None
        if waiting:
            self.last += (math.ceil((at - t) / self.period - 1e-9) - 1) * self.period

    def change(self, at: float) -> None:
        if self.changed_at is None:
            self.changed_at = at

    def due(self, at: float) -> bool:
        """A pass at ``at`` with something new since the last one."""
        return self.changed_at is not None and self.next_pass() <= at

    def passed(self, at: float, tested: bool) -> None:
        self.last, self.again, self.changed_at = at, tested, None


def _finite_job(job: TraceJob) -> bool:
    """True when the job's times can be reached and summed (readers refuse the others)."""
    return math.isfinite(job.submit_s) and math.isfinite(job.duration_s) and job.duration_s >= 0


@dataclass
class Simulation:
    """One trace replayed on one fabric under one scheduler; :meth:`run` returns the metrics."""

    trace: Trace
    cluster: SimCluster
    scheduler: Scheduler
    comm: CommModel = field(default_factory=CommModel)
    samples: list[Sample] = field(default_factory=list)
    #: Called as ``progress(arrived, total)`` after each instant with arrivals.
    progress: Callable[[int, int], None] | None = None

    def run(self) -> SimResult:
        bad = next((j for j in self.trace.jobs if not _finite_job(j)), None)
        if bad is not None:  # a NaN submit time would never be reached: the loop would not end
            raise TraceError(
                f"job {bad.job_id}: submit time and duration must be finite numbers",
                self.trace.path,
            )
        cluster = self.cluster
        stretcher = Stretcher(self.comm, cluster.fabric)
        capable = cluster.nodes_with_free
        jobs = [j for j in self.trace.jobs if j.nodes <= capable(j.gpus_per_node)]
        too_big = len(self.trace.jobs) - len(jobs)
        shapes = _shapes(jobs)
        outcomes: dict[int, JobOutcome] = {}
        ends: list[tuple[float, int]] = []
        #: The end each running job will have, to skip the stale end of a requeued run.
        live_end: dict[int, float] = {}
        #: Best-placement seconds of work each job has behind it in checkpoints.
        done_s: dict[int, float] = {}
        #: Victims signalled and when they acknowledge, the preemption in flight.
        acks: list[tuple[float, int, float]] = []
        victims_of = getattr(self.scheduler, "victims", None)
        # A scheduler that preempts by itself (the daemon's loop) says when it must run
        # without an event (a checkpoint due) and which jobs it requeued.
        wake_of = getattr(self.scheduler, "wake_at", None)
        requeued_of = getattr(self.scheduler, "take_requeues", None)
        preempts = victims_of is not None or requeued_of is not None
        #: The checkpoint and restart times the scheduler priced its preemptions with.
        cost = getattr(self.scheduler, "preempt_cost", SIM_PREEMPTION)
        #: Seconds between a pass's decision and the job's start (the daemon's pin and release).
        delay = float(getattr(self.scheduler, "start_delay_s", 0.0))
        #: Seconds from a job's end to the main pass it triggers (the epilog's time).
        epilog = float(getattr(self.scheduler, "main_pass_delay_s", 0.0))
        #: When the main passes that ends triggered are due (only with an epilog delay).
        mains: list[float] = []
        tick_s = self.scheduler.tick_s
        agent = _Agent(tick_s) if tick_s else None
        phase = getattr(self.scheduler, "tick_phase_s", None)
        if agent is not None and phase is not None:
            # The agent was already passing every period (busy) when the trace began.
            agent.last, agent.again = phase - agent.period, True
        arrival = 0
        passes = events = 0
        clock = _Clock()
        pending_priorities: dict[int, int] = {}
        wall = time.perf_counter()
        while True:
            # Stop for a pass only when it can start something: news since the last one
            # and jobs waiting; other passes are counted when the next event comes.
            wake = math.inf
            if agent is not None and agent.changed_at is not None and cluster.pending:
                wake = agent.next_pass()
            at = min(
                jobs[arrival].submit_s if arrival < len(jobs) else math.inf,
                ends[0][0] if ends else math.inf,
                acks[0][0] if acks else math.inf,
                wake,
                wake_of() if wake_of is not None else math.inf,
                mains[0] if mains else math.inf,
            )
            if at == math.inf:
                break
            woken = wake_of is not None and wake_of() <= at
            self._advance(clock, at)
            if agent is not None:
                agent.settle(at, bool(cluster.pending))
            freed = False
            while ends and ends[0][0] <= at:
                end, job_id = heapq.heappop(ends)
                if live_end.get(job_id) != end:
                    continue  # that run was checkpointed and requeued
                del live_end[job_id]
                cluster.finish(job_id, at)
                freed = True
                events += 1
            while acks and acks[0][0] <= at:
                _, job_id, signalled = heapq.heappop(acks)
                if job_id not in live_end:
                    continue  # it ended before it acknowledged
                outcome = outcomes[job_id]
                started = cluster.running[job_id].start_time
                run_start = signalled if started is None else started
                _count_preemption(outcome, run_start, signalled, at, cost, done_s)
                del live_end[job_id]
                cluster.requeue(job_id)
                pending_priorities[job_id] = outcome.job.priority
                freed = True
                events += 1
            arrived: list[TraceJob] = []
            while arrival < len(jobs) and jobs[arrival].submit_s <= at:
                job = jobs[arrival]
                arrival += 1
                events += 1
                cluster.submit(job)
                outcomes[job.job_id] = JobOutcome(job)
                arrived.append(job)
            if arrived and self.progress is not None:
                self.progress(arrival, len(jobs))
            # An end frees its GPUs now but triggers its main pass after the epilog; the
            # ends' own passes come at their due times, together if due at one instant.
            main_due = False
            while mains and mains[0] <= at:
                heapq.heappop(mains)
                main_due = True
            triggers = main_due
            if freed and epilog > 0:
                heapq.heappush(mains, at + epilog)
            else:
                triggers = triggers or freed
            tick = False
            if agent is not None:
                if freed or arrived:
                    agent.change(at)
                tick = agent.due(at)
                if tick:
                    agent.passed(at, bool(cluster.pending))
            starts: list[tuple[int, tuple[str, ...]]] = []
            if (cluster.pending and (tick or triggers or arrived)) or woken:
                run_pass = woken or tick or triggers
                run_pass = run_pass or self._might_start(arrived, pending_priorities)
                # A job that fits nowhere may still make room by preemption: plan it.
                run_pass = run_pass or (
                    preempts and bool(arrived) and cluster.preemptible_running > 0
                )
                if run_pass:
                    passes += 1
                    # The daemon starts no preemption while one is in flight; neither does a pass.
                    cluster.preemption_in_flight = bool(acks)
                    starts = self.scheduler.schedule(cluster, at, tick)
            for job in arrived:
                pending_priorities[job.job_id] = job.priority
            for job_id, run_start, signalled in requeued_of() if requeued_of is not None else ():
                # The scheduler already requeued it in the cluster; only the accounting is left.
                _count_preemption(outcomes[job_id], run_start, signalled, at, cost, done_s)
                live_end.pop(job_id, None)
                pending_priorities[job_id] = outcomes[job_id].job.priority
                events += 1
            for job_id, nodes in starts:
                # The nodes are the job's from the decision; it runs from the delay's end.
                begin = at + delay
                cluster.start(job_id, nodes, begin)
                pending_priorities.pop(job_id, None)
                outcome = outcomes[job_id]
                job = outcome.job
                factor, leaves = stretcher.factor(nodes, len(nodes) * job.gpus_per_node)
                # An elastic job on fewer nodes than it asked for runs that much longer.
                outcome.scale = job.nodes / len(nodes)
                work = job.duration_s
                if job_id in done_s:  # a requeued job resumes from its checkpoint
                    work = max(work - done_s[job_id], 0.0) + cost.restart_s
                run = work * factor * outcome.scale
                if outcome.start is None:
                    outcome.start = begin
                outcome.leaves = leaves
                outcome.nodes = nodes
                outcome.stretch = factor
                if run > outcome.job.time_limit_s:
                    run = float(outcome.job.time_limit_s)
                    outcome.timed_out = True
                outcome.end = begin + run
                live_end[job_id] = begin + run
                heapq.heappush(ends, (begin + run, job_id))
            if (
                victims_of is not None
                and not acks
                and cluster.pending
                and (starts or freed or arrived or woken)
            ):
                choice = victims_of(cluster, at)
                if choice is not None:
                    for victim in choice.victims:
                        heapq.heappush(acks, (at + cost.ack_s, victim.job_id, at))
            clock.fgd_now = fgd_unusable_share(cluster.histogram, shapes)[0]
            self.samples.append(
                Sample(at, cluster.allocated, cluster.stranded, len(cluster.pending), clock.fgd_now)
            )
        wall = time.perf_counter() - wall
        return SimResult.build(
            policy=self.scheduler.name,
            outcomes=list(outcomes.values()),
            total_gpus=cluster.total_gpus,
            allocated_integral=clock.allocated,
            stranded_integral=clock.stranded,
            fgd_integral=clock.fgd,
            fgd_time=clock.fgd_time,
            queued_time=clock.queued_time,
            allocated_queued_integral=clock.allocated_queued,
            stranded_queued_integral=clock.stranded_queued,
            stranded_usable_queued_integral=clock.stranded_usable_queued,
            stranded_floor_integral=clock.stranded_floor,
            stranded_floor_queued_integral=clock.stranded_floor_queued,
            span=clock.span,
            samples=self.samples,
            too_big=too_big,
            passes=passes,
            events=events,
            wall_s=wall,
        )

    def _might_start(self, arrived: list[TraceJob], waiting: dict[int, int]) -> bool:
        """False only when a pass provably starts nothing; see the module docstring."""
        if not arrived:
            return False
        lowest = min(waiting.values(), default=None)
        if lowest is not None and any(job.priority > lowest for job in arrived):
            return True
        return any(self.cluster.nodes_with_free(j.gpus_per_node) >= j.nodes for j in arrived)

    def _advance(self, clock: _Clock, at: float) -> None:
        """Add the state held since the last event to the time-weighted integrals."""
        cluster = self.cluster
        if not clock.started:
            clock.started = True
            clock.last = at
            return
        dt = at - clock.last
        if dt <= 0:
            return
        clock.span += dt
        clock.allocated += cluster.allocated * dt
        clock.stranded += cluster.stranded * dt
        clock.stranded_floor += cluster.stranded_floor * dt
        if cluster.pending:
            clock.stranded_floor_queued += cluster.stranded_floor * dt
            clock.queued_time += dt
            clock.allocated_queued += cluster.allocated * dt
            clock.stranded_queued += cluster.stranded * dt
            if cluster.stranded:
                clock.stranded_usable_queued += cluster.stranded_usable * dt
        if cluster.histogram and clock.fgd_now is not None:
            clock.fgd += clock.fgd_now * dt
            clock.fgd_time += dt
        clock.last = at


def _count_preemption(
    outcome: JobOutcome,
    run_start: float,
    signalled: float,
    at: float,
    cost: PreemptionCost,
    done_s: dict[int, float],
) -> None:
    """A run checkpointed at ``signalled`` and requeued at ``at``: its work kept, its loss."""
    progress = (signalled - run_start) / (outcome.stretch * outcome.scale)
    done_s[outcome.job.job_id] = done_s.get(outcome.job.job_id, 0.0) + progress
    outcome.preempted += 1
    gpus = len(outcome.nodes) * outcome.job.gpus_per_node
    outcome.lost_gpu_s += gpus * (at - signalled + cost.restart_s)


def _shapes(jobs: list[TraceJob]) -> tuple[JobShape, ...]:
    """The trace's job sizes, weighted by count: the FGD measure's distribution."""
    counts: dict[tuple[int, int], int] = {}
    for job in jobs:
        key = (job.nodes, job.gpus_per_node)
        counts[key] = counts.get(key, 0) + 1
    return tuple(JobShape(n, g, float(c)) for (n, g), c in sorted(counts.items()))
