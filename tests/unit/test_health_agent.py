"""The drain cap (pure decide_drains) and the node agent over FakeNvml and the shared FakeSlurm."""

from __future__ import annotations

import io
import json
import math
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
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
    drain_order,
    drains_over_cap,
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
from tests.fakes.slurm import FakeSlurm

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


#: When the drains a test starts with were made (long before the clock of the fakes).
OLD_DRAIN = 500.0


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
            reason_time=OLD_DRAIN if f"gpu{i:03d}" in drained else None,
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


#: What the node agent may do to Slurm: read the cluster, drain and resume nodes.
AGENT_WRITES = {"drain", "resume"}
_made: list[FakeSlurm] = []


def agent_slurm(
    snapshot: ClusterSnapshot, fail: Exception | None = None, now: float = 1000.0
) -> FakeSlurm:
    """The shared fake Slurm holding ``snapshot``'s nodes, its clock at ``now``.

    ``now`` is slurmctld's clock (and, unless a test says otherwise, the
    agent's); every snapshot raises ``fail`` while that fault stays set.
    """
    client = FakeSlurm.from_snapshot(snapshot, read_error=fail, clock=now)
    _made.append(client)
    return client


@pytest.fixture(autouse=True)
def _the_agent_makes_only_its_own_calls() -> Iterator[None]:
    """Every fake a test made saw snapshots, drains and resumes, nothing else."""
    _made.clear()
    yield
    for client in _made:
        assert {c[0] for c in client.calls} <= AGENT_WRITES, client.calls
        assert set(client.read_calls) <= {"snapshot"}, client.read_calls


def advance(client: FakeSlurm, seconds: float) -> None:
    """The agent's sleep: slurmctld's clock moves on by ``seconds``."""
    client.clock += seconds


def set_node(client: FakeSlurm, node: str, **changes: Any) -> None:
    """Someone else (an admin, another agent) changes a node in Slurm."""
    client.nodes[node] = replace(client.nodes[node], **changes)


def agent_for(
    name: str,
    client: FakeSlurm,
    node: str = "gpu001",
    dry_run: bool = False,
    cap: DrainCap | None = None,
    nvml: FakeNvml | None = None,
    sleep: Callable[[float], None] | None = None,
) -> tuple[NodeAgent, io.StringIO, NvmlReader]:
    log = io.StringIO()
    reader = NvmlReader(nvml or FakeNvml(fixture(name)), xid_wait_ms=0)
    agent = NodeAgent(
        node,
        reader,
        lambda: client,
        cap=cap,
        dry_run=dry_run,
        log=log,
        clock=lambda: client.clock,
        sleep=sleep or (lambda seconds: advance(client, seconds)),
    )
    return agent, log, reader


def log_lines(log: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.getvalue().splitlines()]


def test_healthy_node_never_reads_slurm() -> None:
    client = agent_slurm(cluster())
    agent, log, _ = agent_for("h100_healthy", client)
    result = agent.run_pass()
    assert result.decision.action is DrainAction.NONE
    assert client.reads("snapshot") == 0 and client.drains() == [] and log.getvalue() == ""


def test_degraded_node_is_reported_not_drained() -> None:
    client = agent_slurm(cluster())
    agent, log, _ = agent_for("h100_pcie_x8", client)
    assert agent.run_pass().decision.action is DrainAction.REPORT
    assert client.reads("snapshot") == 0 and client.drains() == [] and log.getvalue() == ""


def test_double_bit_ecc_drains_through_slurm_and_logs_a_json_line() -> None:
    client = agent_slurm(cluster())
    agent, log, _ = agent_for("h100_ecc_dbe", client)
    result = agent.run_pass()
    assert result.decision.action is DrainAction.DRAIN
    assert client.drains() == [("gpu001", "slurmopt: gpu3:ecc-uncorrected, gpu3:row-remap-pending")]
    (entry,) = log_lines(log)
    assert entry["event"] == "node-agent.drain-decision"
    assert entry["node"] == "gpu001" and entry["action"] == "drain"
    assert entry["time"] == 1000.0 and entry["dry_run"] is False
    assert entry["cap"] == 3 and entry["slurmopt_drained"] == 0
    # The next pass sees the node drained in Slurm and leaves it alone.
    assert agent.run_pass().decision.action is DrainAction.ALREADY_DRAINED
    assert len(client.drains()) == 1


