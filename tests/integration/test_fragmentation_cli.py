"""``slurmopt fragmentation`` on the real sandbox: exact figures for a known occupancy.

Sandbox: gpu[001-032], 8 GPUs each, leaf1..leaf4 of 8 nodes, partition ``gpu``.
Occupancy set up here:

* leaf1: a 2-node gpu:8 job on gpu[001-002] (both nodes have no GPU left);
* leaf2: a gpu:3 and a gpu:2 job on gpu010 (3 GPUs stranded there);
* leaf3: a gpu:8 job on gpu017;
* leaf4: gpu025 drained while idle (its 8 GPUs are unavailable).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.sandbox import SlurmSandbox, free_port

pytestmark = pytest.mark.slurm


def slurmopt(conf: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("slurmopt")
    assert exe is not None, "the slurmopt console script is not installed"
    return subprocess.run(
        [exe, *argv],
        env={**os.environ, "SLURM_CONF": conf},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def switch(name: str, free_gpus: int, free: int, partly: int, busy: int, unavail: int,
           stranded: int) -> dict[str, object]:  # fmt: skip
    return {
        "name": name, "nodes": 8, "total_gpus": 64, "free_gpus": free_gpus, "free_nodes": free,
        "partly_used_nodes": partly, "busy_nodes": busy, "unavailable_nodes": unavail,
        "stranded_gpus": stranded,
    }  # fmt: skip


def gang(name: str, nodes: int, free_gpus: int, free: int) -> dict[str, object]:
    return {
        "name": name, "nodes": nodes, "free_gpus": free_gpus, "free_nodes": free,
        "largest_gang_nodes": free, "largest_gang_gpus": 8 * free,
    }  # fmt: skip


def test_exact_figures_for_known_occupancy(slurm: SlurmSandbox) -> None:
    jobs = [
        slurm.sbatch("-p", "gpu", "-N2", "--gres=gpu:8", "--nodelist=gpu[001-002]"),
        slurm.sbatch("-p", "gpu", "-N1", "--gres=gpu:3", "--nodelist=gpu010"),
        slurm.sbatch("-p", "gpu", "-N1", "--gres=gpu:2", "--nodelist=gpu010"),
        slurm.sbatch("-p", "gpu", "-N1", "--gres=gpu:8", "--nodelist=gpu017"),
    ]
    slurm.run("scontrol", "update", "NodeName=gpu025", "State=DRAIN", "Reason=test")
    for job_id in jobs:
        slurm.wait_state(job_id, "RUNNING", timeout=60)

    proc = slurmopt(slurm.conf, "fragmentation", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)

    assert isinstance(doc.pop("taken_at"), (int, float))
    assert doc.pop("fabric_source").startswith("scontrol show topology")
    shapes = doc["job_sizes"].pop("shapes")
    # 27 nodes with 8 free GPUs and gpu010 with 3: 219 free.  Only the 3 on
    # gpu010 are out of reach, and only for the 8-GPU shapes.
    assert [(s["nodes"], s["gpus_per_node"], s["weight"]) for s in shapes] == [
        (1, 2, 1.0), (1, 3, 1.0), (1, 8, 1.0), (2, 8, 1.0),
    ]  # fmt: skip
    assert [s["unusable_share"] for s in shapes] == [0.0, 0.0, round(3 / 219, 6), round(3 / 219, 6)]
    assert doc == {
        "schema_version": 2,
        "partition": None,
        "nodes": 32,
        "total_gpus": 256,
        "allocated_gpus": 16 + 3 + 2 + 8,
        "unavailable_gpus": 8,
        "free_gpus": 256 - 29 - 8,
        "stranded_gpus": 3,
        "fully_free_nodes": 27,
        "partly_used_nodes": 1,
        "busy_nodes": 3,
        "unavailable_nodes": 1,
        "largest_single_leaf_job_nodes": 7,
        "largest_job_nodes": 27,
        "fragmentation_index": round(3 / 219, 6),
        "fgd_unusable_share": round((3 / 219 + 3 / 219) / 4, 6),
        "job_sizes": {"source": "queue"},
        "largest_job_now": {
            "whole_nodes": 27,
            "whole_nodes_on_one_leaf": 7,
            "leaf": "leaf2",
            "gpus_on_one_node": 8,
        },
        "switches": [
            switch("leaf1", free_gpus=48, free=6, partly=0, busy=2, unavail=0, stranded=0),
            switch("leaf2", free_gpus=59, free=7, partly=1, busy=0, unavail=0, stranded=3),
            switch("leaf3", free_gpus=56, free=7, partly=0, busy=1, unavail=0, stranded=0),
            switch("leaf4", free_gpus=56, free=7, partly=0, busy=0, unavail=1, stranded=0),
        ],
        "tiers": [
            {
                "level": 0,
                "switches": 4,
                "largest_job_nodes": 7,
                "largest_job_gpus": 56,
                "switch": "leaf2",
                "per_switch": [
                    gang("leaf1", 8, 48, 6),
                    gang("leaf2", 8, 59, 7),
                    gang("leaf3", 8, 56, 7),
                    gang("leaf4", 8, 56, 7),
                ],
            },
            {
                "level": 1,
                "switches": 1,
                "largest_job_nodes": 27,
                "largest_job_gpus": 216,
                "switch": "spine",
                "per_switch": [gang("spine", 32, 219, 27)],
            },
        ],
        "notes": [],
    }

    partition = slurmopt(slurm.conf, "fragmentation", "--json", "--partition", "gpu")
    assert partition.returncode == 0, partition.stderr
    assert json.loads(partition.stdout)["free_gpus"] == 219

    table = slurmopt(slurm.conf, "fragmentation")
    assert table.returncode == 0, table.stderr
    assert "largest job that could start now: 27 whole nodes (7 on one leaf" in table.stdout
    leaf2 = next(line for line in table.stdout.splitlines() if line.startswith("leaf2"))
    assert leaf2.split() == ["leaf2", "8", "59", "7", "1", "3", "0"]


def test_unknown_partition_exits_2_with_one_line(slurm: SlurmSandbox) -> None:
    proc = slurmopt(slurm.conf, "fragmentation", "--partition", "nosuch")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert re.match(r"slurmopt: unknown partition 'nosuch'", proc.stderr)


def test_unreachable_controller_is_one_line(slurm: SlurmSandbox, tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    shutil.copytree(Path(slurm.conf).parent, etc)
    conf = etc / "slurm.conf"
    text = conf.read_text()
    port = free_port()  # nothing listens there
    text = re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={port}", text)
    if f"SlurmctldPort={port}" not in text:
        text += f"\nSlurmctldPort={port}\n"
    conf.write_text(text)

    proc = slurmopt(str(conf), "fragmentation", "--json", timeout=180)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.startswith("slurmopt: ")
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
