"""The sandbox cluster from ``scripts/slurm-sandbox`` is the cluster the other tests assume."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.sandbox import SlurmSandbox

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-sandbox"


def _sandbox_dir(slurm: SlurmSandbox) -> Path:
    # SLURM_CONF is $DIR/etc/slurm.conf
    return Path(slurm.conf).resolve().parent.parent


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slurm
def test_cluster_has_32_nodes_with_8_gpus_in_partition_gpu(slurm: SlurmSandbox) -> None:
    rows = slurm.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %G %T").splitlines()
    nodes = {row.split()[0]: row.split()[1:] for row in rows}
    assert sorted(nodes) == [f"gpu{i:03d}" for i in range(1, 33)]
    assert all(gres == "gpu:8" and state == "idle" for gres, state in nodes.values()), nodes
    part = slurm.run("scontrol", "show", "partition", "gpu", "-o")
    assert "TotalNodes=32 " in part


@pytest.mark.slurm
def test_topology_has_four_leaves_of_eight_under_one_spine(slurm: SlurmSandbox) -> None:
    switches = {}
    for line in slurm.run("scontrol", "show", "topology").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        switches[fields["SwitchName"]] = fields
    assert sorted(switches) == ["leaf1", "leaf2", "leaf3", "leaf4", "spine"]
    for i in range(1, 5):
        leaf = switches[f"leaf{i}"]
        assert leaf["Level"] == "0"
        assert leaf["Nodes"] == f"gpu[{8 * i - 7:03d}-{8 * i:03d}]"
    assert switches["spine"]["Level"] == "1"
    assert switches["spine"]["Switches"] == "leaf[1-4]"


@pytest.mark.slurm
def test_held_job_pinned_to_nodes_runs_exactly_there(slurm: SlurmSandbox) -> None:
    job = slurm.sbatch("--hold", "-N2", "--gres=gpu:8")
    assert slurm.job_field(job, "%T") == "PENDING"
    slurm.run("scontrol", "update", f"JobId={job}", "NodeList=gpu[003-004]")
    slurm.run("scontrol", "release", str(job))
    slurm.wait_state(job, "RUNNING", timeout=30)
    assert slurm.job_field(job, "%N") == "gpu[003-004]"


@pytest.mark.slurm
def test_two_node_gpu8_job_holds_all_eight_gpus_on_each_node(slurm: SlurmSandbox) -> None:
    job = slurm.sbatch("-N2", "--gres=gpu:8")
    slurm.wait_state(job, "RUNNING", timeout=30)
    jobs = json.loads(slurm.run("squeue", "--json"))["jobs"]
    (mine,) = [j for j in jobs if j["job_id"] == job]
    assert mine["gres_detail"] == ["gpu:8(IDX:0-7)", "gpu:8(IDX:0-7)"]


def test_unknown_option_is_a_one_line_usage_error() -> None:
    proc = _script("up", "--bogus")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--bogus" in lines[0] and "usage:" in lines[0]


@pytest.mark.slurm
def test_status_reports_the_running_sandbox(slurm: SlurmSandbox) -> None:
    proc = _script("status", "--dir", str(_sandbox_dir(slurm)))
    assert proc.returncode == 0, proc.stderr
    assert re.match(r"up: 32 nodes\b", proc.stdout), proc.stdout


@pytest.mark.slurm
def test_second_up_refuses_and_leaves_the_running_cluster_alone(slurm: SlurmSandbox) -> None:
    sandbox = _sandbox_dir(slurm)
    pids_file = sandbox / "run" / "pids"
    pids_before = pids_file.read_text()
    conf_before = Path(slurm.conf).read_text()
    job = slurm.sbatch("-N1", "--gres=gpu:2")
    slurm.wait_state(job, "RUNNING", timeout=30)

    proc = _script("up", "--nodes", "4", "--dir", str(sandbox))

    assert proc.returncode != 0
    assert "down" in proc.stderr, proc.stderr
    assert "export SLURM_CONF" not in proc.stdout
    assert pids_file.read_text() == pids_before
    assert Path(slurm.conf).read_text() == conf_before
    assert "UP" in slurm.run("scontrol", "ping")
    assert len(slurm.node_names()) == 32
    assert slurm.job_field(job, "%T") == "RUNNING"
