"""Builders for the daemon tests: nodes, held jobs, two leaves, a config; the fake Slurm itself
is the shared one in :mod:`tests.fakes.slurm`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmopt.config import Config
from slurmopt.fabric import Fabric
from slurmopt.model import Job, JobState, Node, NodeState
from slurmopt.store import Store
from tests.fakes.slurm import NOW, FakeCrash, FakeSlurm

SUBMIT = NOW - 100
TAG = "slurmopt:managed"

#: Old names of the shared fake, for tests written before tests/fakes/slurm.py: import
#: FakeSlurm and FakeCrash from there.
FakeSlurmClient = FakeSlurm
__all__ = ["FakeCrash", "FakeSlurmClient"]


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
