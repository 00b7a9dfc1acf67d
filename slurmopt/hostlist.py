"""Slurm hostlist expressions, through ClusterShell's NodeSet.

Group resolution is switched off (``RESOLVER_NOGROUP``): a hostlist such as
``gpu[001-004]`` is only ever a range of names, never a lookup in a site's
ClusterShell group configuration.

Expansion is capped at :data:`MAX_NAMES` names: NodeSet builds every number
of a range as it parses, so ``n[0-99999999]`` would exhaust memory before
its length could be asked.  The size is bounded from the text first, and
checked again with ``len`` before the names are listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

#: The most names one expansion (and one fabric description) may name: generous for any
#: real cluster (the largest have tens of thousands of nodes), small enough to fit in memory.
MAX_NAMES = 1_000_000

#: One item of a bracket: ``7``, ``001-128`` or ``1-99/2``.
_RANGE = re.compile(r"\s*(\d+)(?:-(\d+)(?:/(\d+))?)?\s*")


class HostlistError(ValueError):
    """A hostlist expression that does not parse, or names more than :data:`MAX_NAMES`."""


def _bracket_size(body: str, expr: str) -> int:
    """How many numbers ``body`` (the inside of one ``[...]``) names; HostlistError if malformed."""
    total = 0
    for item in body.split(","):
        m = _RANGE.fullmatch(item)
        if m is None:
            raise HostlistError(f"bad hostlist {_short(expr)}: bad range {item.strip()!r}")
        low, high, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        if high < low or step < 1:
            raise HostlistError(f"bad hostlist {_short(expr)}: bad range {item.strip()!r}")
        total += (high - low) // step + 1
    return total


def _size_bound(expr: str) -> int:
    """An upper bound on the names in ``expr``: patterns are summed, their brackets multiplied."""
    total = 0
    for pattern in re.split(r"[,!&^](?![^\[]*\])", expr):
        size = 1
        for body in re.findall(r"\[([^\]]*)\]", pattern):
            if "[" in body:
                raise HostlistError(f"bad hostlist {_short(expr)}: nested brackets")
            size *= _bracket_size(body, expr)
        total += size
        if total > MAX_NAMES:
            break
    return total


def expand(expr: str | None, limit: int = MAX_NAMES) -> list[str]:
    """``"gpu[001-003]"`` -> ``["gpu001", "gpu002", "gpu003"]``; empty or None -> ``[]``.

    More than ``limit`` names (at most :data:`MAX_NAMES`) is a HostlistError.
    """
    if not expr or expr in ("(null)", "None", "N/A"):
        return []
    limit = min(limit, MAX_NAMES)
    too_many = f"hostlist {_short(expr)} names more than {limit} hosts"
    if _size_bound(expr) > limit:
        raise HostlistError(too_many)
    try:
        nodes = NodeSet(expr, resolver=RESOLVER_NOGROUP)
    except NodeSetParseError as exc:
        raise HostlistError(f"bad hostlist {_short(expr)}: {exc}") from exc
    if len(nodes) > limit:
        raise HostlistError(too_many)
    return list(nodes)


def _short(expr: str) -> str:
    """``expr`` quoted, cut to a length that fits on one line of an error."""
    return repr(expr if len(expr) <= 80 else expr[:77] + "...")


def fold(names: Iterable[str]) -> str:
    """The shortest hostlist for ``names`` (``"gpu[001-003]"``); ``""`` for none."""
    ns = NodeSet(resolver=RESOLVER_NOGROUP)
    for name in names:
        ns.update(NodeSet(name, resolver=RESOLVER_NOGROUP))
    return str(ns)


__all__ = ["MAX_NAMES", "HostlistError", "expand", "fold"]
