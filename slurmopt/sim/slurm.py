"""A :class:`~slurmopt.slurm.base.SlurmClient` over the simulated cluster, at the virtual clock.

It lets the real daemon (:class:`slurmopt.daemon.loop.Daemon`) run against a
:class:`~slurmopt.sim.cluster.SimCluster` as it runs against slurmctld, so the
simulator measures the daemon's own loop (reconciler, actuator, preempter, store)
rather than a copy of it.  What Slurm and the jobs would do is modelled here:

* **The job-submit plugin** (``docs/plugin.md``): a job the client has not seen yet
  is admitted at the next read.  While the daemon's heartbeat says ``enforce=1``
  (or before its first heartbeat: the daemon is taken to have started before the
  trace), a GPU job in a managed partition, or tagged by ``slurmopt submit``,
  arrives held (``JobHeldUser``, priority 0) with its tag copied into the admin
  comment plus ``held`` and ``hb=SEQ``.  The heartbeat's age is not checked: between
  two scheduling events the daemon's idle cycles would only have rewritten it.
  A job arriving while the heartbeat says ``enforce=0`` is a
  :class:`~slurmopt.sim.cluster.SimulationError`: the simulation has no Slurm
  scheduler to run the jobs slurmopt leaves alone.
* **Writes** change the simulated jobs as Slurm does (:mod:`slurmopt.slurm.jobstate`).
* **Starts**: a released job with a pin starts on its pinned nodes at Slurm's next
  pass, which in the simulation comes at the same instant (:meth:`take_starts`
  hands them to the engine, which applies them before the clock moves; Slurm's
  own pass comes a few seconds later, a delay the ``slurmopt`` policy does not
  model either, so both start a job at the same time).  A pin to nodes without
  room is left pending, as Slurm would leave it.
* **Checkpoints**: a signalled preemptible job acknowledges ``ack_s`` later by writing
  ``ckpt=STEP@T`` into its comment (:func:`slurmopt.tag.with_checkpoint`);
  :meth:`next_ack` tells the engine when, so a daemon cycle can see it.
* **Requeues** go through :meth:`SimCluster.requeue` at once (GPUs back, pending,
  held, a new submit time); :meth:`take_requeues` hands them to the engine's
  bookkeeping of lost work.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurmopt.daemon.heartbeat import Heartbeat, parse_heartbeat
from slurmopt.errors import SlurmCommandError
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.sim.cluster import SimCluster, SimulationError
from slurmopt.slurm import jobstate
from slurmopt.slurm.base import JobStatus
from slurmopt.tag import (
    HEARTBEAT_FIELD,
    HELD_FIELD,
    JobTag,
    TagError,
    format_comment,
    parse_comment,
    with_checkpoint,
)

#: How the plugin's hold shows in Slurm (``priority=0`` set in ``job_submit/lua``).
PLUGIN_HOLD_REASON = "JobHeldUser"


def plugin_admit(job: Job, beat: Heartbeat | None) -> Job:
    """The job as the job-submit plugin leaves it at submission (see the module docstring)."""
    try:
        tag, _ = parse_comment(job.comment)
    except TagError:
        tag = None
    if beat is not None and not beat.enforce:
        raise SimulationError(
            f"job {job.job_id} arrived while the daemon's heartbeat said enforce=0; "
            "the simulation runs only jobs the daemon holds"
        )
    parts = beat.managed_partitions if beat is not None else ()
    in_managed = "*" in parts or any(p in parts for p in job.partition.split(",") if p)
    if job.gpus_per_node <= 0 or (tag is None and not in_managed and beat is not None):
        return job
    tag = tag or JobTag()
    if tag.elastic is not None:  # the plugin caps MAX at the nodes the job was submitted with
        low, high = tag.elastic
        tag = dataclasses.replace(
            tag, elastic=(min(low, job.node_count), min(high, job.node_count))
        )
    admin = format_comment(tag) + f",{HELD_FIELD}"
    if beat is not None and beat.seq:
        admin += f",{HEARTBEAT_FIELD}={beat.seq}"
    return dataclasses.replace(
        job, held=True, reason=PLUGIN_HOLD_REASON, priority=0, admin_comment=admin
    )


class SimSlurmClient:
    """Slurm over a :class:`SimCluster`; ``clock()`` is the simulation's virtual time."""

    name = "sim"

    def __init__(
        self,
        cluster: SimCluster,
        clock: Callable[[], float],
        heartbeat_path: str | Path | None = None,
        ack_s: float = 60.0,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.heartbeat_path = Path(heartbeat_path) if heartbeat_path is not None else None
        self.ack_s = ack_s
        self.live_config: dict[str, str] = {"JobSubmitPlugins": "lua"}
        #: Writes made, by kind (``signal``, ``requeue``, ...).
        self.writes: Counter[str] = Counter()
        self._admitted: set[int] = set()
        #: Signalled preemptible jobs: job id -> (when it acknowledges, when it was signalled).
        self._acks: dict[int, tuple[float, float]] = {}
        #: Signal time of each running job signalled and not yet requeued.
        self._signalled: dict[int, float] = {}
        self._released: list[int] = []
        self._requeues: list[tuple[int, float, float]] = []

    # -- reads -------------------------------------------------------------------------------
    def _heartbeat(self) -> Heartbeat | None:
        if self.heartbeat_path is None:
            return None
        try:
            return parse_heartbeat(self.heartbeat_path.read_text(encoding="ascii"))
        except FileNotFoundError:
            return None

    def _admit(self) -> None:
        """Pass the jobs submitted since the last read through the job-submit plugin."""
        fresh = [i for i in self.cluster.pending if i not in self._admitted]
        if not fresh:
            return
        beat = self._heartbeat()
        for job_id in fresh:
            self.cluster.pending[job_id] = plugin_admit(self.cluster.pending[job_id], beat)
            self._admitted.add(job_id)

    def _deliver_acks(self, now: float) -> None:
        for job_id, (due, _signalled) in list(self._acks.items()):
            if due > now:
                continue
            del self._acks[job_id]
            job = self.cluster.running.get(job_id)
            if job is not None:  # a job that ended first acknowledges nothing
                comment = with_checkpoint(job.comment, math.floor(due), due)
                self.cluster.running[job_id] = dataclasses.replace(job, comment=comment)

    def snapshot(self) -> ClusterSnapshot:
        now = self.clock()
        self._admit()
        self._deliver_acks(now)
        return self.cluster.snapshot(now)  # copies the node and job maps

    def topology_text(self) -> str | None:
        return None

    def slurm_config(self) -> dict[str, str]:
        return dict(self.live_config)

    # -- writes ------------------------------------------------------------------------------
    def _job(self, call: str, job_id: int) -> Job:
        job = self.cluster.pending.get(job_id) or self.cluster.running.get(job_id)
        if job is None:
            raise SlurmCommandError(["scontrol", call], 1, "Invalid job id specified")
        self.writes[call] += 1
        return job

    def _pending(self, call: str, job_id: int) -> Job:
        job = self._job(call, job_id)
        if not job.is_pending:
            raise SlurmCommandError(["scontrol", call], 1, "Job is no longer pending execution")
        return job

    def _set(self, job: Job) -> None:
        where = self.cluster.pending if job.is_pending else self.cluster.running
        where[job.job_id] = job

    def hold(self, job_id: int) -> None:
        self._set(jobstate.held(self._pending("hold", job_id)))

    def release(self, job_id: int) -> None:
        job = jobstate.released(self._pending("release", job_id))
        self._set(job)
        if job.required_nodes:
            self._released.append(job_id)

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        unknown = [n for n in nodes if n not in self.cluster.nodes]
        job = self._pending("pin", job_id)
        if unknown:
            raise SlurmCommandError(["scontrol", "pin"], 1, f"Invalid node name: {unknown[0]}")
        self._set(dataclasses.replace(job, required_nodes=tuple(nodes)))

    def shrink(self, job_id: int, node_count: int) -> None:
        """``NumNodes=`` of a pending job (a running simulated job cannot give nodes back)."""
        self._set(dataclasses.replace(self._pending("shrink", job_id), node_count=node_count))

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        job = self._job("comment", job_id)
        if admin:
            self._set(dataclasses.replace(job, admin_comment=text))
        else:
            self._set(dataclasses.replace(job, comment=text))

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        """A running preemptible job (tagged so) checkpoints and acknowledges ``ack_s`` later."""
        job = self._job("signal", job_id)
        if not job.is_active:
            raise SlurmCommandError(["scancel", "--signal"], 1, "Job is not running")
        now = self.clock()
        self._signalled[job_id] = now
        try:
            tag, _ = parse_comment(job.comment)
        except TagError:
            tag = None
        if tag is not None and tag.preemptible and job_id not in self._acks:
            self._acks[job_id] = (now + self.ack_s, now)

    def requeue(self, job_id: int, hold: bool = True) -> None:
        job = self._job("requeue", job_id)
        if not job.is_active:
            raise SlurmCommandError(["scontrol", "requeue"], 1, "Job is not running")
        now = self.clock()
        pending = self.cluster.requeue(job_id)
        self.cluster.pending[job_id] = jobstate.requeued(pending, now, hold)
        self._acks.pop(job_id, None)
        started = job.start_time if job.start_time is not None else now
        self._requeues.append((job_id, started, self._signalled.pop(job_id, now)))

    def submit(
        self, argv: Sequence[str], script: str | None = None, env: Mapping[str, str] | None = None
    ) -> int:
        raise SlurmCommandError(["sbatch", *argv], 1, "the simulation takes its jobs from a trace")

    def cancel(self, job_id: int) -> None:
        raise SlurmCommandError(["scancel", str(job_id)], 1, "the simulation cancels no job")

    def job_status(self, job_id: int) -> JobStatus | None:
        """Only what a snapshot would show, without copying the cluster to answer for one job.

        The daemon never asks; ``slurmopt verify`` does.
        """
        self._admit()
        job = self.cluster.pending.get(job_id) or self.cluster.running.get(job_id)
        return None if job is None else JobStatus(job_id, job.state, None)

    def drain(self, node: str, reason: str) -> None:
        raise SlurmCommandError(["scontrol", "drain"], 1, "the simulation has no node failures")

    def resume(self, node: str) -> None:
        raise SlurmCommandError(["scontrol", "resume"], 1, "the simulation has no node failures")

    # -- Slurm's pass and what the engine takes ------------------------------------------------
    def take_starts(self) -> list[tuple[int, tuple[str, ...]]]:
        """Released, pinned jobs whose nodes have room now (Slurm's pass): the engine starts them.

        Jobs whose nodes are busy stay pending and are tried again at the next pass.
        """
        free = dict(self.cluster.free)
        starts: list[tuple[int, tuple[str, ...]]] = []
        waiting: list[int] = []
        for job_id in self._released:
            job = self.cluster.pending.get(job_id)
            if job is None or job.held or not job.required_nodes:
                continue
            nodes = job.required_nodes
            if all(free.get(n, 0) >= job.gpus_per_node for n in nodes):
                for name in nodes:
                    free[name] -= job.gpus_per_node
                starts.append((job_id, nodes))
            else:
                waiting.append(job_id)
        self._released = waiting
        return starts

    def schedule(self) -> list[int]:
        """Slurm's pass on its own (no engine): start the jobs :meth:`take_starts` names."""
        started = []
        for job_id, nodes in self.take_starts():
            self.cluster.start(job_id, nodes, self.clock())
            started.append(job_id)
        return started

    def take_requeues(self) -> list[tuple[int, float, float]]:
        """Jobs requeued since the last call: (job, its run's start, when it was signalled)."""
        out, self._requeues = self._requeues, []
        return out

    def next_ack(self) -> float:
        """When the next signalled job acknowledges its checkpoint (inf: none will)."""
        return min((due for due, _ in self._acks.values()), default=math.inf)


__all__ = ["PLUGIN_HOLD_REASON", "SimSlurmClient", "plugin_admit"]
