"""``slurmopt topology show`` against the real Slurm sandbox."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.sandbox import SlurmSandbox


@pytest.mark.slurm
def test_topology_show_json_reads_the_sandbox(slurm: SlurmSandbox) -> None:
    exe = shutil.which("slurmopt")
    argv = [exe] if exe else [sys.executable, "-c", "from slurmopt.cli import main; main()"]
    proc = subprocess.run(
        [*argv, "topology", "show", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SLURM_CONF": slurm.conf},
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["source"].startswith("scontrol show topology")
    assert [leaf["switch"] for leaf in data["leaves"]] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert [leaf["node_count"] for leaf in data["leaves"]] == [8, 8, 8, 8]
    assert [leaf["nodes"] for leaf in data["leaves"]] == [
        "gpu[001-008]",
        "gpu[009-016]",
        "gpu[017-024]",
        "gpu[025-032]",
    ]
    assert data["nodes"] == 32
    assert all(leaf["uplinks"] == ["spine"] for leaf in data["leaves"])
    # every node Slurm knows is under exactly one leaf
    assert sorted(slurm.node_names()) == sorted(f"gpu{i:03d}" for i in range(1, 33))
