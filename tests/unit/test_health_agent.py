"""The drain cap (pure decide_drains) and the node agent over FakeNvml and a fake Slurm client."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from slurmopt.errors import SlurmUnavailable, UsageError
from slurmopt.health.agent import (
    DrainAction,
    DrainCap,
    NodeAgent,
    decide_drains,
    describe,
    is_slurmopt_drain,
)
from slurmopt.health.nvml import FakeNvml, NvmlReader
from slurmopt.health.rules import (
    Finding,
    GpuVerdict,
    NodeVerdict,
    Reason,
    Severity,
)
from slurmopt.model import ClusterSnapshot, Node, NodeState

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def cluster(
    size: int = 32, drained: dict[str, str] | None = None, flag: str = "DRAIN"
) -> ClusterSnapshot:
    """``size`` idle nodes gpu001..; ``drained`` maps node -> reason of a drained node."""
    drained = drained or {}
    nodes = [
        Node(
            name=f"gpu{i:03d}",
            state=NodeState.IDLE,
            flags=frozenset({flag}) if f"gpu{i:03d}" in drained else frozenset(),
            gpus_total=8,
            reason=drained.get(f"gpu{i:03d}", ""),
        )
        for i in range(1, size + 1)
    ]
    return ClusterSnapshot.build(0.0, nodes, [], [])


def verdict(node: str, severity: Severity = Severity.DRAIN) -> NodeVerdict:
    findings: tuple[Finding, ...] = ()
    if severity is Severity.DRAIN:
        findings = (Finding(Reason.ECC_UNCORRECTED, severity, "2 uncorrected", gpu=3),)
    elif severity is Severity.DEGRADED:
        findings = (Finding(Reason.PCIE_WIDTH, severity, "x8", gpu=6),)
    return NodeVerdict(node, severity, (GpuVerdict(3, "GPU-3", severity, findings),))


# ---------------------------------------------------------------------- the cap


@pytest.mark.parametrize(
    ("nodes", "share", "total", "limit"),
    [
        (4, 0.10, 32, 3),  # 10% of 32 rounds down to 3
        (4, 0.10, 100, 4),  # the absolute cap is stricter
        (4, 0.10, 5, 1),  # a small cluster may still lose one node
        (4, 0.50, 10, 4),
        (10, 1.00, 3, 3),
        (4, 0.0, 100, 0),  # share 0: never drain
        (0, 0.5, 100, 0),  # nodes 0: never drain
        (4, 0.10, 0, 0),
    ],
)
def test_cap_limit(nodes: int, share: float, total: int, limit: int) -> None:
    assert DrainCap(max_nodes=nodes, max_share=share).limit(total) == limit


@pytest.mark.parametrize(("nodes", "share"), [(-1, 0.1), (4, 1.5), (4, -0.1), (4, float("nan"))])
def test_bad_cap_is_a_usage_error(nodes: int, share: float) -> None:
    with pytest.raises(UsageError):
        DrainCap(max_nodes=nodes, max_share=share)


def test_ten_drain_verdicts_drain_exactly_the_cap() -> None:
    verdicts = [verdict(f"gpu{i:03d}") for i in range(10, 0, -1)]  # any order in
    decisions = decide_drains(verdicts, cluster(32), DrainCap(max_nodes=3, max_share=1.0))
    assert [d.node for d in decisions] == [f"gpu{i:03d}" for i in range(1, 11)]
    assert [d.action for d in decisions] == [DrainAction.DRAIN] * 3 + [DrainAction.CAPPED] * 7
    assert [d.slurmopt_drained for d in decisions] == [0, 1, 2] + [3] * 7
    assert {d.cap for d in decisions} == {3}
    assert decisions[0].reason == "slurmopt: gpu3:ecc-uncorrected"
    assert "cap reached, 3 of 3" in describe(decisions[5])


def test_existing_slurmopt_drains_count_and_others_do_not() -> None:
    snapshot = cluster(
        32,
        drained={
            "gpu020": "slurmopt: gpu1:xid79",
            "gpu021": "slurmopt: gpu0:nvlink-down",
            "gpu022": "admin: fan replacement",  # not slurmopt's: does not count
        },
    )
    verdicts = [verdict("gpu001"), verdict("gpu002"), verdict("gpu022")]
    decisions = decide_drains(verdicts, snapshot, DrainCap(max_nodes=3, max_share=1.0))
    assert [(d.node, d.action) for d in decisions] == [
        ("gpu001", DrainAction.DRAIN),
        ("gpu002", DrainAction.CAPPED),
        ("gpu022", DrainAction.ALREADY_DRAINED),  # never drained twice, whoever drained it
    ]
    assert decisions[0].slurmopt_drained == 2


@pytest.mark.parametrize("flag", ["DRAIN", "DRAINING", "DRAINED"])
def test_any_drain_flag_counts_as_drained(flag: str) -> None:
    snapshot = cluster(8, drained={"gpu001": "slurmopt: gpu0:xid79"}, flag=flag)
    assert is_slurmopt_drain(snapshot.nodes["gpu001"])
    (decision,) = decide_drains([verdict("gpu001")], snapshot, DrainCap(4, 1.0))
    assert decision.action is DrainAction.ALREADY_DRAINED


def test_not_drained_node_with_old_slurmopt_reason_does_not_count() -> None:
    snapshot = cluster(8)
    nodes = dict(snapshot.nodes)
    nodes["gpu002"] = Node("gpu002", NodeState.IDLE, reason="slurmopt: gpu0:xid79")
    snapshot = ClusterSnapshot.build(0.0, nodes.values(), [], [])
    (decision,) = decide_drains([verdict("gpu001")], snapshot, DrainCap(1, 1.0))
    assert decision.action is DrainAction.DRAIN


def test_healthy_degraded_unknown_and_dry_run() -> None:
    verdicts = [
        verdict("gpu001", Severity.HEALTHY),
        verdict("gpu002", Severity.DEGRADED),
        verdict("gpu003"),
        verdict("gpu004"),
        verdict("nosuch"),
    ]
    decisions = decide_drains(verdicts, cluster(32), DrainCap(1, 1.0), dry_run=True)
    assert [d.action for d in decisions] == [
        DrainAction.NONE,
        DrainAction.REPORT,
        DrainAction.WOULD_DRAIN,
        DrainAction.CAPPED,  # a dry run counts its own would-drains against the cap
        DrainAction.NOT_IN_SLURM,
    ]


def test_snapshot_is_needed_only_for_drain_verdicts() -> None:
    ok = [verdict("a", Severity.HEALTHY), verdict("b", Severity.DEGRADED)]
    assert [d.action for d in decide_drains(ok, None, DrainCap())] == [
        DrainAction.NONE,
        DrainAction.REPORT,
    ]
    with pytest.raises(ValueError, match="snapshot"):
        decide_drains([verdict("a")], None, DrainCap())


# ---------------------------------------------------------------------- the agent


class FakeSlurmClient:
    """Serves a snapshot and records drains, applying them to the next snapshot as Slurm would."""

    name = "fake"

    def __init__(self, snapshot: ClusterSnapshot, fail: Exception | None = None) -> None:
        self._snapshot = snapshot
        self.fail = fail
        self.snapshots = 0
        self.drains: list[tuple[str, str]] = []

    def snapshot(self) -> ClusterSnapshot:
        self.snapshots += 1
        if self.fail is not None:
            raise self.fail
        return self._snapshot

    def drain(self, node: str, reason: str) -> None:
        self.drains.append((node, reason))
        nodes = dict(self._snapshot.nodes)
        old = nodes[node]
        nodes[node] = Node(old.name, old.state, old.flags | {"DRAIN"}, reason=reason)
        self._snapshot = ClusterSnapshot.build(0.0, nodes.values(), [], [])

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the node agent must not call SlurmClient.{name}")


def agent_for(
    name: str,
    client: FakeSlurmClient,
    node: str = "gpu001",
    dry_run: bool = False,
    cap: DrainCap | None = None,
    nvml: FakeNvml | None = None,
) -> tuple[NodeAgent, io.StringIO, NvmlReader]:
    log = io.StringIO()
    reader = NvmlReader(nvml or FakeNvml(fixture(name)), xid_wait_ms=0)
    agent = NodeAgent(
        node, reader, lambda: client, cap=cap, dry_run=dry_run, log=log, clock=lambda: 1000.0
    )
    return agent, log, reader


def log_lines(log: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.getvalue().splitlines()]


def test_healthy_node_never_reads_slurm() -> None:
    client = FakeSlurmClient(cluster())
    agent, log, _ = agent_for("h100_healthy", client)
    result = agent.run_pass()
    assert result.decision.action is DrainAction.NONE
    assert client.snapshots == 0 and client.drains == [] and log.getvalue() == ""


def test_degraded_node_is_reported_not_drained() -> None:
    client = FakeSlurmClient(cluster())
    agent, log, _ = agent_for("h100_pcie_x8", client)
    assert agent.run_pass().decision.action is DrainAction.REPORT
    assert client.snapshots == 0 and client.drains == [] and log.getvalue() == ""


def test_double_bit_ecc_drains_through_slurm_and_logs_a_json_line() -> None:
    client = FakeSlurmClient(cluster())
    agent, log, _ = agent_for("h100_ecc_dbe", client)
    result = agent.run_pass()
    assert result.decision.action is DrainAction.DRAIN
    assert client.drains == [("gpu001", "slurmopt: gpu3:ecc-uncorrected, gpu3:row-remap-pending")]
    (entry,) = log_lines(log)
    assert entry["event"] == "node-agent.drain-decision"
    assert entry["node"] == "gpu001" and entry["action"] == "drain"
    assert entry["time"] == 1000.0 and entry["dry_run"] is False
    assert entry["cap"] == 3 and entry["slurmopt_drained"] == 0
    # The next pass sees the node drained in Slurm and leaves it alone.
    assert agent.run_pass().decision.action is DrainAction.ALREADY_DRAINED
    assert len(client.drains) == 1


def test_capped_node_is_not_drained_and_is_logged() -> None:
    drained = {f"gpu0{i}": "slurmopt: gpu0:xid79" for i in (10, 11, 12)}
    client = FakeSlurmClient(cluster(32, drained))
    agent, log, _ = agent_for("h100_nvlink_down", client, cap=DrainCap(3, 1.0))
    result = agent.run_pass()
    assert result.decision.action is DrainAction.CAPPED
    assert client.drains == []
    assert log_lines(log)[0]["action"] == "capped"


def test_dry_run_reads_slurm_but_never_drains() -> None:
    client = FakeSlurmClient(cluster())
    agent, log, _ = agent_for("h100_xid79", client, dry_run=True)
    assert agent.run_pass().decision.action is DrainAction.WOULD_DRAIN
    assert client.snapshots == 1 and client.drains == []
    assert log_lines(log)[0]["dry_run"] is True


def test_xids_are_kept_while_capped_and_forgotten_once_drained() -> None:
    nvml = FakeNvml(fixture("h100_healthy"))
    drained = {"gpu010": "slurmopt: gpu0:xid79"}
    client = FakeSlurmClient(cluster(32, drained))
    agent, _, reader = agent_for("", client, cap=DrainCap(1, 1.0), nvml=nvml)
    with reader:
        reader.read("gpu001")
        nvml.inject_xid(4, 79)
        assert agent.run_pass().decision.action is DrainAction.CAPPED
        # The cap frees up (an operator resumed gpu010): the remembered Xid drains now.
        client._snapshot = cluster(32)
        assert agent.run_pass().decision.action is DrainAction.DRAIN
        assert client.drains == [("gpu001", "slurmopt: gpu4:xid79")]
        assert reader.read("gpu001").gpus[4].xids == ()


def test_overshoot_by_agents_draining_at_once_is_logged() -> None:
    client = FakeSlurmClient(cluster(32, {"gpu010": "slurmopt: gpu0:xid79"}))
    real_drain = client.drain

    def drain_racing_another_agent(node: str, reason: str) -> None:
        real_drain("gpu011", "slurmopt: gpu1:xid79")  # another node's agent, same second
        real_drain(node, reason)

    client.drain = drain_racing_another_agent  # type: ignore[method-assign]
    agent, log, _ = agent_for("h100_ecc_dbe", client, cap=DrainCap(2, 1.0))
    assert agent.run_pass().decision.action is DrainAction.DRAIN
    decision, exceeded = log_lines(log)
    assert decision["action"] == "drain"
    assert exceeded["event"] == "node-agent.cap-exceeded"
    assert (exceeded["slurmopt_drained"], exceeded["cap"]) == (3, 2)
    assert exceeded["nodes"] == ["gpu001", "gpu010", "gpu011"]


def test_no_overshoot_no_extra_line() -> None:
    client = FakeSlurmClient(cluster(32))
    agent, log, _ = agent_for("h100_ecc_dbe", client, cap=DrainCap(2, 1.0))
    agent.run_pass()
    assert [e["event"] for e in log_lines(log)] == ["node-agent.drain-decision"]
    assert client.snapshots == 2  # before the drain, and the check after it


def test_run_loop_logs_slurm_errors_and_keeps_going() -> None:
    client = FakeSlurmClient(cluster(), fail=SlurmUnavailable("slurmctld unreachable"))
    agent, log, _ = agent_for("h100_ecc_dbe", client)
    stop = threading.Event()
    passes: list[Any] = []

    def on_pass(result: Any) -> None:
        passes.append(result)
        stop.set()

    calls = {"n": 0}
    real_snapshot = client.snapshot

    def flaky_snapshot() -> ClusterSnapshot:
        calls["n"] += 1
        if calls["n"] == 2:
            client.fail = None
        return real_snapshot()

    client.snapshot = flaky_snapshot  # type: ignore[method-assign]
    agent.run(0.01, stop, on_pass=on_pass)
    errors = [e for e in log_lines(log) if e["event"] == "node-agent.error"]
    assert errors and errors[0]["error"] == "slurmctld unreachable"
    assert passes[0].decision.action is DrainAction.DRAIN
    assert client.drains and client.drains[0][0] == "gpu001"


def test_agent_needs_a_node_name() -> None:
    with pytest.raises(UsageError, match="--node"):
        NodeAgent(
            "", NvmlReader(FakeNvml(fixture("h100_healthy"))), lambda: FakeSlurmClient(cluster())
        )


def test_pass_result_serialises() -> None:
    client = FakeSlurmClient(cluster())
    agent, _, _ = agent_for("h100_xid79", client, dry_run=True)
    doc = json.loads(json.dumps(agent.run_pass().as_dict()))
    assert doc["severity"] == "drain"
    assert doc["decision"]["action"] == "would-drain"
    assert doc["verdict"]["findings"][0]["reason"] == "gpu-lost"
    assert len(doc["reading"]["gpus"]) == 8


def test_cli_client_drains_with_one_scontrol_update() -> None:
    from slurmopt.errors import SlurmCommandError
    from slurmopt.slurm.cli import CliSlurmClient, CommandResult

    calls: list[list[str]] = []

    def recording_runner(argv: Any, stdin: str | None, timeout: float) -> CommandResult:
        calls.append(list(argv))
        if "NodeName=nosuch" in argv:
            return CommandResult(1, "", "slurm_update error: Invalid node name specified\n")
        return CommandResult(0, "", "")

    client = CliSlurmClient(runner=recording_runner)
    client.drain("gpu001", "slurmopt: gpu3:ecc-uncorrected, gpu5:xid79")
    assert calls == [
        ["scontrol", "update", "NodeName=gpu001", "State=DRAIN",
         "Reason=slurmopt: gpu3:ecc-uncorrected, gpu5:xid79"]
    ]  # fmt: skip
    with pytest.raises(SlurmCommandError, match="Invalid node name"):
        client.drain("nosuch", "slurmopt: x")
