"""Running the daemon as a process: its name, its fabric and drain cap, the scheduler, signals.

:class:`~slurmopt.daemon.loop.Daemon` is the cycle and its state; this
module is what a long-running process adds around it: the holder name the
lease and heartbeat carry, the fabric loader and drain cap taken from the
config, APScheduler's ``BlockingScheduler`` running the cycle every
``interval_s``, SIGTERM and SIGINT handling, and systemd's watchdog pings.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from slurmopt.config import Config
from slurmopt.daemon import notify
from slurmopt.fabric import Fabric
from slurmopt.health.agent import DrainCap
from slurmopt.model import ClusterSnapshot
from slurmopt.slurm.base import SlurmClient

if TYPE_CHECKING:
    from slurmopt.daemon.loop import Daemon

log = logging.getLogger(__name__)

#: A cycle running longer than this gets no watchdog pings (every Slurm call has timed out).
STUCK_CYCLE_S = 600.0

#: Builds the fabric from the first good snapshot.
FabricLoader = Callable[[SlurmClient, ClusterSnapshot], Fabric]

#: When this process started (wall clock): part of its holder identity.
_STARTED = time.time()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "noboot"


def default_holder(node_name: str = "") -> str:
    """``node:pid:boot:start``: names this process in the lease and the heartbeat.

    ``node`` is the config's ``node_name`` (empty: the host name), so two
    daemons sharing a store say which controller each runs beside.  The boot
    id and start time keep two processes apart even when a pid is reused,
    after a reboot or on another host of the same name.
    """
    node = node_name or socket.gethostname()
    return f"{node}:{os.getpid()}:{_boot_id()}:{int(_STARTED)}"


def drain_cap_of(config: Config) -> DrainCap:
    """The node agent's drain cap from the config, for the daemon's drain gauges."""
    return DrainCap(
        max_nodes=config.health_max_drain_nodes, max_share=config.health_max_drain_share
    )


def discover_fabric(config: Config) -> FabricLoader:
    """The fabric loader the daemon uses: ``config.fabric``, else discovered from Slurm."""

    def load(client: SlurmClient, snapshot: ClusterSnapshot) -> Fabric:
        from slurmopt.fabric.discover import load_fabric

        return load_fabric(
            client=client, fabric_file=config.fabric or None, nodes=list(snapshot.nodes)
        )

    return load


def _cycle_stuck(daemon: Daemon) -> bool:
    """The cycle in flight has run past every Slurm call's timeout: let systemd restart us."""
    return daemon._cycle_lock.locked() and time.time() - daemon._cycle_wall > STUCK_CYCLE_S


def _watchdog_pings(daemon: Daemon, every_s: float) -> None:
    """Ping systemd's watchdog between and during cycles, so a slow ``squeue`` is not death.

    A cycle stuck longer than :data:`STUCK_CYCLE_S` gets no more pings.
    """
    while not daemon.stopping.wait(every_s):
        if not _cycle_stuck(daemon):
            notify.watchdog()


def run_forever(daemon: Daemon) -> None:
    """Cycle every ``interval_s`` until SIGTERM or SIGINT, then stop cleanly.

    The signal handlers stay in place until the stop is finished: a second
    SIGTERM during shutdown is logged, not fatal, so no file or row is left
    half-written.
    """
    from apscheduler.schedulers.blocking import BlockingScheduler

    scheduler = BlockingScheduler(timezone=UTC)
    scheduler.add_job(
        daemon._tick,
        "interval",
        seconds=daemon.config.interval_s,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=None,
        id="cycle",
    )

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if daemon.stopping.is_set():
            log.info("%s: already stopping", name)
            return
        log.info("%s: finishing the current cycle, then stopping", name)
        daemon.stopping.set()
        scheduler.shutdown(wait=False)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    every = notify.watchdog_interval_s()
    if every:
        threading.Thread(
            target=_watchdog_pings, args=(daemon, every), name="watchdog", daemon=True
        ).start()
    mode = "enforce" if daemon.config.enforce else "advisory"
    log.info(
        "starting as %s (%s mode, every %g s, db %s)",
        daemon.holder,
        mode,
        daemon.config.interval_s,
        daemon.store.describe(),
    )
    try:
        scheduler.start()
    finally:
        try:
            daemon.shutdown()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


__all__ = [
    "STUCK_CYCLE_S",
    "FabricLoader",
    "default_holder",
    "discover_fabric",
    "drain_cap_of",
    "run_forever",
]
