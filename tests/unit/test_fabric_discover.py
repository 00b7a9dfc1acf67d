"""Discovery order: fabric file, Slurm's scontrol output, files beside slurm.conf, flat."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmopt.fabric import load_fabric
from slurmopt.model import Node, NodeState
from tests.fakes.slurm import FakeSlurm

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fabric"
SCONTROL = (FIXTURES / "scontrol_show_topology_24.11.txt").read_text()


def FakeClient(topology: str | None, nodes: list[str] | None = None) -> FakeSlurm:  # noqa: N802
    """Idle nodes named ``nodes`` and ``topology`` as ``scontrol show topology`` prints it."""
    return FakeSlurm([Node(n, NodeState.IDLE) for n in nodes or []], topology=topology, clock=0.0)


@pytest.fixture
def conf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Slurm config directory that $SLURM_CONF points into."""
    (tmp_path / "slurm.conf").write_text("ClusterName=test\n")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    return tmp_path


def test_fabric_file_comes_first(conf_dir: Path) -> None:
    client = FakeClient(SCONTROL)
    fabric = load_fabric(client, fabric_file=FIXTURES / "fat-tree.yaml")
    assert fabric.source.startswith("fabric file")
    assert client.reads("topology") == 0


def test_slurm_topology_beats_files_beside_slurm_conf(conf_dir: Path) -> None:
    shutil.copy(FIXTURES / "sandbox-topology.conf", conf_dir / "topology.conf")
    fabric = load_fabric(FakeClient(SCONTROL))
    assert fabric.source == "scontrol show topology (fake)"
    assert fabric.leaves() == ["leaf1", "leaf2"]


def test_topology_yaml_beside_slurm_conf_beats_topology_conf(conf_dir: Path) -> None:
    shutil.copy(FIXTURES / "sandbox-topology.conf", conf_dir / "topology.conf")
    shutil.copy(FIXTURES / "slurm-topology-block.yaml", conf_dir / "topology.yaml")
    fabric = load_fabric(FakeClient(None))
    assert fabric.source == f"topology.yaml {conf_dir / 'topology.yaml'}"
    assert fabric.leaves() == ["b1", "b2"]


def test_topology_conf_beside_explicit_slurm_conf(tmp_path: Path, conf_dir: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(FIXTURES / "sandbox-topology.conf", other / "topology.conf")
    fabric = load_fabric(
        FakeClient("No topology information available\n"), slurm_conf=other / "slurm.conf"
    )
    assert fabric.source == f"topology.conf {other / 'topology.conf'}"
    assert len(fabric.leaves()) == 4


def test_flat_fallback_over_given_nodes(conf_dir: Path) -> None:
    fabric = load_fabric(None, nodes=["n2", "n1"])
    assert fabric.source.startswith("flat")
    assert fabric.leaves() == ["switch0"]
    assert fabric.nodes_under("switch0") == ("n1", "n2")


def test_flat_fallback_over_the_clients_nodes(conf_dir: Path) -> None:
    fabric = load_fabric(FakeClient(None, nodes=["a1", "a2", "a3"]))
    assert fabric.nodes_under("switch0") == ("a1", "a2", "a3")
    assert fabric.hops("a1", "a3") == 2


def test_known_nodes_are_checked_against_slurms_topology(conf_dir: Path) -> None:
    from slurmopt.errors import FabricError

    with pytest.raises(FabricError, match="unknown node gpu005"):
        load_fabric(FakeClient(SCONTROL), nodes=["gpu001", "gpu002", "gpu003", "gpu004"])