def test_capped_node_is_not_drained_and_is_logged() -> None:
    drained = {f"gpu0{i}": "slurmopt: gpu0:xid79" for i in (10, 11, 12)}
    client = agent_slurm(cluster(32, drained))
    agent, log, _ = agent_for("h100_nvlink_down", client, cap=DrainCap(3, 1.0))
    result = agent.run_pass()
    assert result.decision.action is DrainAction.CAPPED
    assert client.drains() == []
    assert log_lines(log)[0]["action"] == "capped"


def test_dry_run_reads_slurm_but_never_drains() -> None:
    client = agent_slurm(cluster())
    agent, log, _ = agent_for("h100_xid79", client, dry_run=True)
    assert agent.run_pass().decision.action is DrainAction.WOULD_DRAIN
    assert client.reads("snapshot") == 1 and client.drains() == []
    assert log_lines(log)[0]["dry_run"] is True


def test_xids_are_kept_while_capped_and_forgotten_once_drained() -> None:
    nvml = FakeNvml(fixture("h100_healthy"))
    drained = {"gpu010": "slurmopt: gpu0:xid79"}
    client = agent_slurm(cluster(32, drained))
    agent, _, reader = agent_for("", client, cap=DrainCap(1, 1.0), nvml=nvml)
    with reader:
        reader.read("gpu001")
        nvml.inject_xid(4, 79)
        assert agent.run_pass().decision.action is DrainAction.CAPPED
        # The cap frees up (an operator resumed gpu010): the remembered Xid drains now.
        client.nodes = dict(cluster(32).nodes)
        assert agent.run_pass().decision.action is DrainAction.DRAIN
        assert client.drains() == [("gpu001", "slurmopt: gpu4:xid79")]
        assert reader.read("gpu001").gpus[4].xids == ()


def test_drain_order_is_reason_time_then_name_and_unknown_times_rank_oldest() -> None:
    def drained(name: str, reason: str, at: float | None) -> Node:
        return Node(name, NodeState.IDLE, frozenset({"DRAIN"}), reason=reason, reason_time=at)

    nodes = [
        drained("gpu004", "slurmopt: a", 7.0),
        drained("gpu002", "slurmopt: b", 9.0),
        drained("gpu003", "slurmopt: c", 7.0),
        drained("gpu009", "slurmopt: d", None),  # the source gives no time: ranks oldest
        drained("gpu001", "admin: fan", 1.0),  # not slurmopt's
        Node("gpu005", NodeState.IDLE, reason="slurmopt: old, resumed", reason_time=2.0),
    ]
    snapshot = ClusterSnapshot.build(0.0, nodes, [], [])
    assert [n.name for n in drain_order(snapshot)] == ["gpu009", "gpu003", "gpu004", "gpu002"]
    # 6 nodes at a 50% share allow 3: the newest slurmopt drain is beyond the cap.
    assert drains_over_cap(snapshot, DrainCap(4, 0.5)) == ["gpu002"]
    assert drains_over_cap(snapshot, DrainCap(2, 1.0)) == ["gpu004", "gpu002"]
    assert drains_over_cap(snapshot, DrainCap(4, 1.0)) == []


def test_no_overshoot_no_extra_line_and_the_check_waits_out_the_drain_second() -> None:
    client = agent_slurm(cluster(32), now=1000.25)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        advance(client, seconds)

    agent, log, _ = agent_for("h100_ecc_dbe", client, cap=DrainCap(2, 1.0), sleep=sleep)
    assert agent.run_pass().decision.action is DrainAction.DRAIN
    assert [e["event"] for e in log_lines(log)] == ["node-agent.drain-decision"]
    # Before the drain; right after it (its reason time: 1000); after that second and the skew.
    assert client.reads("snapshot") == 3
    assert sleeps == [pytest.approx(1.75)]
    assert client.resumes() == []


def racing(client: FakeSlurm, other: str) -> None:
    """Make ``client``'s next drain come with another agent's drain of ``other``, same second."""
    real_drain = client.drain

    def drain_racing_another_agent(node: str, reason: str) -> None:
        real_drain(other, "slurmopt: gpu1:xid79")
        real_drain(node, reason)

    client.drain = drain_racing_another_agent  # type: ignore[method-assign]


