"""The simulated Slurm: nodes with GPUs, pending and running jobs, and snapshots of them.

Node and job objects are immutable, so the cluster keeps one per node and
per job and replaces only those a start or an end changes; a snapshot is
then two dictionary copies, never a rebuild of every node.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.sim.traces import TraceJob
from slurmopt.tag import JobTag, elastic_range, format_comment, is_preemptible_comment

PARTITION = "gpu"
#: A trace's preemptible job carries the tag ``slurmopt submit`` would give it.
PREEMPTIBLE_COMMENT = format_comment(JobTag(preemptible=True))


def _comment(job: TraceJob) -> str:
    """The tag ``slurmopt submit`` would give the job (``--preemptible``, ``--elastic``,
    ``--nvlink-domain``)."""
    if job.min_nodes is None and job.domain is None:
        return PREEMPTIBLE_COMMENT if job.preemptible else ""
    elastic = None if job.min_nodes is None else (job.min_nodes, job.nodes)
    return format_comment(JobTag(preemptible=job.preemptible, elastic=elastic, domain=job.domain))


class SimulationError(RuntimeError):
    """A scheduler asked for something the simulated cluster cannot do (a bug, not bad input)."""


class SimCluster:
    """Every node of the fabric with ``gpus_per_node`` GPUs, in one partition ``gpu``.

    ``free`` and ``histogram`` (nodes per free-GPU count, free > 0) are kept
    up to date on every change, as is ``stranded``: free GPUs on partly used
    nodes, the ones only a job that fits beside others can use.
    ``sub_node_gpus`` counts the GPUs of running jobs smaller than a node, so
    :attr:`stranded_floor` can say how few GPUs any packing of the same
    running jobs would strand.
    """

    def __init__(self, fabric: Fabric, gpus_per_node: int) -> None:
        self.fabric = fabric
        self.node_names: tuple[str, ...] = tuple(sorted(fabric.compute_nodes))
        self.index = {name: i for i, name in enumerate(self.node_names)}
        self.gpus_per_node = gpus_per_node
        self.total_gpus = gpus_per_node * len(self.node_names)
        self.free: dict[str, int] = dict.fromkeys(self.node_names, gpus_per_node)
        self.histogram: Counter[int] = Counter({gpus_per_node: len(self.node_names)})
        self.stranded = 0
        self.allocated = 0
        self.sub_node_gpus = 0
        self.nodes: dict[str, Node] = {
            name: Node(
                name=name,
                state=NodeState.IDLE,
                partitions=(PARTITION,),
                gpus_total=gpus_per_node,
                cpus=gpus_per_node * 8,
            )
            for name in self.node_names
        }
        self.partition = Partition(PARTITION, self.node_names, default=True)
        self.pending: dict[int, Job] = {}
        #: Waiting jobs by GPUs asked per node, for :attr:`stranded_usable`.
        self.pending_sizes: Counter[int] = Counter()
        self.running: dict[int, Job] = {}
        #: Running jobs tagged preemptible (the engine asks on every arrival).
        self.preemptible_running = 0
        #: Each submitted job's run time at the best placement (what an oracle would know).
        self.durations: dict[int, float] = {}
        #: Jobs that ended, with their run time, oldest first (for run-time estimates).
        self.ended: list[tuple[Job, float]] = []
        #: Set by the engine before each pass: victims are signalled and not yet requeued, so no
        #: new preemption may start (Slurm still shows them running; the daemon's store knows).
        self.preemption_in_flight = False

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self, now: float) -> ClusterSnapshot:
        """What ``squeue``/``sinfo`` would show now."""
        jobs = dict(self.running)
        jobs.update(self.pending)
        return ClusterSnapshot(
            taken_at=now,
            nodes=self.nodes,
            jobs=jobs,
            partitions={PARTITION: self.partition},
            slurm_version="simulated",
            source="simulator",
        )

    @property
    def stranded_floor(self) -> int:
        """The fewest GPUs any placement of the running jobs could leave stranded.

        Jobs smaller than a node fill ``ceil(S / G)`` nodes at best, so at
        least ``-S mod G`` of those nodes' GPUs stay free beside them: what
        a perfect repacking (migration included) of the same jobs would
        strand. Only a change of what runs gets below it.
        """
        return -self.sub_node_gpus % self.gpus_per_node

    @property
    def stranded_usable(self) -> int:
        """Stranded GPUs on nodes with room for the smallest per-node ask of any waiting job.

        The rest of the stranded GPUs are too few on their node for every job
        that waits; these are the ones a waiting job could take by size, yet
        it waits (a reservation holds the node, or the job needs more nodes).
        0 with nobody waiting.
        """
        if not self.pending_sizes:
            return 0
        smallest = min(self.pending_sizes)
        total = self.gpus_per_node
        return sum(f * n for f, n in self.histogram.items() if smallest <= f < total)

    def nodes_with_free(self, gpus: int) -> int:
        """How many nodes have at least ``gpus`` free."""
        return sum(count for free, count in self.histogram.items() if free >= gpus)

    # -- changes -----------------------------------------------------------------------------
    def submit(self, job: TraceJob) -> Job:
        pending = Job(
            job_id=job.job_id,
            state=JobState.PENDING,
            partition=PARTITION,
            priority=job.priority,
            node_count=job.nodes,
            gpus_per_node=job.gpus_per_node,
            time_limit_s=job.time_limit_s,
            submit_time=job.submit_s,
            comment=_comment(job),
            admin_comment=_comment(job),  # as the job-submit plugin copies it at submission
        )
        self._wait(pending)
        self.durations[job.job_id] = job.duration_s
        return pending

    def start(self, job_id: int, nodes: tuple[str, ...], now: float) -> Job:
        """Run a pending job on ``nodes`` now; raises :class:`SimulationError` if it cannot."""
        job = self.pending.get(job_id)
        if job is None:
            raise SimulationError(f"job {job_id} is not pending")
        low = (elastic_range(job.admin_comment) or (job.node_count,))[0]
        if not low <= len(nodes) <= job.node_count or len(set(nodes)) != len(nodes):
            raise SimulationError(f"job {job_id} needs {job.node_count} nodes, got {nodes}")
        for name in nodes:
            if self.free.get(name, -1) < job.gpus_per_node:
                raise SimulationError(
                    f"job {job_id} needs {job.gpus_per_node} GPUs on {name}, "
                    f"{self.free.get(name)} free"
                )
        for name in nodes:
            self._set_free(name, self.free[name] - job.gpus_per_node)
        if job.gpus_per_node < self.gpus_per_node:
            self.sub_node_gpus += job.gpus_per_node * len(nodes)
        del self.pending[job_id]
        self.pending_sizes[job.gpus_per_node] -= 1
        if not self.pending_sizes[job.gpus_per_node]:
            del self.pending_sizes[job.gpus_per_node]  # min() of the sizes sees waiting jobs only
        running = replace(
            job, state=JobState.RUNNING, nodes=nodes, node_count=len(nodes), start_time=now
        )
        self.running[job_id] = running
        self.preemptible_running += is_preemptible_comment(job.admin_comment)
        return running

    def finish(self, job_id: int, now: float | None = None) -> Job:
        job = self._stop(job_id)
        if now is not None and job.start_time is not None:
            self.ended.append((job, now - job.start_time))
        return job

    def requeue(self, job_id: int) -> Job:
        """A running job checkpointed and requeued: its GPUs come back, it waits again."""
        job = self._stop(job_id)
        # An elastic job waits again for its MAX.
        asked = (elastic_range(job.admin_comment) or (0, job.node_count))[1]
        pending = replace(job, state=JobState.PENDING, nodes=(), node_count=asked, start_time=None)
        self._wait(pending)
        return pending

    def _wait(self, job: Job) -> None:
        """Queue a pending job, counted in :attr:`pending_sizes`."""
        self.pending[job.job_id] = job
        self.pending_sizes[job.gpus_per_node] += 1

    def _stop(self, job_id: int) -> Job:
        """A running job gives its GPUs back (it ended or was requeued)."""
        job = self.running.pop(job_id)
        for name in job.nodes:
            self._set_free(name, self.free[name] + job.gpus_per_node)
        if job.gpus_per_node < self.gpus_per_node:
            self.sub_node_gpus -= job.gpus_per_node * len(job.nodes)
        self.preemptible_running -= is_preemptible_comment(job.admin_comment)
        return job

    def _set_free(self, name: str, free: int) -> None:
        old = self.free[name]
        total = self.gpus_per_node
        self.free[name] = free
        self.allocated += old - free
        if old:
            self.histogram[old] -= 1
            if not self.histogram[old]:
                del self.histogram[old]
        if free:
            self.histogram[free] += 1
        self.stranded += (free if 0 < free < total else 0) - (old if 0 < old < total else 0)
        alloc = total - free
        state = NodeState.IDLE if alloc == 0 else NodeState.MIXED
        if free == 0:
            state = NodeState.ALLOCATED
        self.nodes[name] = replace(
            self.nodes[name], state=state, gpus_alloc=alloc, alloc_cpus=alloc * 8
        )
