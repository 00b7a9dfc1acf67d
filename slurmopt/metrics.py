"""Prometheus metrics of one daemon: what the cluster looks like, and what the daemon did.

One :class:`DaemonMetrics` per daemon owns its own ``CollectorRegistry`` (never
the process-wide default, so tests and several daemons in one process do not
collide).  Its ``observe_*`` methods only copy figures from a snapshot, a
fragmentation report, a plan or a cycle's result into the metrics: no Slurm
calls, no clock reads, so a test feeds hand-built inputs and reads the values
back.  :meth:`DaemonMetrics.instrument` wraps the daemon's Slurm client so
every write it makes (pin, release, hold, comment, ...) and every adapter
error is counted where it happens, whoever makes the call.  That wrapper
(:class:`~slurmopt.metrics_client.InstrumentedSlurmClient`) and the bounded
label values for nodes and reasons (:mod:`slurmopt.metrics_labels`) live in
their own modules; their names are re-exported here.

:func:`serve` exposes the registry over HTTP with
``prometheus_client.start_http_server``; ``docs/metrics.md`` lists every
metric with example PromQL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slurmopt import __version__
from slurmopt.daemon.managed import is_managed
from slurmopt.daemon.status import MODES
from slurmopt.errors import SlurmError
from slurmopt.metrics_client import InstrumentedSlurmClient
from slurmopt.metrics_labels import (
    MAX_NODE_REASONS,
    MAX_REASON_LENGTH,
    OTHER_REASON,
    node_state_class,
    normalise_reason,
    unavailable_nodes_by_reason,
)
from slurmopt.model import ClusterSnapshot
from slurmopt.policy.fragmentation import FragmentationReport
from slurmopt.policy.plan import Plan
from slurmopt.slurm.base import SlurmClient

if TYPE_CHECKING:
    from slurmopt.daemon.loop import CycleResult
    from slurmopt.health.agent import DrainCap

log = logging.getLogger(__name__)

#: Address the metrics endpoint binds to unless told otherwise: local scrapes only.
DEFAULT_METRICS_ADDRESS = "127.0.0.1"

#: Seconds from submit to start: a second to a week.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 604800)
#: Seconds one planning pass takes: a millisecond to half a minute.
PLAN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: Seconds from asking a job to checkpoint to its acknowledgement.
CHECKPOINT_ACK_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600)

#: Most distinct ``reason`` values ``slurmopt_degraded`` shows at once.
MAX_DEGRADED_REASONS = 8

#: Client methods that change Slurm, and the ``kind`` each counts under.
ACTION_KINDS = {
    "pin": "pin",
    "release": "release",
    "hold": "hold",
    "set_comment": "comment",
    "signal": "signal",
    "requeue": "requeue",
    "shrink": "shrink",
    "submit": "submit",
    "drain": "drain",
}


class PreemptionOutcome(StrEnum):
    """How one preemption of a running job ended (the ``outcome`` label)."""

    ACKNOWLEDGED = "acknowledged"  # the job acknowledged its checkpoint, then was requeued
    NOT_ACKNOWLEDGED = "not_acknowledged"  # requeued after the deadline without an ack
    FAILED = "failed"  # the requeue itself failed


#: Per-switch series only for leaves (0) and the tier above them (1): one series per leaf and
#: per pod or spine.  Higher tiers have few switches but add nothing an admin alerts on.
MAX_SWITCH_LABEL_LEVEL = 1


class _UnavailableNodesCollector(Collector):
    """Serves the latest unavailable-node counts; one swap per update, so a scrape sees one set."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "slurmopt_unavailable_nodes",
            "Nodes out of service for new work, by state class and normalised Slurm reason.",
            labels=["state", "reason"],
        )
        for (state, reason), count in sorted(self.counts.items()):
            family.add_metric([state, reason], count)
        yield family


