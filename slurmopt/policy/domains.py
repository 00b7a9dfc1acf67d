"""NVLink domains as units of placement: which domains a domain-asking job takes, and how many.

A job that asks for a domain (``#SOPT --nvlink-domain[=SEGMENT]``, or
Slurm's ``--segment`` on a topology/block site) gets its nodes in groups of
``segment`` nodes, each group inside one domain (one group of all its nodes
for a whole-domain ask), or it waits.  Pure functions over counts, so the
rule can be tested on its own; ``gang.py`` and ``reserve.py`` apply it to
the nodes free now and to those free later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from slurmopt.fabric.core import Tiers
from slurmopt.policy.placement import choose_leaves


def segment_problem(need: int, segment: int, domains: int) -> str | None:
    """Why no placement can ever meet the ask, or None when one can."""
    if domains == 0:
        return "the job asks for an NVLink domain and the fabric has none"
    if need % segment:
        return f"segment size {segment} does not divide the job's {need} nodes"
    return None


def required_domain(
    required: Sequence[str],
    need: int,
    segment: int,
    domains: int,
    domain_of: Callable[[str], str | None],
) -> tuple[str | None, str | None]:
    """The domain a node-pinned, domain-asking job's other nodes come from, or why none can.

    Returns ``(domain, None)``, or ``(None, why)`` when no placement can
    ever meet the ask (``domains``: how many the fabric has).  As Slurm's
    topology/block (``eval_nodes_block``): the required nodes must all lie
    in one domain, and the rest of the job is taken there; required nodes
    with several segments are refused.
    """
    problem = segment_problem(need, segment, domains)
    if problem is not None:
        return None, problem
    if segment < need:
        return None, (
            f"required nodes with segments of {segment} are not supported "
            "(Slurm's topology/block refuses them too)"
        )
    outside = [n for n in required if domain_of(n) is None]
    if outside:
        return None, f"required node(s) {', '.join(outside)} in no NVLink domain"
    spanned = sorted({d for n in required if (d := domain_of(n)) is not None})
    if len(spanned) > 1:
        return None, (
            f"required nodes span NVLink domains {', '.join(spanned)}; "
            "the job asks for all its nodes in one"
        )
    return spanned[0], None


def group_by_domain(
    nodes: Iterable[tuple[str, str]], domain_of: Callable[[str], str | None]
) -> dict[str, dict[str, list[str]]]:
    """``(leaf, node)`` pairs by NVLink domain, then leaf, in the order given; others left out."""
    by_domain: dict[str, dict[str, list[str]]] = {}
    for leaf, name in nodes:
        domain = domain_of(name)
        if domain is not None:
            by_domain.setdefault(domain, {}).setdefault(leaf, []).append(name)
    return by_domain


def domain_sizes(by_domain: Mapping[str, Mapping[str, Sequence[str]]]) -> dict[str, int]:
    """The usable nodes of each domain in a :func:`group_by_domain` grouping."""
    return {d: sum(map(len, leaves.values())) for d, leaves in by_domain.items()}


def choose_domains(
    usable: Mapping[str, int], need: int, segment: int
) -> tuple[tuple[str, int], ...] | None:
    """Nodes to take per domain for ``need`` nodes in groups of ``segment``; None if impossible.

    ``usable`` is the usable nodes of each domain.  One domain when one
    holds every group, the tightest such (fewest usable nodes left over, so
    whole domains stay free for jobs that need them), ties by name; else the
    fewest domains, largest first, the last the tightest that covers the
    rest.  ``need`` must be a multiple of ``segment``.
    """
    groups = need // segment
    room = sorted(
        ((c // segment, name) for name, c in usable.items() if c >= segment),
        key=lambda x: (-x[0], x[1]),
    )
    if sum(r for r, _ in room) < groups:
        return None
    holding = [(usable[name], name) for r, name in room if r >= groups]
    if holding:
        return ((min(holding)[1], need),)
    take: list[tuple[str, int]] = []
    left = groups
    for i, (r, name) in enumerate(room):
        if r >= left:
            # The tightest of the remaining domains that holds the rest.
            tight = min((usable[n], n) for rr, n in room[i:] if rr >= left)[1]
            take.append((tight, left * segment))
            break
        take.append((name, r * segment))
        left -= r
    return tuple(sorted(take))


def pick_in_domains(
    take: Sequence[tuple[str, int]],
    by_domain: Mapping[str, Mapping[str, Sequence[str]]],
    tiers: Tiers,
    order: Callable[[str], Any],
) -> list[str] | None:
    """The nodes for ``take`` (from :func:`choose_domains`), inside each domain on the fewest tiers.

    ``by_domain`` holds each domain's usable nodes by leaf; within a domain
    the leaves are chosen as for any gang (:func:`choose_leaves`) and the
    nodes of each leaf by ``order``.  None when a domain's nodes no path
    joins.
    """
    chosen: list[str] = []
    for domain, count in take:
        leaves = by_domain[domain]
        choice = choose_leaves({leaf: len(n) for leaf, n in leaves.items()}, count, tiers, False)
        if choice is None:
            return None
        for leaf, n in choice.take:
            chosen.extend(sorted(leaves[leaf], key=order)[:n])
    return chosen
