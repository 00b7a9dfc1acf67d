"""The node agent's drain cap against the real Slurm sandbox.

Ten sandbox nodes each run ``slurmopt node-agent --once`` with a fake NVML
(``--fake-nvml``, the hidden test hook) whose GPU 3 reports double-bit ECC
errors, so every one of them wants to drain.  With a cap of 3 nodes, Slurm
must end up with exactly 3 nodes drained with a ``slurmopt:`` reason, and
the other 7 reported as capped and left in service.

Then the race: ten agents (threads, each with its own node) all read Slurm
before any of them drains, so all ten drain at once, seven beyond the cap;
the newest seven must resume their own nodes, leaving exactly 3 drained.
The ``slurm`` fixture resumes every node afterwards, and the tests resume
the nodes they drained themselves.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmopt.health.agent import DrainAction, DrainCap, NodeAgent, PassResult
from slurmopt.health.nvml import FakeNvml, NvmlReader
from slurmopt.model import ClusterSnapshot
from slurmopt.slurm.cli import CliSlurmClient
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


@pytest.fixture
def candidates(slurm: SlurmSandbox) -> Iterator[list[str]]:
    """Ten nodes the test may drain; those still drained afterwards are resumed."""
    nodes = [f"gpu{i:03d}" for i in range(11, 21)]
    yield nodes
    left = sorted(set(drained_nodes(slurm)) & set(nodes))
    if left:
        slurm.run("scontrol", "update", f"NodeName={','.join(left)}", "State=RESUME", check=False)


def test_ten_failing_nodes_drain_only_up_to_the_cap(
    slurm: SlurmSandbox, candidates: list[str]
) -> None:
    assert drained_nodes(slurm) == {}
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


class ReadAllThenDrain:
    """The real command-line client, whose first snapshot waits until every agent has read one.

    So every agent decides on a snapshot with no drain in it, and all of them
    drain: the worst case of agents checking at the same moment.
    """

    def __init__(self, conf: str, everyone_has_read: threading.Barrier) -> None:
        self.cli = CliSlurmClient(slurm_conf=conf)
        self.barrier = everyone_has_read
        self.reads = 0

    def snapshot(self) -> ClusterSnapshot:
        snapshot = self.cli.snapshot()
        self.reads += 1
        if self.reads == 1:
            self.barrier.wait(timeout=120)
        return snapshot

    def drain(self, node: str, reason: str) -> None:
        self.cli.drain(node, reason)

    def resume(self, node: str) -> None:
        self.cli.resume(node)


def reason_times(slurm: SlurmSandbox) -> dict[str, int]:
    """Each drained node's reason time, from Slurm's JSON (0 when none)."""
    doc = json.loads(slurm.run("sinfo", "--json"))
    return {n["name"]: int(n.get("reason_changed_at") or 0) for n in doc["nodes"]}


def test_ten_agents_draining_at_once_converge_to_the_cap(
    slurm: SlurmSandbox, candidates: list[str]
) -> None:
    assert drained_nodes(slurm) == {}
    description = json.loads(DBE.read_text())
    barrier = threading.Barrier(len(candidates))
    results: dict[str, PassResult] = {}
    logs: dict[str, io.StringIO] = {}
    errors: list[BaseException] = []

    def run_agent(node: str) -> None:
        client = ReadAllThenDrain(slurm.conf, barrier)
        logs[node] = io.StringIO()
        agent = NodeAgent(
            node,
            NvmlReader(FakeNvml(description), xid_wait_ms=0),
            lambda: client,
            cap=DrainCap(max_nodes=3, max_share=0.5),
            log=logs[node],
        )
        try:
            results[node] = agent.run_pass()
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run_agent, args=(node,)) for node in candidates]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert sorted(results) == candidates

    drained = drained_nodes(slurm)
    assert len(drained) == 3  # at most the cap, and exactly it: every agent wanted to drain
    assert set(drained) <= set(candidates)
    assert set(drained.values()) == {EXPECTED_REASON}
    actions = {node: results[node].decision.action for node in candidates}
    kept = sorted(n for n, a in actions.items() if a is DrainAction.DRAIN)
    undone = sorted(n for n, a in actions.items() if a is DrainAction.UNDONE)
    assert kept == sorted(drained)
    assert sorted(undone) == sorted(set(candidates) - set(drained))  # all ten had drained

    # Each undone agent logged it, and its drain ranks after every kept one.
    kept_at = reason_times(slurm)
    for node in undone:
        lines: list[dict[str, Any]] = [json.loads(x) for x in logs[node].getvalue().splitlines()]
        (line,) = [x for x in lines if x["event"] == "node-agent.drain-undone"]
        assert line["node"] == node and sorted(line["kept"]) == kept
        assert all((line["reason_time"], node) > (kept_at[k], k) for k in kept)
    # The undone nodes are no longer drained (22.05 marks a resumed node "idle*" until
    # slurmd next answers a ping).
    states = slurm.run("sinfo", "-h", "-N", "-n", ",".join(undone), "-o", "%T").split()
    assert [state.rstrip("*") for state in states] == ["idle"] * len(undone)
