"""Bounded label values for the metrics: a node's state class and Slurm's free-text reasons.

Pure: a node (or a reason string) in, a label value out.  The number of
distinct values stays bounded (:data:`MAX_NODE_REASONS`, :data:`MAX_REASON_LENGTH`),
so a cluster's free-text drain reasons cannot blow up the metrics' series.
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Iterable

from slurmopt.model import Node, NodeState

#: Distinct ``reason`` values the unavailable-nodes gauge shows; the rest add up under "other".
MAX_NODE_REASONS = 16
#: Longest ``reason`` value, in characters.
MAX_REASON_LENGTH = 48
OTHER_REASON = "other"

#: Coarse node states for the unavailable-nodes gauge, first match wins.
_STATE_CLASSES: tuple[tuple[str, frozenset[str]], ...] = (
    ("drain", frozenset({"DRAIN", "DRAINING", "DRAINED"})),
    ("down", frozenset({"DOWN"})),
    ("not_responding", frozenset({"NOT_RESPONDING"})),
    ("fail", frozenset({"FAIL", "FAILING", "ERROR"})),
    ("maintenance", frozenset({"MAINTENANCE", "MAINT", "RESERVED"})),
    ("powered_down", frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP"})),
    ("reboot", frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED"})),
    ("invalid", frozenset({"INVALID_REG", "INVALID"})),
    ("future", frozenset({"FUTURE"})),
)


def node_state_class(node: Node) -> str:
    """A bounded name for why ``node`` is out of service: drain, down, not_responding, ..."""
    marks = set(node.flags) | {node.state.value}
    for name, members in _STATE_CLASSES:
        if marks & members:
            return name
    return node.state.value.lower() if node.state is not NodeState.UNKNOWN else "unknown"


def normalise_reason(reason: str, fallback: str) -> str:
    """Slurm's free-text node reason made into a label value of bounded variety.

    Lower case, Slurm's ``[user@time]`` suffix dropped, GPU indices and node
    numbers folded (``gpu3:xid79`` -> ``gpu:xid79``, ``gpu017`` -> ``gpu``), spaces collapsed to one
    ``_``, at most :data:`MAX_REASON_LENGTH` characters; ``fallback`` when empty.
    """
    text = re.sub(r"\s*\[[^\]]*\]\s*$", "", reason.strip()).lower()
    text = re.sub(r"\b(gpu|node|nid)\d+\b", r"\1", text)
    text = re.sub(r"\s+", "_", text.strip())
    text = re.sub(r"[^a-z0-9_:.,/+=-]", "", text)
    return text[:MAX_REASON_LENGTH] or fallback


def unavailable_nodes_by_reason(
    nodes: Iterable[Node], max_reasons: int = MAX_NODE_REASONS
) -> dict[tuple[str, str], int]:
    """Unavailable nodes counted by (state class, normalised reason), at most ``max_reasons``.

    The most common reasons keep their own value; the rest of each state
    class is counted under ``other``, so the sum always equals the number
    of unavailable nodes.
    """
    counts: Tally[tuple[str, str]] = Tally()
    for node in nodes:
        if node.available:
            continue
        state = node_state_class(node)
        counts[(state, normalise_reason(node.reason, state))] += 1
    kept = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max_reasons]
    out: dict[tuple[str, str], int] = dict(kept)
    for (state, _reason), n in sorted(counts.items()):
        if (state, _reason) not in out:
            key = (state, OTHER_REASON)
            out[key] = out.get(key, 0) + n
    return out