def test_overshoot_keeps_older_drains_and_the_newest_agent_undoes_its_own() -> None:
    client = agent_slurm(cluster(32, {"gpu010": "slurmopt: gpu0:xid79"}))
    racing(client, "gpu002")
    agent, log, _ = agent_for("h100_ecc_dbe", client, node="gpu005", cap=DrainCap(2, 1.0))
    result = agent.run_pass()
    # gpu010 is older; gpu002 and gpu005 were stamped in the same second: the name decides.
    assert result.decision.action is DrainAction.UNDONE
    assert client.resumes() == ["gpu005"]
    assert not client.snapshot().nodes["gpu005"].flags
    decision, exceeded, undone = log_lines(log)
    assert decision["action"] == "drain"
    assert exceeded["event"] == "node-agent.cap-exceeded"
    assert (exceeded["slurmopt_drained"], exceeded["cap"]) == (3, 2)
    assert exceeded["nodes"] == ["gpu010", "gpu002", "gpu005"]
    assert exceeded["undo"] == ["gpu005"]
    assert undone["event"] == "node-agent.drain-undone"
    assert undone["node"] == "gpu005" and undone["kept"] == ["gpu010", "gpu002"]
    assert undone["reason"] == "slurmopt: gpu3:ecc-uncorrected, gpu3:row-remap-pending"
    assert undone["reason_time"] == 1000.0
    line = describe(result.decision)
    assert "drained, then resumed: 3 nodes drained by slurmopt at once, above the cap of 2" in line
    # Undone is not drained: the next pass decides again, and finds the cap reached.
    assert agent.run_pass().decision.action is DrainAction.CAPPED
    assert len(client.drains()) == 2


def test_an_agent_whose_drain_is_kept_resumes_nothing() -> None:
    client = agent_slurm(cluster(32, {"gpu010": "slurmopt: gpu0:xid79"}))
    racing(client, "gpu011")
    agent, log, _ = agent_for("h100_ecc_dbe", client, node="gpu001", cap=DrainCap(2, 1.0))
    assert agent.run_pass().decision.action is DrainAction.DRAIN
    assert client.resumes() == []
    events = log_lines(log)
    assert [e["event"] for e in events] == ["node-agent.drain-decision", "node-agent.cap-exceeded"]
    assert events[1]["undo"] == ["gpu011"]  # gpu011's own agent undoes that one


def test_a_drain_stamped_in_the_same_second_during_the_wait_is_counted() -> None:
    """The wait is what makes separate checks add up: without it gpu005 would keep its drain."""
    client = agent_slurm(cluster(32), now=1000.5)

    def sleep_while_another_agent_drains(seconds: float) -> None:
        assert client.reads("snapshot") == 2  # the snapshot that is judged has not been read yet
        client.drain("gpu001", "slurmopt: gpu1:xid79")  # stamped 1000, like gpu005's drain
        advance(client, seconds)

    agent, log, _ = agent_for(
        "h100_ecc_dbe", client, node="gpu005", cap=DrainCap(1, 1.0),
        sleep=sleep_while_another_agent_drains,
    )  # fmt: skip
    assert agent.run_pass().decision.action is DrainAction.UNDONE
    assert client.resumes() == ["gpu005"]
    assert client.clock >= 1000.0 + 1.0 + agent.clock_skew_s
    assert log_lines(log)[-1]["kept"] == ["gpu001"]


@pytest.mark.parametrize(
    "change",
    [
        {"reason": "admin: reseat GPU 3"},  # drained again by someone else, for another reason
        {"reason": "", "flags": frozenset()},  # resumed by someone else
        {"reason": "slurmopt: gpu0:xid79"},  # even another slurmopt reason is not this drain's
    ],
)
def test_an_agent_never_resumes_a_node_whose_reason_changed(change: dict[str, Any]) -> None:
    client = agent_slurm(cluster(32, {"gpu001": "slurmopt: gpu0:xid79"}))
    racing(client, "gpu002")

    def sleep_while_someone_steps_in(seconds: float) -> None:
        set_node(client, "gpu005", **change)
        advance(client, seconds)

    agent, log, _ = agent_for(
        "h100_ecc_dbe", client, node="gpu005", cap=DrainCap(2, 1.0),
        sleep=sleep_while_someone_steps_in,
    )  # fmt: skip
    result = agent.run_pass()
    assert client.resumes() == []
    assert result.decision.action is DrainAction.DRAIN
    assert "node-agent.drain-undone" not in [e["event"] for e in log_lines(log)]
    assert client.snapshot().nodes["gpu005"].reason == change["reason"]


