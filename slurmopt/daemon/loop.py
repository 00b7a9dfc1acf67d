"""The daemon: every interval, read Slurm, plan, and (when enforcing) act.

It stays one module past 500 lines because :class:`Daemon` is one state
machine: its mode, lease and fence, back-off, heartbeat, status record and
proof of enforcement are fields that each cycle reads and writes together.

One cycle: check the kill switch and the lease, take a fresh, complete
snapshot, reconcile the store with it, plan, record the plan and a
fragmentation sample, act on the plan, rewrite the heartbeat, ping systemd.
APScheduler's ``BlockingScheduler`` runs the cycle (one at a time; missed
runs coalesce; :mod:`slurmopt.daemon.runner` holds that runner, the signal
handling and the watchdog).  ``docs/daemon.md`` describes the rules.

The daemon's mode, decided afresh each cycle::

    STARTING --(first cycle)--> one of:
      ADVISORY     not --enforce: plans are logged and stored, Slurm untouched
      STANDBY      --enforce, but another daemon holds the lease: logs only
      DISABLED     --enforce and lease held, but ``slurmopt disable`` is on: advisory
      ENFORCING    --enforce, lease held, switch off, snapshot complete: acts
      DEGRADED     as ENFORCING, but enforcement is not proven (no plugin loaded,
                   heartbeat unwritable, jobs not stamped): says so, still acts
      UNAVAILABLE  the snapshot failed: acts on nothing, heartbeat enforce=0,
                   retries after an exponential back-off (capped), then any of the above
    any mode --(SIGTERM/SIGINT: current cycle finishes)--> STOPPED
                 (heartbeat enforce=0, lease released, systemd told STOPPING)

The heartbeat says ``enforce=1`` only in ENFORCING, so the job-submit plugin
holds new jobs only while a daemon is there to release them.  Only the
lease holder writes it (a standby or advisory daemon never does), and every
store transition and Slurm write of the holder is fenced by the lease's
token (:mod:`slurmopt.daemon.fenced`): a holder that lost the lease stops
mid-cycle and acts on nothing more.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from sqlalchemy.exc import SQLAlchemyError

from slurmopt.config import Config
from slurmopt.daemon import notify
from slurmopt.daemon.actuator import ActResult, Actuator
from slurmopt.daemon.fenced import FencedClient
from slurmopt.daemon.heartbeat import write_heartbeat
from slurmopt.daemon.managed import (
    advised,
    ours,
    planning_priorities,
)
from slurmopt.daemon.preempt import Preempter, PreemptionSettings, PreemptResult
from slurmopt.daemon.proof import StampWatch, plugin_configured, preflight
from slurmopt.daemon.reconcile import (
    Reconciler,
    ReconcileResult,
    live_records,
    with_pins_in_flight,
)
from slurmopt.daemon.runner import (
    FabricLoader,
    default_holder,
    discover_fabric,
    drain_cap_of,
    run_forever,
)
from slurmopt.daemon.status import DaemonStatus, encode
from slurmopt.daemon.switch import read_switch
from slurmopt.errors import SlurmoptError, SlurmResponseError, SlurmUnavailable
from slurmopt.fabric import Fabric
from slurmopt.metrics import DaemonMetrics
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.policy.fragmentation import fragmentation_report
from slurmopt.policy.knobs import configured
from slurmopt.policy.plan import Plan, PlannerCache, PlanRequest, Policy, plan
from slurmopt.slurm.base import SlurmClient
from slurmopt.store import Fence, LeaseLost, ManagedJob, Store
from slurmopt.store.retention import PruneCounts, Retention

log = logging.getLogger(__name__)

#: Name of the lease only the acting daemon holds.
LEASE_NAME = "enforcer"
#: Name of the daemon's row in the store's heartbeat table (its last cycle's outcome).
BEAT_NAME = "daemon"
#: Longest wait between attempts while Slurm is unreachable.
BACKOFF_CAP_S = 30.0
#: Shortest lease: long enough to outlast one slow cycle on a loaded controller.
MIN_LEASE_TTL_S = 10.0
#: Seconds between two prunings of the store's history once it is within its retention.
PRUNE_EVERY_S = 300.0
#: Most rows one pruning deletes (in transactions of a few thousand rows).
PRUNE_MAX_ROWS = 20_000
#: Seconds between reads of the live configuration (``scontrol show config``) while enforcing.
CONFIG_CHECK_S = 60.0


class Mode(StrEnum):
    """What the daemon did in its last cycle (see the module docstring)."""

    STARTING = "starting"
    ADVISORY = "advisory"
    STANDBY = "standby"
    DISABLED = "disabled"
    ENFORCING = "enforcing"
    DEGRADED = "degraded"
    UNAVAILABLE = "unavailable"
    STOPPED = "stopped"


@dataclass
class CycleResult:
    """One cycle's outcome, for logs, tests and ``--once``."""

    mode: Mode
    plan: Plan | None = None
    plan_id: int | None = None
    reconciled: ReconcileResult | None = None
    acted: ActResult | None = None
    preempted: PreemptResult | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def _shape(text: str) -> str:
    """A log line with its numbers blanked: repeats are told apart by content, not counts."""
    return re.sub(r"\d+(\.\d+)?", "#", text)


