"""Arrival-fill mode: the FGD paper's experiment, where tasks arrive and never leave.

Weng et al. ("Beware of Fragmentation", USENIX ATC'23) fill a cluster with
pods drawn from a trace until the GPUs asked for reach 130% of capacity, and
plot the share of GPUs allocated against the share asked for.  Nothing
ends, so there is no clock: each pod is placed on arrival or rejected, and
the curve shows how early fragmentation starts turning pods away.

The cluster is modelled per GPU device, so shares of one GPU (openb's
``gpu_milli`` < 1000) are placed as fractions of one device:

* a whole-GPU pod of ``g`` GPUs needs ``g`` devices with nothing on them,
  on one node (a gang of ``k`` nodes: ``k`` such nodes);
* a share of ``m`` milli-GPUs needs one device with at least ``m`` free;
* every pod also needs its CPU (milli-cores) and memory on the node.

GPU allocation = milli-GPUs allocated / (1000 x GPUs), as the paper counts it.

Policies (``FILL_POLICIES``):

* ``best-fit``: the paper's BestFit baseline: the fitting node with the
  least left over after placement, as the sum of its free-GPU and
  free-CPU shares; on it, the fullest device a share fits.
* ``slurm-fifo``: Slurm's ``select/cons_tres`` without topology: the first
  fitting node by index; ``slurm-backfill-tree``: ``topology/tree``'s
  choice (the leaf with the fewest fitting nodes, first node on it).
  With no job ever ending there is no queue, so backfill adds nothing.
* ``slurmopt``: the daemon's planner (:func:`slurmopt.policy.plan.plan`)
  on a snapshot of whole free devices, with the trace's GPU-pod sizes as
  its FGD distribution.  The planner has no notion of a GPU share, so a
  share first goes to the fullest partly used device it fits on (any
  node), and only when none has room is it planned as a 1-GPU job.
  Pods without GPUs are Slurm's to place (first fitting node).

On every policy the device a share takes is the fullest one it fits on.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.policy.fragmentation import JobShape, JobSizeDistribution
from slurmopt.policy.plan import PlanRequest, Policy, plan
from slurmopt.sim.slurm_baseline import TreePlacement
from slurmopt.sim.trace_formats import csv_rows, csv_whole, read_text
from slurmopt.sim.traces import DEFAULT_GPUS_PER_NODE, TraceError, read_trace

MILLI = 1000
FILL_POLICIES = ("best-fit", "slurm-fifo", "slurm-backfill-tree", "slurmopt")
#: The paper's x-axis ends at 130% of capacity asked for.
DEFAULT_MAX_ARRIVED = 1.3
#: A node without CPU or memory figures never runs out of them.
UNLIMITED = 1 << 62


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of a node list: GPUs, CPU milli-cores and memory (MiB)."""

    gpus: int
    cpu_milli: int = UNLIMITED
    memory_mib: int = UNLIMITED
    model: str = ""


@dataclass(frozen=True, slots=True)
class Pod:
    """One task of the fill: ``gpu_milli`` < 1000 is a share of one GPU (then gpus_per_node 1)."""

    pod_id: int
    nodes: int
    gpus_per_node: int
    gpu_milli: int = MILLI
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def is_share(self) -> bool:
        return self.gpus_per_node == 1 and 0 < self.gpu_milli < MILLI

    @property
    def milli_gpus(self) -> int:
        """GPUs asked for, in milli-GPUs: what the x-axis adds up."""
        if self.is_share:
            return self.gpu_milli
        return self.nodes * self.gpus_per_node * MILLI