class DaemonMetrics:
    """Every metric one daemon exports, in its own registry, and the updates that feed them.

    ``managed_partitions`` decides which pending jobs count as managed, as
    the daemon does.  Job wait times are observed once per start: a job
    running in the first snapshot seen counts as already started (its wait
    is unknown to this daemon) and is never observed.
    """

    def __init__(
        self, managed_partitions: Collection[str] = (), drain_cap: DrainCap | None = None
    ) -> None:
        self.managed_partitions = tuple(managed_partitions)
        self.drain_cap = drain_cap
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Memory, CPU and open files of the daemon's process, and the Python it runs on: the
        # registry is the daemon's own, so the default registry's collectors are not in it.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.gpus_capacity = Gauge(
            "slurmopt_gpus_capacity", "Every GPU Slurm configures on the nodes.", registry=r
        )
        self.gpus_allocated = Gauge(
            "slurmopt_gpus_allocated", "GPUs Slurm has allocated to jobs.", registry=r
        )
        self.gpus_free = Gauge(
            "slurmopt_gpus_free", "Unallocated GPUs on nodes in service.", registry=r
        )
        self.gpus_stranded = Gauge(
            "slurmopt_gpus_stranded",
            "Free GPUs on nodes already in use: only jobs that fit beside the running ones.",
            registry=r,
        )
        self.gpus_unavailable = Gauge(
            "slurmopt_gpus_unavailable",
            "Unallocated GPUs on nodes out of service (drained, down, ...).",
            registry=r,
        )
        self.fragmentation_index = Gauge(
            "slurmopt_fragmentation_index",
            "Stranded GPUs over free GPUs (0 to 1; 0 when nothing is free).",
            registry=r,
        )
        self.fgd_unusable_share = Gauge(
            "slurmopt_fgd_unusable_share",
            "Expected share of free GPUs a queued job shape could not use (NaN: no GPU jobs).",
            registry=r,
        )
        self.largest_job_nodes = Gauge(
            "slurmopt_largest_job_now_nodes",
            "Whole free nodes: the largest whole-node job that could start now.",
            registry=r,
        )
        self.largest_leaf_job_nodes = Gauge(
            "slurmopt_largest_job_now_leaf_nodes",
            "Most whole free nodes under one leaf switch.",
            registry=r,
        )
        self.largest_node_gpus = Gauge(
            "slurmopt_largest_job_now_node_gpus",
            "Most free GPUs on one node in service.",
            registry=r,
        )
        self.tier_largest_job_nodes = Gauge(
            "slurmopt_largest_job_now_tier_nodes",
            "Most whole free nodes beneath one switch of the level (0 = leaves).",
            ["level"],
            registry=r,
        )
        self.switch_free_gpus = Gauge(
            "slurmopt_switch_free_gpus",
            "Free GPUs beneath one leaf switch (level 0) or one switch above the leaves (level 1).",
            ["level", "switch"],
            registry=r,
        )
        self.switch_free_nodes = Gauge(
            "slurmopt_switch_free_nodes",
            "Whole free nodes beneath one leaf switch (level 0) or one switch above (level 1).",
            ["level", "switch"],
            registry=r,
        )
        self.pending_jobs = Gauge("slurmopt_pending_jobs", "Pending jobs, all of them.", registry=r)
        self.pending_managed_jobs = Gauge(
            "slurmopt_pending_managed_jobs", "Pending jobs slurmopt manages.", registry=r
        )
        self.job_wait = Histogram(
            "slurmopt_job_wait_seconds",
            "Seconds from submit to start, observed once per job start.",
            ["managed"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.plan_duration = Histogram(
            "slurmopt_plan_duration_seconds",
            "Seconds one planning pass took.",
            buckets=PLAN_BUCKETS,
            registry=r,
        )
        self.plan_jobs = Gauge(
            "slurmopt_plan_jobs",
            "Jobs in the last plan: started now, given a reservation, not started (reserved too).",
            ["decision"],
            registry=r,
        )
        self.plan_depth = Gauge(
            "slurmopt_plan_depth",
            "Managed jobs the last pass planned, in priority order; fewer than it was given "
            "when it stopped at its budget (plan_budget or plan_seconds), the rest left for a "
            "later pass.",
            registry=r,
        )
        self.plan_check_mismatches = Counter(
            "slurmopt_plan_check_mismatches",
            "Checked passes (plan_check_every) whose plan made with the planner's cache differed "
            "from the plan made without it; the latter was used.",
            registry=r,
        )
        self._mismatches_seen = 0
        self.cycles = Counter(
            "slurmopt_cycles", "Daemon cycles, by the mode each ended in.", ["mode"], registry=r
        )
        self.slurm_errors = Counter(
            "slurmopt_slurm_errors",
            "Failed Slurm adapter calls, by error type and operation.",
            ["error", "operation"],
            registry=r,
        )
        self.actions = Counter(
            "slurmopt_actions",
            "Changes made in Slurm that succeeded, by kind (pin, release, hold, comment, ...).",
            ["kind"],
            registry=r,
        )
        self.preemptions = Counter(
            "slurmopt_preemptions",
            "Running jobs preempted (checkpointed and requeued), by outcome.",
            ["outcome"],
            registry=r,
        )
        self.checkpoint_ack = Histogram(
            "slurmopt_checkpoint_ack_seconds",
            "Seconds from asking a job to checkpoint to its acknowledgement.",
            buckets=CHECKPOINT_ACK_BUCKETS,
            registry=r,
        )
        self.info = Info(
            "slurmopt_daemon", "The daemon's version and its last cycle's mode.", registry=r
        )
        self.last_success = Gauge(
            "slurmopt_last_successful_cycle_timestamp_seconds",
            "Epoch seconds at the end of the last cycle that read Slurm and planned.",
            registry=r,
        )
        self.mode = Gauge(
            "slurmopt_mode",
            "1 for the mode the last cycle ended in, 0 for every other mode.",
            ["mode"],
            registry=r,
        )
        self.degraded = Gauge(
            "slurmopt_degraded",
            "1 per reason enforcement is not proven (no series while it is proven).",
            ["reason"],
            registry=r,
        )
        self.leases_acquired = Counter(
            "slurmopt_lease_acquired",
            "Times this daemon took the enforcer lease (a new fencing token).",
            registry=r,
        )
        self.heartbeat_written_at = Gauge(
            "slurmopt_heartbeat_last_write_timestamp_seconds",
            "Epoch seconds of the last heartbeat file this daemon wrote (0: none yet).",
            registry=r,
        )
        self.health_drained = Gauge(
            "slurmopt_health_drained_nodes",
            "Nodes drained by slurmopt's node agent (its drain reason), as the snapshot shows.",
            registry=r,
        )
        self.health_drain_cap = Gauge(
            "slurmopt_health_drain_cap_nodes",
            "Most nodes the node agent may drain on this cluster (health_max_drain_* keys).",
            registry=r,
        )
        self._unavailable_nodes = _UnavailableNodesCollector()
        r.register(self._unavailable_nodes)
        self.set_mode("starting")
        self.fgd_unusable_share.set(float("nan"))
        self.info.info({"version": __version__, "mode": "starting"})
        for kind in sorted(set(ACTION_KINDS.values())):
            self.actions.labels(kind)
        for outcome in PreemptionOutcome:
            self.preemptions.labels(outcome.value)
        for managed in ("true", "false"):
            self.job_wait.labels(managed)
        self._lock = threading.Lock()
        self._seen_starts: set[tuple[int, float]] | None = None

    # -- updates -------------------------------------------------------------------------------
    def observe_snapshot(self, snapshot: ClusterSnapshot) -> None:
        """Queue lengths, unavailable nodes, and the wait of each job started since last call."""
        pending = snapshot.pending_jobs()
        self.pending_jobs.set(len(pending))
        self.pending_managed_jobs.set(
            sum(1 for j in pending if is_managed(j, self.managed_partitions))
        )
        self._unavailable_nodes.counts = unavailable_nodes_by_reason(snapshot.nodes.values())
        with self._lock:
            starts = {
                (j.job_id, j.start_time): j
                for j in snapshot.active_jobs()
                if j.start_time is not None
            }
            if self._seen_starts is not None:
                for key, job in sorted(starts.items(), key=lambda kv: kv[0][0]):
                    if key in self._seen_starts or job.submit_time is None:
                        continue
                    managed = "true" if is_managed(job, self.managed_partitions) else "false"
                    wait = max(0.0, key[1] - job.submit_time)
                    self.job_wait.labels(managed).observe(wait)
            # Only running jobs are kept: a start never reappears once its job has ended.
            self._seen_starts = set(starts)

        self._observe_drains(snapshot)

    def _observe_drains(self, snapshot: ClusterSnapshot) -> None:
        """The node agent's drains and their cap, so an alert sees the cap reached."""
        from slurmopt.health.agent import DrainCap, is_slurmopt_drain

        drained = sum(1 for n in snapshot.nodes.values() if is_slurmopt_drain(n))
        self.health_drained.set(drained)
        cap = self.drain_cap or DrainCap()
        self.health_drain_cap.set(cap.limit(len(snapshot.nodes)))

    def set_mode(self, mode: str) -> None:
        """The mode the last cycle ended in: its series 1, every other 0."""
        for known in {*MODES, mode}:
            self.mode.labels(known).set(1 if known == mode else 0)

    def set_degraded(self, reasons: list[str]) -> None:
        """Why enforcement is not proven now; an empty list clears every reason.

        Reasons are normalised like node reasons (numbers folded, bounded
        length) and at most :data:`MAX_DEGRADED_REASONS` are kept, so the
        label set stays small however the text varies.
        """
        self.degraded.clear()
        kept = sorted({normalise_reason(r, "unknown") for r in reasons})
        if len(kept) > MAX_DEGRADED_REASONS:
            kept = [*kept[: MAX_DEGRADED_REASONS - 1], OTHER_REASON]
        for reason in kept:
            self.degraded.labels(reason).set(1)

    def lease_acquired(self) -> None:
        """The daemon took the enforcer lease: many of these in an hour is a flapping lease."""
        self.leases_acquired.inc()

    def heartbeat_written(self, now: float) -> None:
        """The heartbeat file was written at ``now``; its age is what the plugin judges."""
        self.heartbeat_written_at.set(now)

    def observe_fragmentation(self, report: FragmentationReport) -> None:
        """GPU counts, fragmentation and the largest job that could start now."""
        self.gpus_capacity.set(report.total_gpus)
        self.gpus_allocated.set(report.allocated_gpus)
        self.gpus_free.set(report.free_gpus)
        self.gpus_stranded.set(report.stranded_gpus)
        self.gpus_unavailable.set(report.unavailable_gpus)
        self.fragmentation_index.set(report.fragmentation_index)
        share = report.fgd_unusable_share
        self.fgd_unusable_share.set(float("nan") if share is None else share)
        self.largest_job_nodes.set(report.largest_job_now.whole_nodes)
        self.largest_leaf_job_nodes.set(report.largest_job_now.whole_nodes_on_one_leaf)
        self.largest_node_gpus.set(report.largest_job_now.gpus_on_one_node)
        for gauge in (self.tier_largest_job_nodes, self.switch_free_gpus, self.switch_free_nodes):
            gauge.clear()  # a switch gone from the fabric or the scope must not linger
        for tier in report.tiers:
            best = tier.best
            self.tier_largest_job_nodes.labels(str(tier.level)).set(best.free_nodes if best else 0)
            if tier.level > MAX_SWITCH_LABEL_LEVEL:
                continue
            for sw in tier.switches:
                self.switch_free_gpus.labels(str(tier.level), sw.name).set(sw.free_gpus)
                self.switch_free_nodes.labels(str(tier.level), sw.name).set(sw.free_nodes)

    def observe_plan(self, plan: Plan, duration_s: float) -> None:
        """How long the planning pass took; how many jobs it starts, reserves, leaves waiting."""
        self.plan_duration.observe(max(0.0, duration_s))
        self.plan_jobs.labels("start").set(len(plan.actions))
        self.plan_jobs.labels("reserve").set(len(plan.reservations))
        self.plan_jobs.labels("not_started").set(len(plan.unplaced))
        depth = plan.depth
        if depth is None:  # a plan made by hand: every job it holds was looked at
            depth = len(plan.actions) + len(plan.unplaced)
        self.plan_depth.set(depth)

    def observe_plan_checks(self, mismatches: int) -> None:
        """The planner cache's count of failed checks so far (``PlannerCache.mismatches``)."""
        if mismatches > self._mismatches_seen:
            self.plan_check_mismatches.inc(mismatches - self._mismatches_seen)
        self._mismatches_seen = mismatches

    def observe_cycle(self, result: CycleResult, now: float) -> None:
        """Count the cycle by mode; a cycle that planned is a success at ``now``."""
        mode = str(result.mode)
        self.cycles.labels(mode).inc()
        self.info.info({"version": __version__, "mode": mode})
        if result.plan is not None:
            self.last_success.set(now)

    def record_preemption(
        self, outcome: PreemptionOutcome | str, ack_seconds: float | None = None
    ) -> None:
        """One running job preempted; ``ack_seconds`` when its checkpoint was acknowledged.

        For the preemption code to call; an unknown ``outcome`` is a ValueError
        (the label set stays bounded).
        """
        self.preemptions.labels(PreemptionOutcome(outcome).value).inc()
        if ack_seconds is not None:
            self.observe_checkpoint_ack(ack_seconds)

    def observe_checkpoint_ack(self, seconds: float) -> None:
        """Seconds a job took to acknowledge a checkpoint request."""
        self.checkpoint_ack.observe(max(0.0, seconds))

    def count_slurm_error(self, exc: SlurmError, operation: str) -> None:
        self.slurm_errors.labels(type(exc).__name__, operation).inc()

    def count_action(self, operation: str) -> None:
        kind = ACTION_KINDS.get(operation)
        if kind is not None:
            self.actions.labels(kind).inc()

    def instrument(self, client: SlurmClient) -> SlurmClient:
        """``client`` with every call counted here (an already instrumented one is kept)."""
        if isinstance(client, InstrumentedSlurmClient) and client.metrics is self:
            return client
        return InstrumentedSlurmClient(client, self)


@dataclass
class MetricsServer:
    """The HTTP endpoint serving one registry; :meth:`close` stops it and frees the port."""

    server: WSGIServer
    thread: threading.Thread
    address: str
    port: int

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(
    metrics: DaemonMetrics, port: int, address: str = DEFAULT_METRICS_ADDRESS
) -> MetricsServer:
    """Serve ``metrics`` at ``http://address:port/metrics`` from a daemon thread.

    Port 0 asks the kernel for a free port (the chosen one is in the
    result).  A port in use or an address not on this host raises OSError.
    """
    server, thread = start_http_server(port, address, registry=metrics.registry)
    bound = int(server.server_address[1])
    log.info("serving metrics on http://%s:%d/metrics", address, bound)
    return MetricsServer(server, thread, address, bound)


__all__ = [
    "DEFAULT_METRICS_ADDRESS",
    "MAX_NODE_REASONS",
    "MAX_REASON_LENGTH",
    "OTHER_REASON",
    "DaemonMetrics",
    "InstrumentedSlurmClient",
    "MetricsServer",
    "PreemptionOutcome",
    "node_state_class",
    "normalise_reason",
    "serve",
    "unavailable_nodes_by_reason",
]
