"""An in-memory fake of Slurm for the daemon tests: it records every call and can crash."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from slurmopt.config import Config
from slurmopt.errors import SlurmCommandError, SlurmUnavailable
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.store import Store

NOW = 1_000_000.0
SUBMIT = NOW - 100
TAG = "slurmopt:managed"


class FakeCrash(BaseException):
    """The daemon process dying at this point (not an error anything may catch)."""


class FakeSlurmClient:
    """Slurm as a dict of nodes and jobs; writes change it and are logged in ``calls``.

    ``crash_on`` names a call (``"pin"``, ``"release"``, ``"hold"``) that raises
    :class:`FakeCrash` instead of happening, once; ``down`` makes every call
    raise :class:`SlurmUnavailable`.
    """

    name = "fake"

    def __init__(self, nodes: Sequence[Node], jobs: Sequence[Job] = ()) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.jobs = {j.job_id: j for j in jobs}
        self.calls: list[tuple[Any, ...]] = []
        self.crash_on: str | None = None
        #: Run once when a call of that name is entered: a slow or paused call, say.
        self.during: dict[str, Callable[[], None]] = {}
        self.down = False
        self.clock = NOW
        self.live_config: dict[str, str] = {"JobSubmitPlugins": "lua"}

    # -- reads -----------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        if self.down:
            raise SlurmUnavailable("squeue --json: slurmctld unreachable: fake")
        part = Partition("gpu", tuple(self.nodes), default=True)
        return ClusterSnapshot.build(self.clock, self.nodes.values(), self.jobs.values(), [part])

    def topology_text(self) -> str | None:
        return None

    def slurm_config(self) -> dict[str, str]:
        if self.down:
            raise SlurmUnavailable("scontrol show config: fake controller down")
        return dict(self.live_config)

    # -- writes ----------------------------------------------------------------------------
    def _enter(self, call: str, job_id: int) -> Job:
        if self.down:
            raise SlurmUnavailable(f"scontrol {call}: fake controller down")
        if self.crash_on == call:
            self.crash_on = None
            raise FakeCrash(call)
        hook = self.during.pop(call, None)
        if hook is not None:
            hook()
        job = self.jobs.get(job_id)
        if job is None:
            raise SlurmCommandError(["scontrol", call], 1, "Invalid job id specified")
        return job

    def _set(self, job_id: int, **changes: Any) -> None:
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], **changes)

    def hold(self, job_id: int) -> None:
        self._enter("hold", job_id)
        self.calls.append(("hold", job_id))
        self._set(job_id, held=True, reason="JobHeldAdmin", priority=0)

    def release(self, job_id: int) -> None:
        self._enter("release", job_id)
        self.calls.append(("release", job_id))
        self._set(job_id, held=False, reason="", priority=1)

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        self._enter("pin", job_id)
        self.calls.append(("pin", job_id, tuple(nodes)))
        self._set(job_id, required_nodes=tuple(nodes))

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        self._enter("comment", job_id)
        self.calls.append(("comment", job_id, text))
        self._set(job_id, **{"admin_comment" if admin else "comment": text})

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        raise NotImplementedError

    def requeue(self, job_id: int, hold: bool = True) -> None:
        raise NotImplementedError

    def shrink(self, job_id: int, node_count: int) -> None:
        self.calls.append(("shrink", job_id, node_count))
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], node_count=node_count)

    def submit(self, argv: Sequence[str], script: str | None = None) -> int:
        raise NotImplementedError

    def drain(self, node: str, reason: str) -> None:
        raise NotImplementedError

    # -- what Slurm itself would do ----------------------------------------------------------
    def start(self, job_id: int) -> None:
        """Slurm starts a released job on its pinned nodes."""
        job = self.jobs[job_id]
        nodes = job.required_nodes or (next(iter(self.nodes)),)
        self._set(job_id, state=JobState.RUNNING, nodes=nodes, start_time=self.clock)
        for name in nodes:
            node = self.nodes[name]
            self.nodes[name] = dataclasses.replace(
                node, gpus_alloc=node.gpus_total, state=NodeState.ALLOCATED
            )

    def end(self, job_id: int, state: JobState = JobState.COMPLETED) -> None:
        self._set(job_id, state=state)

    def held_ids(self) -> list[int]:
        return sorted(j.job_id for j in self.jobs.values() if j.reason == "JobHeldAdmin")

    def count(self, call: str, job_id: int) -> int:
        return sum(1 for c in self.calls if c[0] == call and c[1] == job_id)


def node(name: str, alloc: int = 0) -> Node:
    state = NodeState.IDLE if alloc == 0 else NodeState.MIXED
    return Node(name=name, state=state, gpus_total=8, gpus_alloc=alloc, partitions=("gpu",))


def plugin_tag(comment: str) -> str:
    """The admin comment the job-submit plugin writes for a job whose comment is ``comment``.

    A slurmopt tag is copied with the plugin's ``held`` marker; anything else
    gives no admin comment (the plugin would not have held the job).
    """
    if not comment.startswith(TAG):
        return ""
    body = comment.partition(" | ")[0]
    return body if "held" in body.split(",") else f"{body},held"


def held_job(job_id: int, nodes: int = 1, gpus: int = 8, **kw: Any) -> Job:
    """A managed job held by slurmopt (tagged, admin hold, priority 0).

    ``comment`` is the owner's; the admin comment is what the plugin wrote
    for it (:func:`plugin_tag`) unless ``admin_comment`` is given.
    """
    kw.setdefault("comment", TAG)
    kw.setdefault("admin_comment", plugin_tag(kw["comment"]))
    kw.setdefault("submit_time", SUBMIT + job_id)
    kw.setdefault("reason", "JobHeldAdmin")
    return Job(
        job_id=job_id,
        state=JobState.PENDING,
        partition="gpu",
        held=True,
        node_count=nodes,
        gpus_per_node=gpus,
        time_limit_s=600,
        **kw,
    )


def two_leaves() -> tuple[list[Node], Fabric]:
    names = {"leafA": [f"a{i}" for i in range(4)], "leafB": [f"b{i}" for i in range(4)]}
    nodes = [node(n) for group in names.values() for n in group]
    return nodes, Fabric.from_leaf_map(names)


def config(tmp_path: Path, **kw: Any) -> Config:
    values: dict[str, Any] = {
        "enforce": True,
        "interval_s": 1.0,
        "db": f"sqlite:///{tmp_path / 'd.db'}",
        "heartbeat_path": str(tmp_path / "heartbeat"),
        "pin_timeout_s": 30.0,
    }
    values.update(kw)
    return Config(**values)


def open_store(cfg: Config) -> Store:
    return Store.open(cfg.db)
