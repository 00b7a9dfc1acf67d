"""The node agent: read this node's GPUs, judge them, and drain the node through Slurm, capped.

The cap is what keeps a bad rule (or a bad driver release) from draining a
whole cluster: before draining, the agent reads the live snapshot and counts
nodes already drained with a ``slurmopt:`` reason; at the cap it reports and
leaves the node in service.  :func:`decide_drains` is that decision, pure,
for any number of candidate nodes.

Agents on several nodes that drain in the same second can each see room
under the cap.  So after its own drain an agent reads Slurm again and, if
slurmopt's drains exceed the cap, ranks them oldest first by Slurm's reason
time (ties by node name, :func:`drain_order`); the agents whose drains rank
beyond the cap resume their own node, and the cluster converges to exactly
the cap.  Why that adds up is explained in :meth:`NodeAgent.settle`.

Every drain decision is printed and written as one JSON line to stderr (a
compute node keeps no database): see :func:`decision_record`.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol, TextIO

from slurmopt.errors import SlurmError, UsageError
from slurmopt.health.nvml import NodeReading, NvmlReader, plain
from slurmopt.health.rules import HealthThresholds, NodeVerdict, Severity, judge_node
from slurmopt.model import ClusterSnapshot, Node

#: Every drain reason slurmopt writes starts with this; only such drains count towards the cap.
REASON_PREFIX = "slurmopt:"
_DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED"})
#: How far a compute node's clock may be off slurmctld's; drains are ordered by slurmctld's
#: stamp, and an agent waits this much beyond its stamp's second before judging the order.
CLOCK_SKEW_S = 1.0


class DrainClient(Protocol):
    """What the agent needs from Slurm: a snapshot, a drain, and a resume to undo its own drain."""

    def snapshot(self) -> ClusterSnapshot: ...

    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str) -> None: ...


@dataclass(frozen=True)
class DrainCap:
    """At most ``max_nodes`` nodes, and at most ``max_share`` of all nodes, drained by slurmopt.

    The stricter limit wins.  The share rounds down but never below one node
    while it is above zero, so a small cluster can still lose one bad node;
    ``max_share=0`` or ``max_nodes=0`` turns draining off.
    """

    max_nodes: int = 4
    max_share: float = 0.10

    def __post_init__(self) -> None:
        if isinstance(self.max_nodes, bool) or self.max_nodes < 0:
            raise UsageError(f"max drained nodes must be 0 or more, got {self.max_nodes}")
        if not (math.isfinite(self.max_share) and 0.0 <= self.max_share <= 1.0):
            raise UsageError(f"max drained share must be from 0 to 1, got {self.max_share}")

    def limit(self, total_nodes: int) -> int:
        """How many slurmopt-drained nodes a cluster of ``total_nodes`` may have."""
        if self.max_share <= 0 or self.max_nodes == 0 or total_nodes <= 0:
            return 0
        by_share = max(1, math.floor(self.max_share * total_nodes + 1e-9))
        return min(self.max_nodes, by_share)


class DrainAction(StrEnum):
    """What the agent did (or, in a dry run, would do) about one node."""

    NONE = "none"  # healthy
    REPORT = "report"  # degraded: reported, left in service
    DRAIN = "drain"  # drained now
    WOULD_DRAIN = "would-drain"  # dry run: would have drained
    CAPPED = "capped"  # should drain, but the cap is reached
    ALREADY_DRAINED = "already-drained"  # Slurm already has the node drained
    NOT_IN_SLURM = "not-in-slurm"  # no such node in the snapshot
    UNDONE = "undone"  # drained, then resumed: agents draining at once overshot the cap


#: Actions that are drain decisions, recorded as ``node-agent.drain-decision`` lines (an undo
#: follows a ``drain`` line and is recorded as ``node-agent.drain-undone``).
DRAIN_DECISIONS = frozenset(
    {
        DrainAction.DRAIN,
        DrainAction.WOULD_DRAIN,
        DrainAction.CAPPED,
        DrainAction.ALREADY_DRAINED,
        DrainAction.NOT_IN_SLURM,
    }
)


@dataclass(frozen=True, slots=True)
class DrainDecision:
    """One node's verdict and what to do about it, with the cap figures it was taken under."""

    node: str
    action: DrainAction
    severity: Severity
    reason: str
    detail: str = ""
    slurmopt_drained: int = 0
    cap: int = 0

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = plain(self)
        return result