# -- input -------------------------------------------------------------------------------------
def _rows(path: str, required: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    return list(csv_rows(read_text(path), path, required))


def _int(row: dict[str, str], key: str, path: str, line: int, default: int | None = None) -> int:
    if not row.get(key) and default is not None:
        return default
    return csv_whole(row, key, path, line)


#: The most GPUs a node of a node list may have: the fill keeps one entry per GPU.
MAX_GPUS_PER_NODE = 1024


def read_node_list(path: str | Path) -> list[NodeSpec]:
    """An openb-style node list (``sn,cpu_milli,memory_mib,gpu,model``); GPU-less rows kept."""
    name = str(path)
    nodes = []
    for line, row in _rows(name, ("gpu",)):
        if _int(row, "gpu", name, line) > MAX_GPUS_PER_NODE:
            raise TraceError(f"gpu must be at most {MAX_GPUS_PER_NODE}", name, line)
        nodes.append(
            NodeSpec(
                gpus=_int(row, "gpu", name, line),
                cpu_milli=_int(row, "cpu_milli", name, line, UNLIMITED),
                memory_mib=_int(row, "memory_mib", name, line, UNLIMITED),
                model=(row.get("model") or "").strip(),
            )
        )
    if not nodes:
        raise TraceError("no nodes", name)
    return nodes


def read_pods(
    path: str | Path, fmt: str, gpus_per_node: int = DEFAULT_GPUS_PER_NODE
) -> tuple[list[Pod], list[str]]:
    """The fill's tasks and notes: openb pods with their shares, CPU and memory; else jobs.

    Other formats go through :func:`~slurmopt.sim.traces.read_trace` (whole
    GPUs, gangs of whole nodes, no CPU or memory asked for).
    """
    name = str(path)
    if fmt != "openb":
        trace = read_trace(name, fmt, gpus_per_node)
        pods = [Pod(j.job_id, j.nodes, j.gpus_per_node) for j in trace.jobs]
        return pods, list(trace.notes)
    pods = []
    shares = cpu_only = 0
    for line, row in _rows(name, ("num_gpu", "gpu_milli")):
        gpus = _int(row, "num_gpu", name, line)
        milli = _int(row, "gpu_milli", name, line, MILLI) if gpus else 0
        cpu = _int(row, "cpu_milli", name, line, 0)
        mem = _int(row, "memory_mib", name, line, 0)
        if gpus == 0:
            cpu_only += 1
            pods.append(Pod(len(pods) + 1, 1, 0, 0, cpu, mem))
            continue
        if gpus == 1 and 0 < milli < MILLI:
            shares += 1
            pods.append(Pod(len(pods) + 1, 1, 1, milli, cpu, mem))
            continue
        if gpus > gpus_per_node:
            raise TraceError(f"num_gpu {gpus} is more than one node has", name, line)
        pods.append(Pod(len(pods) + 1, 1, gpus, MILLI, cpu, mem))
    notes = [
        f"{shares} pods ask for a share of one GPU (gpu_milli < 1000): placed as fractions "
        "of one device",
        f"{cpu_only} pods ask for no GPU: they take CPU and memory only",
    ]
    return pods, notes


def arrivals(pods: Sequence[Pod], capacity_gpus: int, max_arrived: float, seed: int) -> list[Pod]:
    """The pods in arrival order: the trace shuffled, then redrawn until ``max_arrived`` is asked.

    The trace's pods in a seeded random order; when they ask for less than
    ``max_arrived`` x capacity, more are drawn at random (with replacement)
    until they do.  Redrawn pods get new ids.
    """
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    goal = max_arrived * capacity_gpus * MILLI
    out: list[Pod] = []
    asked = 0
    gpu_pods = [p for p in pods if p.milli_gpus]
    for pod in order:
        if asked >= goal:
            return out
        out.append(pod)
        asked += pod.milli_gpus
    next_id = max((p.pod_id for p in pods), default=0) + 1
    while asked < goal and gpu_pods:
        pod = replace(rng.choice(order), pod_id=next_id)
        next_id += 1
        out.append(pod)
        asked += pod.milli_gpus
    return out


# -- the cluster -------------------------------------------------------------------------------
@dataclass
class FillNode:
    """One node's devices (free milli-GPUs each), CPU and memory left."""

    name: str
    index: int
    devices: list[int]
    cpu_total: int
    cpu_free: int
    memory_free: int

    @property
    def full_free(self) -> int:
        return sum(1 for d in self.devices if d == MILLI)

    @property
    def free_milli(self) -> int:
        return sum(self.devices)

    def fits_besides_gpus(self, pod: Pod) -> bool:
        return pod.cpu_milli <= self.cpu_free and pod.memory_mib <= self.memory_free

    def fits(self, pod: Pod) -> bool:
        if not self.fits_besides_gpus(pod):
            return False
        if pod.gpus_per_node == 0:
            return True
        if pod.is_share:
            return max(self.devices, default=0) >= pod.gpu_milli
        return self.full_free >= pod.gpus_per_node

    def take(self, pod: Pod) -> None:
        self.cpu_free -= pod.cpu_milli
        self.memory_free -= pod.memory_mib
        if pod.is_share:
            fit = [(d, i) for i, d in enumerate(self.devices) if d >= pod.gpu_milli]
            _, device = min(fit)  # the fullest device it fits on
            self.devices[device] -= pod.gpu_milli
            return
        need = pod.gpus_per_node
        for i, d in enumerate(self.devices):
            if need and d == MILLI:
                self.devices[i] = 0
                need -= 1


@dataclass
class FillCluster:
    """The fabric's compute nodes (in name order) with the node list's GPUs, CPU and memory."""

    fabric: Fabric
    nodes: list[FillNode]
    total_gpus: int
    allocated_milli: int = 0

    @classmethod
    def build(cls, fabric: Fabric, specs: Sequence[NodeSpec]) -> FillCluster:
        names = sorted(fabric.compute_nodes)
        if len(names) != len(specs):
            raise ValueError(f"the fabric has {len(names)} nodes, the node list {len(specs)}")
        nodes = [
            FillNode(n, i, [MILLI] * s.gpus, s.cpu_milli, s.cpu_milli, s.memory_mib)
            for i, (n, s) in enumerate(zip(names, specs, strict=True))
        ]
        return cls(fabric, nodes, sum(s.gpus for s in specs))

    def place(self, pod: Pod, chosen: Sequence[int]) -> None:
        for i in chosen:
            self.nodes[i].take(pod)
        if pod.gpus_per_node:
            self.allocated_milli += pod.milli_gpus


Chooser = Callable[[FillCluster, Pod], list[int] | None]


def _first_fit(cluster: FillCluster, pod: Pod) -> list[int] | None:
    chosen = []
    for node in cluster.nodes:
        if node.fits(pod):
            chosen.append(node.index)
            if len(chosen) == pod.nodes:
                return chosen
    return None


def _best_fit(cluster: FillCluster, pod: Pod) -> list[int] | None:
    ranked = []
    for node in cluster.nodes:
        if not node.fits(pod):
            continue
        gpus = len(node.devices)
        gpu_left = (node.free_milli - pod.milli_gpus // pod.nodes) / (gpus * MILLI) if gpus else 0
        cpu_left = (node.cpu_free - pod.cpu_milli) / node.cpu_total if node.cpu_total else 0
        ranked.append((gpu_left + cpu_left, node.index))
    if len(ranked) < pod.nodes:
        return None
    return [i for _, i in sorted(ranked)[: pod.nodes]]


@dataclass
class _Tree:
    placement: TreePlacement | None = None

    def __call__(self, cluster: FillCluster, pod: Pod) -> list[int] | None:
        if self.placement is None:
            order = {n.name: n.index for n in cluster.nodes}
            self.placement = TreePlacement(cluster.fabric, order)
        usable = [n.name for n in cluster.nodes if n.fits(pod)]
        chosen = self.placement.place(usable, pod.nodes)
        if chosen is None:
            return None
        index = {n.name: n.index for n in cluster.nodes}
        return [index[name] for name in chosen]


@dataclass
class _Planner:
    """The daemon's planner on whole free devices; see the module docstring for shares."""

    shapes: JobSizeDistribution
    nodes: dict[str, Node] = field(default_factory=dict)
    partition: Partition | None = None
    plan_calls: int = 0

    @property
    def single_node_shapes(self) -> bool:
        return all(shape.nodes == 1 for shape in self.shapes.shapes)

    def _node(self, node: FillNode) -> Node:
        full = node.full_free
        total = len(node.devices)
        state = NodeState.IDLE if full == total else NodeState.MIXED
        return Node(
            name=node.name,
            state=NodeState.ALLOCATED if full == 0 else state,
            partitions=("gpu",),
            gpus_total=total,
            gpus_alloc=total - full,
        )

    def __call__(self, cluster: FillCluster, pod: Pod) -> list[int] | None:
        if pod.gpus_per_node == 0:
            return _first_fit(cluster, pod)
        if pod.is_share:
            partly = [
                (min(d for d in n.devices if pod.gpu_milli <= d < MILLI), n.index)
                for n in cluster.nodes
                if n.fits(pod) and any(pod.gpu_milli <= d < MILLI for d in n.devices)
            ]
            if partly:
                return [min(partly)[1]]
        if not self.nodes:
            self.nodes = {n.name: self._node(n) for n in cluster.nodes}
            self.partition = Partition("gpu", tuple(self.nodes), default=True)
        assert self.partition is not None
        job = Job(
            job_id=pod.pod_id,
            state=JobState.PENDING,
            partition="gpu",
            node_count=pod.nodes,
            gpus_per_node=pod.gpus_per_node,
        )
        if self.single_node_shapes:
            # Every shape fits one node, so a node's FGD cost depends on that node alone and
            # leaving out the nodes this pod cannot use changes no choice, only the cost.
            names = tuple(n.name for n in cluster.nodes if n.fits(pod))
            if not names:
                return None
            nodes = {name: self.nodes[name] for name in names}
            partition = Partition("gpu", names, default=True)
        else:
            nodes, partition = self.nodes, self.partition
            excluded = tuple(n.name for n in cluster.nodes if not n.fits_besides_gpus(pod))
            job = replace(job, excluded_nodes=excluded)
        snapshot = ClusterSnapshot(
            taken_at=0.0,
            nodes=nodes,
            jobs={job.job_id: job},
            partitions={"gpu": partition},
            slurm_version="simulated",
            source="simulator",
        )
        self.plan_calls += 1
        result = plan(PlanRequest(snapshot, cluster.fabric, Policy(job_sizes=self.shapes), 0.0))
        if not result.actions:
            return None
        index = {n.name: n.index for n in cluster.nodes}
        return [index[name] for name in result.actions[0].nodes]

    def placed(self, cluster: FillCluster, chosen: Sequence[int]) -> None:
        """Refresh the snapshot's view of the nodes a placement changed."""
        if self.nodes:
            for i in chosen:
                node = cluster.nodes[i]
                self.nodes[node.name] = self._node(node)


def gpu_pod_shapes(pods: Sequence[Pod]) -> JobSizeDistribution:
    """The GPU pods' sizes by count (shares as 1 GPU): the planner's FGD distribution."""
    counts: dict[tuple[int, int], int] = {}
    for pod in pods:
        if pod.gpus_per_node:
            key = (pod.nodes, pod.gpus_per_node)
            counts[key] = counts.get(key, 0) + 1
    shapes = tuple(JobShape(n, g, float(c)) for (n, g), c in sorted(counts.items()))
    return JobSizeDistribution("trace", shapes)


@dataclass(frozen=True)
class FillResult:
    """GPU allocation (%) at each whole percent of capacity asked for, and the pods turned away."""

    policy: str
    seed: int
    curve: tuple[tuple[int, float], ...]
    arrived_pods: int
    placed_pods: int
    rejected_pods: int
    rejected_gpu_pods: int
    wall_s: float

    @property
    def allocation_at_max(self) -> float:
        return self.curve[-1][1] if self.curve else 0.0

    def to_json(self, series: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seed": self.seed,
            "arrived_pct": self.curve[-1][0] if self.curve else 0,
            "gpu_allocation_pct": self.allocation_at_max,
            "arrived_pods": self.arrived_pods,
            "placed_pods": self.placed_pods,
            "rejected_pods": self.rejected_pods,
            "rejected_gpu_pods": self.rejected_gpu_pods,
            "wall_s": round(self.wall_s, 3),
        }
        if series:
            out["curve"] = [{"arrived_pct": x, "gpu_allocation_pct": y} for x, y in self.curve]
        return out


def fill(
    pods: Sequence[Pod],
    fabric: Fabric,
    specs: Sequence[NodeSpec],
    policy: str,
    seed: int = 42,
    max_arrived: float = DEFAULT_MAX_ARRIVED,
    progress: Callable[[int, int], None] | None = None,
) -> FillResult:
    """Fill the cluster with ``pods`` in a seeded order under ``policy`` (module docstring)."""
    cluster = FillCluster.build(fabric, specs)
    planner: _Planner | None = None
    chooser: Chooser
    if policy == "best-fit":
        chooser = _best_fit
    elif policy == "slurm-fifo":
        chooser = _first_fit
    elif policy == "slurm-backfill-tree":
        chooser = _Tree()
    elif policy == "slurmopt":
        chooser = planner = _Planner(gpu_pod_shapes(pods))
    else:
        raise ValueError(f"unknown fill policy {policy!r} (known: {', '.join(FILL_POLICIES)})")
    order = arrivals(pods, cluster.total_gpus, max_arrived, seed)
    capacity = cluster.total_gpus * MILLI
    last_pct = math.floor(max_arrived * 100 + 1e-9)
    curve: list[tuple[int, float]] = [(0, 0.0)]
    asked = placed = rejected = rejected_gpu = 0
    wall = time.perf_counter()
    for n, pod in enumerate(order):
        chosen = chooser(cluster, pod)
        if chosen is None:
            rejected += 1
            rejected_gpu += pod.gpus_per_node > 0
        else:
            cluster.place(pod, chosen)
            if planner is not None:
                planner.placed(cluster, chosen)
            placed += 1
        asked += pod.milli_gpus
        pct = min(last_pct, math.floor(100 * asked / capacity + 1e-9))
        while curve[-1][0] < pct:
            curve.append((curve[-1][0] + 1, round(100 * cluster.allocated_milli / capacity, 2)))
        if progress is not None:
            progress(n + 1, len(order))
    return FillResult(
        policy,
        seed,
        tuple(curve),
        len(order),
        placed,
        rejected,
        rejected_gpu,
        time.perf_counter() - wall,
    )


def published_allocation(path: str | Path, workload: str, policy: str, at_pct: int) -> float:
    """Mean over seeds of a policy's allocation (%) at ``at_pct`` in the FGD paper's results."""
    name = str(path)
    values = [
        float(row[str(at_pct)])
        for _, row in _rows(name, ("workload", "sc_policy", str(at_pct)))
        if row["workload"] == workload and row["sc_policy"].split("-", 1)[-1] == policy
    ]
    if not values:
        raise TraceError(f"no rows for workload {workload!r} and policy {policy!r}", name)
    return sum(values) / len(values)
