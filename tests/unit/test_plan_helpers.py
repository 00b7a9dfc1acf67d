"""Hand-built clusters for the planner tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition

NOW = 1_000_000.0


def gpu_node(name: str, alloc: int = 0, total: int = 8, **kw: Any) -> Node:
    state = NodeState.IDLE if alloc == 0 else NodeState.MIXED
    if alloc >= total:
        state = NodeState.ALLOCATED
    kw.setdefault("partitions", ("gpu",))
    return Node(name=name, state=state, gpus_total=total, gpus_alloc=alloc, **kw)


def pending(job_id: int, nodes: int = 1, gpus: int = 8, **kw: Any) -> Job:
    kw.setdefault("partition", "gpu")
    kw.setdefault("priority", 1000 - job_id)
    kw.setdefault("submit_time", NOW - 100)
    kw.setdefault("time_limit_s", 3600)
    return Job(job_id=job_id, state=JobState.PENDING, node_count=nodes, gpus_per_node=gpus, **kw)


def running(job_id: int, nodes: Sequence[str], gpus: int = 8, ends_in: float | None = None) -> Job:
    """A running job on ``nodes``; ``ends_in`` seconds from NOW, or no time limit."""
    return Job(
        job_id=job_id,
        state=JobState.RUNNING,
        partition="gpu",
        nodes=tuple(nodes),
        node_count=len(nodes),
        gpus_per_node=gpus,
        start_time=NOW - 10,
        time_limit_s=None if ends_in is None else int(ends_in + 10),
    )


def snapshot(
    nodes: Iterable[Node],
    jobs: Iterable[Job],
    partitions: Mapping[str, Sequence[str]] | None = None,
    **part_kw: Any,
) -> ClusterSnapshot:
    nodes = list(nodes)
    if partitions is None:
        partitions = {"gpu": [n.name for n in nodes]}
    parts = [
        Partition(name, tuple(members), default=(i == 0), **part_kw)
        for i, (name, members) in enumerate(partitions.items())
    ]
    return ClusterSnapshot.build(NOW, nodes, jobs, parts)


def leaf_fabric(leaves: Mapping[str, Sequence[str]]) -> Fabric:
    return Fabric.from_leaf_map(leaves)


def busy_leaves(
    free_per_leaf: Mapping[str, int], size: int = 8
) -> tuple[list[Node], list[Job], Fabric]:
    """Leaves of ``size`` whole 8-GPU nodes; all but ``free`` of each run one unlimited job."""
    nodes: list[Node] = []
    jobs: list[Job] = []
    leaves: dict[str, list[str]] = {}
    job_id = 90_000
    for leaf, free in free_per_leaf.items():
        names = [f"{leaf}n{i}" for i in range(size)]
        leaves[leaf] = names
        for i, name in enumerate(names):
            used = i >= free
            nodes.append(gpu_node(name, alloc=8 if used else 0))
            if used:
                job_id += 1
                jobs.append(running(job_id, [name]))
    return nodes, jobs, leaf_fabric(leaves)
