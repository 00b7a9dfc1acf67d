"""``slurmopt fragmentation`` against a fake Slurm client: output, options and one-line errors."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import slurmopt.slurm
from slurmopt.cli import main
from slurmopt.errors import SlurmUnavailable
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from tests.fakes.slurm import FakeSlurm

NODES = [
    Node("g1", NodeState.IDLE, gpus_total=8, cpus=8),
    Node("g2", NodeState.MIXED, gpus_total=8, gpus_alloc=6, cpus=8, alloc_cpus=1),
    Node("g3", NodeState.IDLE, flags=frozenset({"DRAIN"}), gpus_total=8, cpus=8),
    Node("g4", NodeState.IDLE, gpus_total=8, cpus=8),
]
SNAPSHOT = ClusterSnapshot.build(
    1_700_000_000.0,
    NODES,
    [Job(1, JobState.RUNNING, partition="gpu", nodes=("g2",), node_count=1, gpus_per_node=6)],
    [Partition("gpu", nodes=("g1", "g2", "g3", "g4"), default=True)],
)


@pytest.fixture
def fake_slurm(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replace ``connect`` and ``load_fabric`` and record how they were called."""
    calls: dict[str, Any] = {"error": None}

    def connect(backend: str = "cli", **options: Any) -> FakeSlurm:
        calls["backend"] = backend
        return FakeSlurm.from_snapshot(SNAPSHOT, calls["error"])

    def load_fabric(**kwargs: Any) -> Fabric:
        calls["fabric"] = kwargs
        return Fabric.from_leaf_map({"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"]})

    discover = types.ModuleType("slurmopt.fabric.discover")
    discover.load_fabric = load_fabric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "slurmopt.fabric.discover", discover)
    monkeypatch.setattr(slurmopt.slurm, "connect", connect, raising=False)
    return calls


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def test_json_report(fake_slurm: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "fragmentation", "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema_version"] == 2
    assert (doc["total_gpus"], doc["free_gpus"], doc["stranded_gpus"]) == (32, 18, 2)
    assert (doc["unavailable_gpus"], doc["fully_free_nodes"]) == (8, 2)
    assert [s["name"] for s in doc["switches"]] == ["leaf1", "leaf2"]
    assert doc["largest_job_now"]["whole_nodes_on_one_leaf"] == 1
    assert fake_slurm["backend"] == "cli"
    assert fake_slurm["fabric"]["fabric_file"] is None


def test_table_and_summary(fake_slurm: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fragmentation")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("switch"))
    assert "fully free nodes" in header and "stranded GPUs" in header
    leaf1 = next(line for line in lines if line.startswith("leaf1"))
    assert leaf1.split() == ["leaf1", "2", "10", "1", "1", "2", "0"]
    assert "largest job that could start now: 2 whole nodes (1 on one leaf, leaf1)" in out


def test_backend_and_fabric_file_are_passed_on(
    fake_slurm: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fabric_file = tmp_path / "fabric.yaml"
    code, _, _ = run(
        capsys, "--backend", "rest", "fragmentation", "--json", "--fabric", str(fabric_file)
    )
    assert code == 0
    assert fake_slurm["backend"] == "rest"
    assert fake_slurm["fabric"]["fabric_file"] == str(fabric_file)


def test_job_sizes_file(
    fake_slurm: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("nodes,gpus_per_node,weight\n3,8,1\n")
    code, out, _ = run(capsys, "fragmentation", "--json", "--job-sizes", str(sizes))
    assert code == 0
    doc = json.loads(out)
    # Only two nodes have 8 free GPUs, so a 3x8 job can use none of the 18.
    assert doc["fgd_unusable_share"] == 1.0
    assert doc["job_sizes"]["source"] == str(sizes)


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (("--partition", "nosuch"), 2, "slurmopt: unknown partition 'nosuch' (known: gpu)"),
        (("--job-sizes", "/nonexistent/sizes.csv"), 2, "slurmopt: cannot read job sizes"),
    ],
)
def test_bad_input_is_one_line(
    fake_slurm: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    got, out, err = run(capsys, "fragmentation", *argv)
    assert got == code
    assert out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_bad_job_sizes_file_names_the_line(
    fake_slurm: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("nodes,gpus_per_node,weight\n1,8,1\n1,eight,1\n")
    code, out, err = run(capsys, "fragmentation", "--job-sizes", str(sizes))
    assert (code, out) == (2, "")
    assert err == f"slurmopt: {sizes}:3: gpus_per_node is not a whole number: 'eight'\n"


def test_slurm_down_is_one_line(
    fake_slurm: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    fake_slurm["error"] = SlurmUnavailable("cannot reach slurmctld")
    code, out, err = run(capsys, "fragmentation", "--json")
    assert (code, out, err) == (69, "", "slurmopt: cannot reach slurmctld\n")