def _is_own_drain(node: Node, reason: str) -> bool:
    """Still drained with exactly ``reason``: nobody resumed the node or changed why."""
    return is_drained(node) and node.reason == reason


def is_slurmopt_drain(node: Node) -> bool:
    """The node is drained (or draining) with a reason slurmopt wrote."""
    return bool(node.flags & _DRAIN_FLAGS) and node.reason.startswith(REASON_PREFIX)


def is_drained(node: Node) -> bool:
    """Slurm has the node drained or draining, for whatever reason."""
    return bool(node.flags & _DRAIN_FLAGS)


def drain_order(snapshot: ClusterSnapshot) -> list[Node]:
    """The nodes drained by slurmopt, oldest drain first: by Slurm's reason time, then name.

    Every agent computes the same order from the same snapshot.  The time is
    slurmctld's own stamp, so no compute node's clock takes part; a node
    whose source gives no reason time ranks as oldest (kept), so an unknown
    drain is never the one undone.
    """
    drained = [n for n in snapshot.nodes.values() if is_slurmopt_drain(n)]
    return sorted(
        drained, key=lambda n: (-math.inf if n.reason_time is None else n.reason_time, n.name)
    )


def drains_over_cap(snapshot: ClusterSnapshot, cap: DrainCap) -> list[str]:
    """The newest slurmopt drains beyond the cap, newest last; empty when within it."""
    return [n.name for n in drain_order(snapshot)[cap.limit(len(snapshot.nodes)) :]]


def decide_drains(
    verdicts: Sequence[NodeVerdict],
    snapshot: ClusterSnapshot | None,
    cap: DrainCap,
    dry_run: bool = False,
) -> list[DrainDecision]:
    """What to do about each node, in node-name order, never exceeding the cap.

    Nodes Slurm already has drained are left alone (whoever drained them).
    The count starts from the nodes the snapshot shows drained with a
    ``slurmopt:`` reason and grows with each drain decided here, dry runs
    included, so a dry run reports what a real run would do.  ``snapshot``
    may be None only when no verdict is ``drain``.
    """
    decisions: list[DrainDecision] = []
    drained: set[str] = set()
    limit = 0
    if snapshot is not None:
        drained = {n.name for n in snapshot.nodes.values() if is_slurmopt_drain(n)}
        limit = cap.limit(len(snapshot.nodes))
    for verdict in sorted(verdicts, key=lambda v: v.node):
        reason = verdict.slurm_reason()
        detail = "; ".join(
            f.detail if f.gpu is None else f"GPU {f.gpu}: {f.detail}"
            for f in verdict.findings
            if f.severity is verdict.severity
        )
        base = DrainDecision(verdict.node, DrainAction.NONE, verdict.severity, reason, detail)
        if verdict.severity is Severity.HEALTHY:
            decisions.append(base)
            continue
        if verdict.severity is Severity.DEGRADED:
            decisions.append(replace(base, action=DrainAction.REPORT))
            continue
        if snapshot is None:
            raise ValueError("a drain decision needs the live snapshot")
        base = replace(base, slurmopt_drained=len(drained), cap=limit)
        node = snapshot.nodes.get(verdict.node)
        if node is None:
            action = DrainAction.NOT_IN_SLURM
        elif is_drained(node):
            action = DrainAction.ALREADY_DRAINED
        elif len(drained) >= limit:
            action = DrainAction.CAPPED
        else:
            action = DrainAction.WOULD_DRAIN if dry_run else DrainAction.DRAIN
            drained.add(verdict.node)
        decisions.append(replace(base, action=action))
    return decisions


def decision_record(decision: DrainDecision, now: float, dry_run: bool) -> dict[str, Any]:
    """The JSON line logged for one drain decision."""
    return {
        "time": round(now, 3),
        "event": "node-agent.drain-decision",
        "dry_run": dry_run,
        **decision.as_dict(),
    }