class LockstepSlurm:
    """One slurmctld shared by agents in threads, whose every Slurm call and sleep is a step.

    The test's thread picks which waiting agent steps next (a seeded random
    choice), so each seed is one reproducible interleaving; every step moves
    the clock on by up to 0.4 s, so many drains share a second.  A sleeping
    agent is not picked before its wake-up time; when only sleepers wait,
    the clock jumps.  Nothing here depends on real time.
    """

    def __init__(self, snapshot: ClusterSnapshot, rng: random.Random, now: float = 1000.0) -> None:
        self.nodes = dict(snapshot.nodes)
        self.rng = rng
        self.now = now
        self.cond = threading.Condition()
        self.waiting: dict[str, float] = {}  # agent -> earliest clock it may step at
        self.turn: str | None = None
        self.done: set[str] = set()
        self.errors: list[BaseException] = []
        self.resumes: list[tuple[str, str]] = []  # (agent, node)
        self.stamps: dict[str, float] = {}  # node -> reason time of its latest drain

    def _step(self, agent: str, wake: float = -math.inf) -> None:
        with self.cond:
            self.waiting[agent] = wake
            self.cond.notify_all()
            assert self.cond.wait_for(lambda: self.turn == agent, timeout=60)
            del self.waiting[agent]

    def _end_step(self) -> None:
        with self.cond:
            self.turn = None
            self.cond.notify_all()

    def snapshot(self, agent: str) -> ClusterSnapshot:
        self._step(agent)
        try:
            return ClusterSnapshot.build(self.now, self.nodes.values(), [], [])
        finally:
            self._end_step()

    def drain(self, agent: str, node: str, reason: str) -> None:
        self._step(agent)
        old = self.nodes[node]
        stamp = self.stamps[node] = float(math.floor(self.now))
        self.nodes[node] = replace(
            old, flags=old.flags | {"DRAIN"}, reason=reason, reason_time=stamp
        )
        self._end_step()

    def resume(self, agent: str, node: str) -> None:
        self._step(agent)
        self.resumes.append((agent, node))
        old = self.nodes[node]
        self.nodes[node] = replace(old, flags=old.flags - {"DRAIN"}, reason="", reason_time=None)
        self._end_step()

    def sleep(self, agent: str, seconds: float) -> None:
        self._step(agent, wake=self.now + seconds)
        self._end_step()

    def run(self, agents: dict[str, Callable[[], object]]) -> None:
        """Run each agent's body in a thread, handing out steps until all have finished."""

        def body(name: str, fn: Callable[[], object]) -> None:
            try:
                fn()
            except BaseException as exc:  # reported by the test thread
                self.errors.append(exc)
            finally:
                with self.cond:
                    self.done.add(name)
                    self.cond.notify_all()

        threads = [threading.Thread(target=body, args=item) for item in agents.items()]
        for thread in threads:
            thread.start()
        with self.cond:
            while True:
                settled = self.cond.wait_for(
                    lambda: self.turn is None and len(self.waiting) + len(self.done) == len(agents),
                    timeout=60,
                )
                assert settled, "an agent neither stepped nor finished"
                if len(self.done) == len(agents):
                    break
                ready = sorted(a for a, wake in self.waiting.items() if wake <= self.now)
                if not ready:
                    self.now = min(self.waiting.values())
                    continue
                self.now += self.rng.uniform(0.0, 0.4)
                self.turn = self.rng.choice(ready)
                self.cond.notify_all()
        for thread in threads:
            thread.join()
        if self.errors:
            raise self.errors[0]


class LockstepClient:
    """One agent's view of :class:`LockstepSlurm`."""

    def __init__(self, slurm: LockstepSlurm, agent: str) -> None:
        self.slurm = slurm
        self.agent = agent

    def snapshot(self) -> ClusterSnapshot:
        return self.slurm.snapshot(self.agent)

    def drain(self, node: str, reason: str) -> None:
        self.slurm.drain(self.agent, node, reason)

    def resume(self, node: str) -> None:
        self.slurm.resume(self.agent, node)


