"""PyslurmSlurmClient: its refusal without pyslurm, and its mapping of pyslurm's objects."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from slurmopt.errors import SlurmCommandError, SlurmUnavailable
from slurmopt.model import JobState, NodeState
from slurmopt.slurm import connect
from slurmopt.slurm.pyslurm_client import PyslurmSlurmClient, load_pyslurm


def test_without_pyslurm_connect_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes `import pyslurm` fail
    with pytest.raises(SlurmUnavailable, match="pyslurm cannot be used"):
        connect("pyslurm")


def test_real_pyslurm_loads_or_skips_with_its_reason() -> None:
    try:
        load_pyslurm()
    except SlurmUnavailable as exc:
        pytest.skip(str(exc))
    assert PyslurmSlurmClient().name == "pyslurm"


def _job(**kw: Any) -> SimpleNamespace:
    base: dict[str, Any] = dict(
        id=1, name="twonode", user_name="root", account="", partition="gpu", qos="",
        priority=10, state="RUNNING", state_reason="None", is_requeueable=True,
        requeue_count=0, array_id=None, array_task_id=None, allocated_nodes="gpu[001-002]",
        num_nodes=2, gres_per_node={"gpu:h100": 8}, time_limit=60, submit_time=100,
        start_time=110, end_time=3710, comment="c", constraints=[], required_nodes=None,
        excluded_nodes=None, dependencies={},
    )
    base.update(kw)
    job = SimpleNamespace(**base)
    job.get_resource_layout_per_node = lambda: {
        "gpu001": {"gres": {"gpu:h100": {"count": 8, "indexes": "0-7"}}},
        "gpu002": {"gres": {"gpu:h100": {"count": 8, "indexes": "0-7"}}},
    }
    return job


def _node(name: str, state: str, alloc: int) -> SimpleNamespace:
    return SimpleNamespace(
        name=name, state=state, partitions=["gpu"], active_features=["h100"],
        available_features=["h100"], weight=1, configured_gres={"gpu:h100": 8},
        allocated_gres={"gpu:h100": alloc} if alloc else {}, total_cpus=64,
        allocated_cpus=1 if alloc else 0, reason="",
    )


class FakeJobHandle:
    def __init__(self, job_id: int) -> None:
        if job_id == 99:
            raise ValueError("Invalid job id specified")
        self.job_id = job_id

    def hold(self) -> None:
        FakePyslurm.done.append(("hold", self.job_id))


class FakePyslurm:
    """Stands in for pyslurm's documented collections (``X.load()`` -> dict)."""

    done: list[tuple[str, int]] = []
    Job = FakeJobHandle
    Jobs = SimpleNamespace(load=lambda: {
        1: _job(),
        2: _job(id=2, state="PENDING", state_reason="JobHeldUser", priority=0,
                allocated_nodes=None, num_nodes=1, gres_per_node={"gpu": 8}, time_limit=None),
    })
    Nodes = SimpleNamespace(load=lambda: {
        "gpu001": _node("gpu001", "MIXED", 8),
        "gpu002": _node("gpu002", "MIXED", 8),
        "gpu003": _node("gpu003", "IDLE+DRAIN", 0),
    })
    Partitions = SimpleNamespace(load=lambda: {
        "gpu": SimpleNamespace(name="gpu", nodes="gpu[001-003]", state="UP", is_default=True,
                               max_time="UNLIMITED", max_nodes=4),
    })


def test_pyslurm_objects_map_to_the_same_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", FakePyslurm)
    snap = PyslurmSlurmClient().snapshot()
    j1, j2 = snap.jobs[1], snap.jobs[2]
    assert (j1.state, j1.nodes, j1.gpus_per_node, j1.gpu_type, j1.time_limit_s) == (
        JobState.RUNNING, ("gpu001", "gpu002"), 8, "h100", 3600)
    assert dict(j1.gpu_indices) == {"gpu001": tuple(range(8)), "gpu002": tuple(range(8))}
    assert (j2.held, j2.gpus_per_node, j2.time_limit_s, j2.nodes) == (True, 8, None, ())
    assert snap.nodes["gpu001"].alloc_gpu_indices == frozenset(range(8))
    gpu003 = snap.nodes["gpu003"]
    assert (gpu003.state, gpu003.flags, gpu003.available) == (
        NodeState.IDLE, frozenset({"DRAIN"}), False)
    part = snap.partitions["gpu"]
    assert (part.default, part.max_time_s, part.max_nodes) == (True, None, 4)
    assert snap.source == "pyslurm"


def test_pyslurm_write_failure_is_a_command_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", FakePyslurm)
    client = PyslurmSlurmClient()
    client.hold(5)
    assert FakePyslurm.done[-1] == ("hold", 5)
    with pytest.raises(SlurmCommandError, match="Invalid job id specified"):
        client.hold(99)