def describe(decision: DrainDecision) -> str:
    """One line for people: ``gpu001: drain: drained (slurmopt: gpu3:ecc-uncorrected)``."""
    what = {
        DrainAction.NONE: "healthy",
        DrainAction.REPORT: f"degraded, left in service ({decision.reason})",
        DrainAction.DRAIN: f"drained ({decision.reason})",
        DrainAction.WOULD_DRAIN: f"would drain, dry run ({decision.reason})",
        DrainAction.CAPPED: (
            f"not drained: cap reached, {decision.slurmopt_drained} of {decision.cap} nodes "
            f"already drained by slurmopt ({decision.reason})"
        ),
        DrainAction.ALREADY_DRAINED: f"already drained in Slurm ({decision.reason})",
        DrainAction.NOT_IN_SLURM: f"not a Slurm node, not drained ({decision.reason})",
        DrainAction.UNDONE: (
            f"drained, then resumed: {decision.slurmopt_drained} nodes drained by slurmopt at "
            f"once, above the cap of {decision.cap}, and this drain was among the newest "
            f"({decision.reason})"
        ),
    }[decision.action]
    return f"{decision.node}: {decision.severity.value}: {what}"


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass of the agent: what NVML said, the verdict, and the decision."""

    reading: NodeReading
    verdict: NodeVerdict
    decision: DrainDecision

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.reading.node,
            "severity": self.verdict.severity.value,
            "decision": self.decision.as_dict(),
            "verdict": self.verdict.as_dict(),
            "reading": self.reading.as_dict(),
        }


class NodeAgent:
    """Reads, judges and (capped) drains one node, once or every ``interval_s``.

    Each pass goes through these steps, in order::

        read NVML -> judge -> [healthy/degraded: report] -> done
                          \\-> [drain] -> read Slurm snapshot -> decide under the cap
                                      -> drain (unless dry run) -> record
                                      -> settle: re-read Slurm, undo if among the
                                         newest drains beyond the cap -> done

    Slurm is read only when the verdict is ``drain``, so healthy nodes put no
    load on slurmctld however often they check.  After the node is drained
    (by this agent or already) the reader forgets the Xids it acted on; a
    capped or undone drain keeps them, so the next pass tries again.  A
    failure to reach Slurm ends the pass with the error; ``run`` logs it and
    tries again at the next interval.

    The cap is checked against the snapshot read just before draining, so
    agents on several nodes deciding within the same second can each see
    room under it; :meth:`settle` then undoes the newest drains beyond it.
    ``run`` spreads the agents' passes over the interval, so that is rare.
    ``sleep`` and ``clock`` are injectable for tests.
    """

    def __init__(
        self,
        node: str,
        reader: NvmlReader,
        client: Callable[[], DrainClient],
        thresholds: HealthThresholds | None = None,
        cap: DrainCap | None = None,
        dry_run: bool = False,
        log: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        clock_skew_s: float = CLOCK_SKEW_S,
    ) -> None:
        if not node:
            raise UsageError("node-agent needs a node name (--node NAME)")
        self.node = node
        self.reader = reader
        self._client_factory = client
        self._client: DrainClient | None = None
        self.thresholds = thresholds or HealthThresholds()
        self.cap = cap or DrainCap()
        self.dry_run = dry_run
        self.log = log if log is not None else sys.stderr
        self.clock = clock
        self.sleep = sleep
        self.clock_skew_s = clock_skew_s

    @property
    def client(self) -> DrainClient:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def record(self, entry: dict[str, Any]) -> None:
        """Write one JSON line to the log (stderr by default)."""
        self.log.write(json.dumps(entry, sort_keys=False, default=str) + "\n")
        self.log.flush()

    def run_pass(self) -> PassResult:
        """One read-judge-decide-drain-settle pass; Slurm errors propagate."""
        reading = self.reader.read(self.node, now=self.clock())
        verdict = judge_node(reading, self.thresholds)
        snapshot = self.client.snapshot() if verdict.severity is Severity.DRAIN else None
        (decision,) = decide_drains([verdict], snapshot, self.cap, dry_run=self.dry_run)
        drained_at = 0.0
        if decision.action is DrainAction.DRAIN:
            self.client.drain(self.node, decision.reason)
            drained_at = self.clock()
        if decision.action in DRAIN_DECISIONS:
            self.record(decision_record(decision, self.clock(), self.dry_run))
        if decision.action is DrainAction.DRAIN:
            decision = self.settle(decision, drained_at)
        if decision.action in (DrainAction.DRAIN, DrainAction.ALREADY_DRAINED):
            self.reader.forget_xids()
        return PassResult(reading, verdict, decision)

    def settle(self, decision: DrainDecision, drained_at: float) -> DrainDecision:
        """After this agent's drain: undo it when it is among the newest drains beyond the cap.

        Slurm stamps each drain's reason time in whole seconds.  The agent
        first waits until the second of its own stamp is over (plus
        ``clock_skew_s`` for this node's clock), then reads the snapshot it
        judges.  Every drain stamped in or before that second is in it, so a
        drain missing from it is stamped later and ranks after this one:
        the drains ranked before this one are all in its snapshot.  Hence
        the drains among the first ``cap`` in :func:`drain_order` are never
        undone, and every drain beyond them sees itself beyond the cap and
        is undone by its own agent: exactly ``cap`` remain.  Older drains
        are kept.  The resume happens only while the node is still drained
        with exactly the reason this agent wrote; a node someone resumed or
        drained again for another reason is left alone.
        """
        read_at = self.clock()
        snapshot = self.client.snapshot()
        mine = snapshot.nodes.get(self.node)
        if mine is None or not _is_own_drain(mine, decision.reason):
            return decision
        stamped = mine.reason_time if mine.reason_time is not None else math.floor(drained_at)
        ready_at = stamped + 1.0 + self.clock_skew_s
        if read_at < ready_at:
            self.sleep(max(0.0, ready_at - self.clock()))
            snapshot = self.client.snapshot()
        order = [n.name for n in drain_order(snapshot)]
        limit = self.cap.limit(len(snapshot.nodes))
        if len(order) <= limit:
            return decision
        over = order[limit:]
        self.record(
            {
                "time": round(self.clock(), 3),
                "event": "node-agent.cap-exceeded",
                "node": self.node,
                "slurmopt_drained": len(order),
                "cap": limit,
                "nodes": order,
                "undo": over,
            }
        )
        mine = snapshot.nodes.get(self.node)
        if self.node not in over or mine is None or not _is_own_drain(mine, decision.reason):
            return decision
        self.client.resume(self.node)
        self.record(
            {
                "time": round(self.clock(), 3),
                "event": "node-agent.drain-undone",
                "node": self.node,
                "reason": decision.reason,
                "reason_time": mine.reason_time,
                "slurmopt_drained": len(order),
                "cap": limit,
                "kept": order[:limit],
            }
        )
        return replace(decision, action=DrainAction.UNDONE, slurmopt_drained=len(order), cap=limit)

    def run(
        self,
        interval_s: float,
        stop: threading.Event,
        on_pass: Callable[[PassResult], None] = lambda result: None,
        first_delay_s: float = 0.0,
    ) -> None:
        """Pass after pass until ``stop`` is set; a failed pass is logged and retried.

        ``first_delay_s`` (the CLI picks it at random within one interval)
        spreads agents that started together, so they do not all read Slurm
        and drain in the same second, overshoot the cap and undo drains.
        """
        stop.wait(max(0.0, first_delay_s))
        while not stop.is_set():
            started = time.monotonic()
            try:
                on_pass(self.run_pass())
            except SlurmError as exc:
                self.record(
                    {
                        "time": round(self.clock(), 3),
                        "event": "node-agent.error",
                        "node": self.node,
                        "error": str(exc),
                    }
                )
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))


__all__ = [
    "CLOCK_SKEW_S",
    "DRAIN_DECISIONS",
    "REASON_PREFIX",
    "DrainAction",
    "DrainCap",
    "DrainClient",
    "DrainDecision",
    "NodeAgent",
    "PassResult",
    "decide_drains",
    "decision_record",
    "describe",
    "drain_order",
    "drains_over_cap",
    "is_drained",
    "is_slurmopt_drain",
]