def log_fabric(fabric: Fabric) -> None:
    """Log where the fabric came from and, one line each, what its loader warned about."""
    log.info("fabric: %s", fabric.source or "unnamed")
    for warning in fabric.warnings:
        log.warning("fabric: %s", warning)


class Daemon:
    """One slurmopt daemon: the cycle, its mode, the lease, back-off and shutdown.

    ``clock`` gives wall-clock seconds (the simulator passes a virtual one);
    ``fabric_loader`` builds the fabric from the first good snapshot;
    ``metrics`` receives each cycle's figures and counts every Slurm call.
    """

    @staticmethod
    def policy_for(config: Config) -> Policy:
        """The planner's knobs from the config keys that set them (``policy.knobs.KNOBS``)."""
        return configured(config.as_dict())

    def __init__(
        self,
        config: Config,
        client: SlurmClient,
        store: Store,
        *,
        holder: str | None = None,
        clock: Callable[[], float] = time.time,
        fabric_loader: FabricLoader | None = None,
        backoff_cap_s: float = BACKOFF_CAP_S,
        metrics: DaemonMetrics | None = None,
    ) -> None:
        self.metrics = metrics or DaemonMetrics(config.managed_partitions, drain_cap_of(config))
        client = self.metrics.instrument(client)  # every Slurm call below is counted
        self.config = config
        self.store = store
        # Every write checks the lease's fencing token first (a no-op while no fence is set).
        self.client: SlurmClient = FencedClient(client, store.guard)
        self.holder = holder or default_holder(config.node_name)
        self.clock = clock
        self.fabric_loader = fabric_loader or discover_fabric(config)
        self.backoff_cap_s = backoff_cap_s
        self.lease_ttl_s = max(3 * config.interval_s, MIN_LEASE_TTL_S)
        self.managed_partitions = tuple(config.managed_partitions)
        self.policy = self.policy_for(config)
        self.fabric: Fabric | None = None
        #: What consecutive plans share (the same plans as without it; rebinds on a new fabric).
        self.planner_cache = PlannerCache()
        self.mode = Mode.STARTING
        self.failures = 0
        self.retry_at = 0.0
        self.ready_sent = False
        self.stopping = threading.Event()
        self._cycle_lock = threading.Lock()
        self._last_lines: dict[int, str] = {}
        #: The lease's fence while this process holds it (None: it must not act).
        self.fence: Fence | None = None
        self.stamps = StampWatch()
        #: Why enforcement is not proven (empty: it is), and the last time each was said.
        self.reasons: list[str] = []
        self._said: dict[str, str] = {}
        self._config_checked_at = -CONFIG_CHECK_S
        self._config_problem: str | None = None
        self._heartbeat_problem: str | None = None
        self._cycle_started = 0.0
        self._cycle_wall = 0.0
        self._prune_at = 0.0
        self.reconciler = Reconciler(
            store,
            self.client,
            self.managed_partitions,
            config.pin_timeout_s,
            may_hold=self._may_write,
        )
        self.preempter = Preempter(
            store, self.client, PreemptionSettings.from_config(config), metrics=self.metrics
        )
        self.actuator = Actuator(store, self.client, self.managed_partitions, self.preempter)

    # -- permission to act -------------------------------------------------------------------
    def _disabled(self) -> bool:
        return read_switch(self.store).disabled

    def _may_act_now(self) -> bool:
        """Still enforcing: not stopping, the switch is off, the lease is still ours.

        A lost lease raises :class:`LeaseLost` (the cycle stops there, as at any
        fenced write) rather than reading as "disabled", which would still
        write the heartbeat.
        """
        if self.stopping.is_set() or not self.config.enforce or self._disabled():
            return False
        if self.fence is None:
            return False
        self.store.guard()
        return True

    def _may_write(self) -> bool:
        """:meth:`_may_act_now` without its lease read, for a single fenced write.

        The fenced client checks the lease at the write itself, so reading it
        here too would cost a second database round trip per hold.
        """
        return self.config.enforce and self.fence is not None and self._switch_off()

    def _say(self, key: str, level: int, text: str) -> None:
        """Log ``text`` once per change of its content (numbers aside) under ``key``."""
        if self._said.get(key) != _shape(text):
            self._said[key] = _shape(text)
            log.log(level, "%s", text)

    def _take_lease(self, now: float) -> bool:
        """Acquire or keep the lease; a new fencing token makes a new fence."""
        token = self.store.acquire_token(LEASE_NAME, self.holder, self.lease_ttl_s, now)
        if token is None:
            self._drop_fence()
            return False
        if self.fence is None or self.fence.token != token:
            self.fence = Fence(LEASE_NAME, self.holder, token, self.lease_ttl_s, self.clock)
            self.store.fence = self.fence
            self._said.pop("lease", None)  # a later loss is logged again
            log.info("holding the enforcer lease (fencing token %d)", token)
            self.metrics.lease_acquired()
        return True

    def _drop_fence(self) -> None:
        self.fence = None
        self.store.fence = None
        # Jobs stamped while another daemon writes the heartbeat prove nothing about ours.
        self.stamps.interrupted()

    def preflight(self) -> None:
        """Before the first cycle of ``--enforce``: exit 78 when enforcement cannot work.

        See :mod:`slurmopt.daemon.proof`; Slurm being unreachable now is not
        an error (the first cycles back off; the stamps prove the plugin later).
        """
        if not self.config.enforce:
            return
        live: dict[str, str] | None = None
        read = getattr(self.client, "slurm_config", None)
        if read is not None:
            try:
                live = read()
            except (SlurmUnavailable, SlurmResponseError) as exc:
                log.warning("cannot read the live configuration now (%s); checked later", exc)
        preflight(self.config.heartbeat_path, live)

    # -- outputs -------------------------------------------------------------------------------
    def write_heartbeat(self, enforce: bool, now: float) -> None:
        """Rewrite the heartbeat file, only as the lease holder; a failure makes us degraded.

        A standby, an advisory daemon or one that lost the lease never writes
        it, so it cannot overwrite the acting daemon's ``enforce=1``.
        """
        if self.fence is None:
            return
        if enforce and self._disabled():
            enforce = False
        if enforce:
            # enforce=1 only from the fenced leader: a holder that paused after its last
            # write and lost the lease stops here (LeaseLost), writing nothing.
            self.store.guard()
        seq = self.stamps.next_seq(now)
        try:
            write_heartbeat(
                self.config.heartbeat_path,
                enforce,
                now=now,
                holder=self.holder,
                managed_partitions=self.managed_partitions,
                seq=seq,
            )
        except OSError as exc:
            self._heartbeat_problem = (
                f"cannot write heartbeat {self.config.heartbeat_path}: {exc.strerror or exc}"
            )
            self._say("heartbeat", logging.ERROR, self._heartbeat_problem)
            self.stamps.wrote(seq, now, False)
            return
        self.metrics.heartbeat_written(now)
        if self._heartbeat_problem is not None:
            log.info("heartbeat %s written again", self.config.heartbeat_path)
            self._said.pop("heartbeat", None)
        self._heartbeat_problem = None
        self.stamps.wrote(seq, now, enforce)

    def _beat(self, now: float, mode: Mode, summary: str) -> None:
        """Record this cycle's :class:`DaemonStatus` in the store (for ``slurmopt status``)."""
        from slurmopt import __version__

        status = DaemonStatus(
            mode=str(mode),
            holder=self.holder,
            enforce_requested=self.config.enforce,
            reasons=tuple(self.reasons),
            cycle_at=self._cycle_started or now,
            cycle_s=max(0.0, self.clock() - self._cycle_started) if self._cycle_started else None,
            heartbeat_path=self.config.heartbeat_path,
            heartbeat_seq=self.stamps.last_seq or None,
            plugin_seq_seen=self.stamps.seen,
            fencing_token=self.fence.token if self.fence else None,
            summary=summary[:1000],
            version=__version__,
        )
        try:
            self.store.beat(BEAT_NAME, self.holder, now, detail=encode(status))
        except SlurmoptError as exc:
            log.error("cannot record the daemon's state: %s", exc)

    def _prove(self, snapshot: ClusterSnapshot, now: float) -> list[str]:
        """Why enforcement is not proven this cycle (see :mod:`slurmopt.daemon.proof`)."""
        read = getattr(self.client, "slurm_config", None)
        if read is not None and now - self._config_checked_at >= CONFIG_CHECK_S:
            self._config_checked_at = now
            try:
                self._config_problem = plugin_configured(read())
            except (SlurmUnavailable, SlurmResponseError) as exc:
                self._config_problem = f"cannot read the live configuration: {exc}"
        reasons = [r for r in (self._config_problem, self._heartbeat_problem) if r]
        stamp = self.stamps.check(snapshot, self.managed_partitions)
        if stamp is not None:
            reasons.append(stamp)
        return reasons

    # -- the cycle -----------------------------------------------------------------------------
    def cycle(self) -> CycleResult:
        """One pass; never raises for Slurm being away (that is a mode), only for bugs."""
        with self._cycle_lock:
            if self.stopping.is_set():
                return CycleResult(self.mode)
            self._cycle_started = self.clock()
            self._cycle_wall = time.time()
            try:
                result = self._cycle()
            except LeaseLost as exc:
                # Another daemon holds the lease now: stop here, act on nothing more.
                self._drop_fence()
                self._say("lease", logging.WARNING, f"lost the lease mid-cycle: {exc}")
                result = CycleResult(Mode.STANDBY, error=str(exc))
        self.mode = result.mode
        self.metrics.observe_cycle(result, self.clock())
        self.metrics.set_mode(str(result.mode))
        self.metrics.set_degraded(list(self.reasons))
        self.prune_store(self.clock())
        notify.watchdog()
        if result.mode is not Mode.UNAVAILABLE and not self.ready_sent:
            self.ready_sent = notify.ready() or True
        notify.status(f"{result.mode}: " + (result.error or "; ".join(result.notes) or "ok"))
        return result

    def _cycle(self) -> CycleResult:
        now = self.clock()
        if now < self.retry_at:
            self.write_heartbeat(False, now)
            return CycleResult(Mode.UNAVAILABLE, error=f"backing off until {self.retry_at:.0f}")
        if self.config.enforce and not self._take_lease(now):
            lease = self.store.lease(LEASE_NAME)
            who = f"{lease.holder} until {lease.expires_at:.0f}" if lease else "another daemon"
            if self.mode is not Mode.STANDBY:
                log.info("standby: the enforcer lease is held by %s", who)
            return CycleResult(Mode.STANDBY, notes=[f"lease held by {who}"])
        disabled = self._disabled()
        try:
            snapshot = self.client.snapshot()
            if self.fabric is None:
                # The release read, once: an operator (and the tests) can tell which Slurm answered.
                log.info("Slurm %s answers", snapshot.slurm_version or "(release not reported)")
                self.fabric = self.fabric_loader(self.client, snapshot)
                log_fabric(self.fabric)
        except (SlurmUnavailable, SlurmResponseError) as exc:
            return self._unavailable(now, exc)
        if self.failures:
            log.info("Slurm answers again after %d failed attempts; resuming", self.failures)
            self.failures = 0
            self.retry_at = 0.0
        acting = self.config.enforce and not disabled
        mode = (
            Mode.ENFORCING if acting else (Mode.DISABLED if self.config.enforce else Mode.ADVISORY)
        )
        try:
            return self._plan_and_act(snapshot, now, mode)
        except (SlurmUnavailable, SlurmResponseError) as exc:
            return self._unavailable(now, exc)

    def _unavailable(self, now: float, exc: SlurmoptError) -> CycleResult:
        self.failures += 1
        delay = min(self.config.interval_s * 2 ** (self.failures - 1), self.backoff_cap_s)
        self.retry_at = now + delay
        detail = f"Slurm unavailable, acting on nothing: {exc}; retry in {delay:.0f} s"
        self._say("unavailable", logging.WARNING, detail)
        self.reasons = [f"Slurm unavailable: {exc}"] if self.config.enforce else []
        self._beat(now, Mode.UNAVAILABLE, detail)
        self.write_heartbeat(False, now)
        return CycleResult(Mode.UNAVAILABLE, error=str(exc))

    def _planned(
        self, acting: bool, records: dict[int, ManagedJob], skip: set[int]
    ) -> Callable[[Job], bool]:
        parts = self.managed_partitions

        def enforcing(job: Job) -> bool:
            return (
                job.gpus_per_node > 0
                and job.job_id not in skip
                and ours(job, records.get(job.job_id))
            )

        def advising(job: Job) -> bool:
            return advised(job, parts)

        return enforcing if acting else advising

    def _plan_and_act(self, snapshot: ClusterSnapshot, now: float, mode: Mode) -> CycleResult:
        assert self.fabric is not None
        acting = mode is Mode.ENFORCING
        result = CycleResult(mode)
        if acting:
            result.reconciled = self.reconciler.run(snapshot, now)
        records = {r.job_id: r for r in live_records(self.store)}
        skip = result.reconciled.touched if result.reconciled else set()
        managed = self._planned(acting, records, skip)
        planned_jobs = [j for j in snapshot.jobs.values() if managed(j)]
        priorities = planning_priorities(
            planned_jobs, {i: r.priority_before_hold for i, r in records.items()}
        )
        # Jobs pinned but not yet started hold their nodes (the actuator reads the real snapshot).
        planned = with_pins_in_flight(snapshot, records, now) if acting else snapshot
        preempting = self.preempter.in_flight() if acting else []
        request = PlanRequest(
            planned,
            self.fabric,
            self.policy,
            now,
            managed=frozenset(j.job_id for j in planned_jobs),
            priorities=priorities,
            preemption=self.preempter.ask(records, preempting) if acting else None,
        )
        started = time.perf_counter()
        result.plan = plan(request, cache=self.planner_cache)
        duration = time.perf_counter() - started
        result.plan_id = self.store.record_plan(result.plan, snapshot.taken_at, duration)
        report = fragmentation_report(snapshot, self.fabric)
        self.store.record_fragmentation(report)
        self.metrics.observe_snapshot(snapshot)
        self.metrics.observe_fragmentation(report)
        self.metrics.observe_plan(result.plan, duration)
        self.metrics.observe_plan_checks(self.planner_cache.mismatches)
        self._log_decisions(result.plan, mode)
        if acting:
            self.reasons = self._prove(snapshot, now)
            if self.reasons:
                result.mode = Mode.DEGRADED
                self._say("degraded", logging.WARNING, "degraded: " + "; ".join(self.reasons))
            elif self._said.pop("degraded", None) is not None:
                log.info("enforcement proven again: no longer degraded")
        else:
            self.reasons = []
        if acting:
            age = self.clock() - snapshot.taken_at
            if age > max(2 * self.config.interval_s, 10.0):
                result.notes.append(f"snapshot {age:.0f} s old by planning's end; not acting")
                log.warning("snapshot is %.0f s old; acting on nothing this cycle", age)
            elif not self._may_act_now():
                result.mode = Mode.DISABLED
                log.warning("disabled or stopping during the cycle; acting on nothing")
            else:
                # The preemptions in flight move on first: the plan asked for a new one only
                # if there was none, and the one it starts is first seen again next cycle.
                result.preempted = self.preempter.advance(
                    snapshot, now, preempting, may_act=self._switch_off
                )
                result.acted = self.actuator.apply(
                    result.plan,
                    snapshot,
                    records,
                    now,
                    skip,
                    may_act=self._switch_off,
                    plan_id=result.plan_id,
                )
        starts = len(result.acted.started) if result.acted else 0
        summary = (
            f"{len(result.plan.actions)} starts planned, {starts} made, "
            f"{len(result.plan.reservations)} reservations, {len(result.plan.unplaced)} waiting"
        )
        result.notes.append(summary)
        self.write_heartbeat(result.mode in (Mode.ENFORCING, Mode.DEGRADED), now)
        self._beat(now, result.mode, summary)
        return result

    def prune_store(self, now: float) -> PruneCounts | None:
        """Drop history past its retention, at most every :data:`PRUNE_EVERY_S`, bounded.

        Only the lease holder (or an advisory daemon) prunes; a call deletes
        at most :data:`PRUNE_MAX_ROWS` rows in short transactions, and runs
        again next cycle while old rows remain, so a cycle never waits long.
        """
        if self.config.enforce and self.fence is None:
            return None
        if now < self._prune_at:
            return None
        try:
            counts = self.store.prune(now, Retention.of(self.config), max_rows=PRUNE_MAX_ROWS)
        except (SlurmoptError, SQLAlchemyError) as exc:
            log.error("cannot prune the store: %s", exc)
            self._prune_at = now + PRUNE_EVERY_S
            return None
        self._prune_at = now + (0.0 if counts.more else PRUNE_EVERY_S)
        if counts.total:
            log.info("pruned the store: %s", counts.describe())
        return counts

    def _switch_off(self) -> bool:
        return not self.stopping.is_set() and not self._disabled()

    def _log_decisions(self, result: Plan, mode: Mode) -> None:
        """One line per decision, logged when it differs from the job's previous one."""
        lines: dict[int, str] = {}
        for action in result.actions:
            lines[action.job_id] = (
                f"start on {','.join(action.nodes)} [{action.reason.value}] {action.detail}"
            )
        for res in result.reservations:
            lines[res.job_id] = (
                f"reserve {','.join(res.nodes)} from {res.start_time:.0f} "
                f"[{res.reason.value}] {res.detail}"
            )
        for un in result.unplaced:
            if un.job_id not in lines:
                lines[un.job_id] = f"wait [{un.reason.value}] {un.detail}"
        for job_id, line in lines.items():
            if self._last_lines.get(job_id) != line:
                log.info("plan (%s): job %d: %s", mode, job_id, line.rstrip())
        self._last_lines = lines

    # -- running -------------------------------------------------------------------------------
    def run_once(self) -> CycleResult:
        """One cycle, then the clean stop; Slurm unreachable raises its error."""
        try:
            result = self.cycle()
        finally:
            self.shutdown(notify_systemd=False)
        if result.mode is Mode.UNAVAILABLE and result.error:
            raise SlurmUnavailable(result.error)
        return result

    def _tick(self) -> None:
        try:
            self.cycle()
        except Exception:  # a bug must not stop the daemon; the next cycle tries again
            log.exception("cycle failed")
            self.write_heartbeat(False, self.clock())

    def run_forever(self) -> None:
        """Cycle every ``interval_s`` until SIGTERM or SIGINT, then stop cleanly.

        See :func:`slurmopt.daemon.runner.run_forever`.
        """
        run_forever(self)

    def shutdown(self, notify_systemd: bool = True) -> None:
        """Finish the cycle in flight, then heartbeat enforce=0 and give up the lease."""
        if notify_systemd:
            notify.stopping()
        self.stopping.set()
        with self._cycle_lock:
            now = self.clock()
            self.write_heartbeat(False, now)
            if self.fence is not None or not self.config.enforce:
                # The acting (or advisory) daemon says it stopped; a standby says nothing,
                # so it cannot hide the leader's status.
                self.reasons = []
                self._beat(now, Mode.STOPPED, "stopped cleanly")
            self._drop_fence()
            if self.config.enforce:
                try:
                    self.store.release_lease(LEASE_NAME, self.holder)
                except SlurmoptError as exc:
                    log.error("cannot release the lease: %s", exc)
            self.mode = Mode.STOPPED
        log.info("stopped")


__all__ = [
    "BACKOFF_CAP_S",
    "BEAT_NAME",
    "LEASE_NAME",
    "CycleResult",
    "Daemon",
    "Mode",
    "default_holder",
    "discover_fabric",
]
