"""The ``slurmopt-daemon`` policy: the real daemon loop, one cycle per scheduling event.

The ``slurmopt`` policy calls the planner and the preemption rule itself; this one
runs :meth:`slurmopt.daemon.loop.Daemon.cycle` (lease, reconciler, planner, actuator,
preempter, store, heartbeat) against a :class:`~slurmopt.sim.slurm.SimSlurmClient`,
with the virtual clock as the daemon's clock.  The client's releases become the
engine's starts and its requeues the engine's requeues, so preemption here is the
daemon's own state machine (signal, ack in the comment, ``requeuehold``, waiting),
not the engine's copy of it.  Daemon and simulator cannot drift apart unnoticed:
``tests/unit/test_sim_daemon.py`` checks that both policies start every job at the
same time on the same nodes.

When cycles run: at the engine's scheduling events (arrivals that might start
something, job ends), as for ``slurmopt``; when a signalled job acknowledges its
checkpoint (the daemon must see it to requeue); and ``interval_s`` after a cycle
that requeued a job, as the daemon's next cycle would come, so the freed nodes
go to the job the preemption was for.  The idle cycles a real daemon runs every
``interval_s`` between events are not run: with no arrival, end or ack they
would change nothing but the heartbeat's time (the lease is taken again when it
has expired meanwhile).

The store is an in-memory SQLite database and the heartbeat a file in a private
temporary directory (under ``/dev/shm`` where writable), both dropped with the
scheduler (:meth:`DaemonScheduler.close`).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from slurmopt.config import Config
from slurmopt.daemon.loop import CycleResult, Daemon
from slurmopt.fabric import Fabric
from slurmopt.policy.preemption import PreemptionCost
from slurmopt.sim.cluster import PARTITION, SimCluster
from slurmopt.sim.slurm import SimSlurmClient
from slurmopt.store import Store

#: The holder name the simulated daemon takes the lease under.
HOLDER = "simulator:0:sim:0"


@dataclass
class DaemonScheduler:
    """Runs one real daemon cycle per scheduling pass; see the module docstring."""

    fabric: Fabric
    name: str = "slurmopt-daemon"
    tick_s: float | None = None
    #: Seconds a signalled preemptible job takes to acknowledge its checkpoint.
    ack_s: float = 60.0
    #: Config keys for the daemon beyond the simulation's own (enforce, store, heartbeat).
    settings: dict[str, object] = field(default_factory=dict)
    #: Daemon cycles run, and the result of the last one.
    cycles: int = 0
    last: CycleResult | None = None
    daemon: Daemon | None = None
    client: SimSlurmClient | None = None
    _now: float = 0.0
    _follow_up: float = math.inf
    _dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def preempt_cost(self) -> PreemptionCost:
        """The engine's price of a preemption: the ack time, the daemon's restart time."""
        restart = self.daemon.preempter.settings.restart_s if self.daemon else 120.0
        return PreemptionCost(ack_s=self.ack_s, restart_s=restart)

    def _start(self, cluster: SimCluster) -> Daemon:
        # In memory where the system offers it: the daemon fsyncs every heartbeat it writes.
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._dir = tempfile.TemporaryDirectory(prefix="slurmopt-sim-", dir=shm)
        values: dict[str, object] = {
            "enforce": True,
            "db": "sqlite://",
            "heartbeat_path": str(Path(self._dir.name) / "heartbeat"),
            "managed_partitions": (PARTITION,),
        }
        values.update(self.settings)
        config = Config(**values)  # type: ignore[arg-type]
        self.client = SimSlurmClient(
            cluster, lambda: self._now, config.heartbeat_path, ack_s=self.ack_s
        )
        store = Store.open(config.db)
        fabric = self.fabric
        self.daemon = Daemon(
            config,
            self.client,
            store,
            holder=HOLDER,
            clock=lambda: self._now,
            fabric_loader=lambda _client, _snapshot: fabric,
        )
        # The daemon's per-decision log lines would drown a long replay.
        logging.getLogger("slurmopt.daemon").setLevel(logging.WARNING)
        return self.daemon

    def schedule(
        self, cluster: SimCluster, now: float, tick: bool
    ) -> list[tuple[int, tuple[str, ...]]]:
        daemon = self.daemon or self._start(cluster)
        assert self.client is not None
        self._now = now
        requeues = self.client.writes["requeue"]
        self.last = daemon.cycle()
        self.cycles += 1
        again = self.client.writes["requeue"] > requeues
        self._follow_up = now + daemon.config.interval_s if again else math.inf
        return self.client.take_starts()

    def wake_at(self) -> float:
        """When the engine must run a pass even without an event (inf: never)."""
        if self.client is None:
            return math.inf
        # Only times after the last cycle: an ack that cycle did not read (it stopped before
        # its snapshot) is read at the next one, and the engine never stops twice at one time.
        due = (t for t in (self.client.next_ack(), self._follow_up) if t > self._now)
        return min(due, default=math.inf)

    def take_requeues(self) -> list[tuple[int, float, float]]:
        """Jobs the daemon requeued in the last pass: (job, run's start, signal time)."""
        return self.client.take_requeues() if self.client is not None else []

    def store(self) -> Store:
        assert self.daemon is not None, "no cycle has run yet"
        return self.daemon.store

    def close(self) -> None:
        """Drop the store and the heartbeat's directory."""
        if self.daemon is not None:
            self.daemon.store.close()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


__all__ = ["HOLDER", "DaemonScheduler"]
