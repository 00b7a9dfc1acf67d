"""Slurm hostlist expressions, through ClusterShell's NodeSet.

Group resolution is switched off (``RESOLVER_NOGROUP``): a hostlist such as
``gpu[001-004]`` is only ever a range of names, never a lookup in a site's
ClusterShell group configuration.
"""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError


class HostlistError(ValueError):
    """A hostlist expression that does not parse."""


def expand(expr: str | None) -> list[str]:
    """``"gpu[001-003]"`` -> ``["gpu001", "gpu002", "gpu003"]``; empty or None -> ``[]``."""
    if not expr or expr in ("(null)", "None", "N/A"):
        return []
    try:
        return list(NodeSet(expr, resolver=RESOLVER_NOGROUP))
    except NodeSetParseError as exc:
        raise HostlistError(f"bad hostlist {expr!r}: {exc}") from exc


def fold(names: Iterable[str]) -> str:
    """The shortest hostlist for ``names`` (``"gpu[001-003]"``); ``""`` for none."""
    ns = NodeSet(resolver=RESOLVER_NOGROUP)
    for name in names:
        ns.update(NodeSet(name, resolver=RESOLVER_NOGROUP))
    return str(ns)
