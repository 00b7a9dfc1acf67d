"""The node agent's drain cap against the real Slurm sandbox.

Ten sandbox nodes each run ``slurmopt node-agent --once`` with a fake NVML
(``--fake-nvml``, the hidden test hook) whose GPU 3 reports double-bit ECC
errors, so every one of them wants to drain.  With a cap of 3 nodes, Slurm
must end up with exactly 3 nodes drained with a ``slurmopt:`` reason, and
the other 7 reported as capped and left in service.  The ``slurm`` fixture
resumes every node afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.sandbox import SlurmSandbox

pytestmark = pytest.mark.slurm

DBE = Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h100_ecc_dbe.json"
EXPECTED_REASON = "slurmopt: gpu3:ecc-uncorrected, gpu3:row-remap-pending"


def node_agent(conf: str, node: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("slurmopt")
    assert exe is not None, "the slurmopt console script is not installed"
    env = {**os.environ, "SLURM_CONF": conf, "SLURMOPT_CONFIG": ""}
    env.pop("SLURMD_NODENAME", None)
    return subprocess.run(
        [exe, "node-agent", "--once", "--node", node, "--fake-nvml", str(DBE), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def drained_nodes(slurm: SlurmSandbox) -> dict[str, str]:
    """Drained or draining nodes and their reasons, as Slurm reports them."""
    out = slurm.run("sinfo", "-h", "-N", "-t", "drain,drng", "-o", "%N|%E")
    nodes: dict[str, str] = {}
    for line in out.splitlines():
        name, _, reason = line.partition("|")
        nodes[name.strip()] = reason.strip()
    return nodes


def decisions(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]


def test_ten_failing_nodes_drain_only_up_to_the_cap(slurm: SlurmSandbox) -> None:
    assert drained_nodes(slurm) == {}
    candidates = [f"gpu{i:03d}" for i in range(11, 21)]
    actions: dict[str, str] = {}
    for node in candidates:
        result = node_agent(slurm.conf, node, "--max-drain-nodes", "3", "--max-drain-share", "0.5")
        assert result.returncode == 0, result.stderr
        (decision,) = decisions(result)
        assert decision["node"] == node
        actions[node] = str(decision["action"])
        last = result.stdout.splitlines()[-1]
        if actions[node] == "capped":
            assert "cap reached, 3 of 3 nodes already drained by slurmopt" in last
    assert [actions[n] for n in candidates] == ["drain"] * 3 + ["capped"] * 7
    drained = drained_nodes(slurm)
    assert drained == {node: EXPECTED_REASON for node in candidates[:3]}
    # The capped nodes are still in service.
    states = slurm.run("sinfo", "-h", "-N", "-n", ",".join(candidates[3:]), "-o", "%T").split()
    assert states == ["idle"] * 7


def test_dry_run_and_nodes_drained_by_others_are_left_alone(slurm: SlurmSandbox) -> None:
    slurm.run("scontrol", "update", "NodeName=gpu005", "State=DRAIN", "Reason=admin: fan")
    dry = node_agent(slurm.conf, "gpu004", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert decisions(dry)[0]["action"] == "would-drain"
    again = node_agent(slurm.conf, "gpu005")
    assert again.returncode == 0, again.stderr
    assert decisions(again)[0]["action"] == "already-drained"
    assert drained_nodes(slurm) == {"gpu005": "admin: fan"}