@pytest.mark.parametrize("seed", range(40))
def test_simultaneous_drains_by_many_agents_converge_to_exactly_the_cap(seed: int) -> None:
    rng = random.Random(seed)
    start = cluster(32, {"gpu030": "slurmopt: gpu0:xid79", "gpu031": "admin: fan"})
    slurm = LockstepSlurm(start, rng)
    cap = DrainCap(4, 1.0)  # gpu030 holds one place: three more may drain
    names = [f"gpu{i:03d}" for i in rng.sample(range(1, 30), 10)]
    results: dict[str, Any] = {}

    def lockstep_agent(name: str, skew: float) -> Callable[[], object]:
        """One node's agent, its clock off slurmctld's by ``skew``, as a thread body."""
        client = LockstepClient(slurm, name)
        agent = NodeAgent(
            name,
            NvmlReader(FakeNvml(fixture("h100_ecc_dbe")), xid_wait_ms=0),
            lambda: client,
            cap=cap,
            log=io.StringIO(),
            clock=lambda: slurm.now + skew,
            sleep=lambda seconds: slurm.sleep(name, seconds),
        )
        return lambda: results.__setitem__(name, agent.run_pass())

    # Clocks off by less than CLOCK_SKEW_S (1 s), either way.
    slurm.run({name: lockstep_agent(name, rng.uniform(-0.9, 0.9)) for name in names})

    final = ClusterSnapshot.build(slurm.now, slurm.nodes.values(), [], [])
    kept = [n.name for n in drain_order(final)]
    assert len(kept) == 4 and kept[0] == "gpu030"  # the older drain is kept
    assert final.nodes["gpu031"].reason == "admin: fan"
    assert all(agent == node for agent, node in slurm.resumes)  # only ever its own node
    actions = {name: results[name].decision.action for name in names}
    assert sorted(n for n, a in actions.items() if a is DrainAction.DRAIN) == sorted(kept[1:])
    undone = sorted(n for n, a in actions.items() if a is DrainAction.UNDONE)
    assert undone == sorted(node for _, node in slurm.resumes)
    assert set(actions.values()) <= {DrainAction.DRAIN, DrainAction.UNDONE, DrainAction.CAPPED}
    # The undone drains are the newest: each ranks after every kept one.
    for node in undone:
        assert all((slurm.stamps[node], node) > (slurm.stamps[k], k) for k in kept[1:])


def test_run_loop_logs_slurm_errors_and_keeps_going() -> None:
    client = agent_slurm(cluster(), fail=SlurmUnavailable("slurmctld unreachable"))
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
            client.faults.clear()
        return real_snapshot()

    client.snapshot = flaky_snapshot  # type: ignore[method-assign]
    agent.run(0.01, stop, on_pass=on_pass)
    errors = [e for e in log_lines(log) if e["event"] == "node-agent.error"]
    assert errors and errors[0]["error"] == "slurmctld unreachable"
    assert passes[0].decision.action is DrainAction.DRAIN
    assert client.drains() and client.drains()[0][0] == "gpu001"


def test_agent_needs_a_node_name() -> None:
    with pytest.raises(UsageError, match="--node"):
        NodeAgent(
            "", NvmlReader(FakeNvml(fixture("h100_healthy"))), lambda: agent_slurm(cluster())
        )


def test_pass_result_serialises() -> None:
    client = agent_slurm(cluster())
    agent, _, _ = agent_for("h100_xid79", client, dry_run=True)
    doc = json.loads(json.dumps(agent.run_pass().as_dict()))
    assert doc["severity"] == "drain"
    assert doc["decision"]["action"] == "would-drain"
    assert doc["verdict"]["findings"][0]["reason"] == "gpu-lost"
    assert len(doc["reading"]["gpus"]) == 8


def test_cli_client_drains_with_one_scontrol_update() -> None:
    from slurmopt.errors import SlurmCommandError
    from slurmopt.slurm.cli import CliSlurmClient, CommandResult, Env

    calls: list[list[str]] = []

    def recording_runner(
        argv: Any, stdin: str | None, timeout: float, env: Env = None, /
    ) -> CommandResult:
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
    calls.clear()
    client.resume("gpu001")  # the agent undoing its own drain
    assert calls == [["scontrol", "update", "NodeName=gpu001", "State=RESUME"]]
