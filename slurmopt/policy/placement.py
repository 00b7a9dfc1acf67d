"""Where a job goes: feature constraints, the gang placement cost, FGD node choice for single nodes.

Pure functions over counts, so the rules can be tested and explained on
their own; :mod:`slurmopt.policy.cache` and :mod:`slurmopt.policy.planner` keep the
indexes that feed them.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from slurmopt.fabric.core import Tiers
from slurmopt.policy.fragmentation import JobShape

T = TypeVar("T")

#: At most this many leaf pairs equal by fit are weighed by the domains they break: on a large
#: idle fabric every pair of equal leaves ties, and the count must not grow with their square.
TIED_PAIRS = 64


# -- feature constraints -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Constraint:
    """A job's ``--constraint`` in the simple forms ``a``, ``a&b&c`` or ``a|b|c``."""

    features: frozenset[str] = frozenset()
    any_of: bool = False

    def matches(self, node_features: frozenset[str]) -> bool:
        if not self.features:
            return True
        if self.any_of:
            return not self.features.isdisjoint(node_features)
        return self.features <= node_features


def parse_constraint(text: str) -> Constraint:
    """Parse ``a&b`` / ``a|b``; raise ValueError for forms Slurm has but slurmopt does not model.

    Counts (``a*2``), brackets (``[a|b]``), parentheses and mixes of ``&``
    and ``|`` change which node sets are legal in ways a per-node test
    cannot express, so such jobs are left to Slurm rather than guessed at.
    """
    text = text.strip()
    if not text:
        return Constraint()
    if any(ch in text for ch in "[]()*,!"):
        raise ValueError(f"constraint {text!r} uses a form slurmopt does not model")
    if "&" in text and "|" in text:
        raise ValueError(f"constraint {text!r} mixes & and |")
    any_of = "|" in text
    parts = [p.strip() for p in text.split("|" if any_of else "&")]
    if not all(parts):
        raise ValueError(f"constraint {text!r} has an empty feature")
    return Constraint(frozenset(parts), any_of)


# -- gang placement over the fabric's tiers -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeafChoice:
    """Nodes to take per leaf, and the usable nodes the chosen leaves keep free afterwards.

    ``tier`` is the highest tier the gang spans (0: one leaf, 1: one pod,
    ...) and ``gbps`` the bottleneck of the links its traffic crosses.
    """

    take: tuple[tuple[str, int], ...]
    left_over: int
    tier: int = 0
    gbps: float = math.inf

    @property
    def leaves(self) -> tuple[str, ...]:
        return tuple(leaf for leaf, _ in self.take)


#: A choice's cost, lowest best; see :func:`placement_cost`.
Cost = tuple[int, float, tuple[int, ...], tuple[int, ...], int, tuple[str, ...]]

#: How many whole free NVLink domains a gang's nodes per leaf would break (the planner knows
#: which nodes of each leaf it takes); None on a fabric without domains.
Breaks = Callable[[Sequence[tuple[str, int]]], int]


def placement_cost(
    choice: LeafChoice,
    tiers: Tiers,
    free: Mapping[str, int],
    names: tuple[str, ...],
    breaks: Breaks | None = None,
) -> Cost:
    """The one ordering of gang placements: lower is better, compared item by item.

    1. the highest tier spanned (one leaf < one pod < one core group ...);
    2. the bottleneck bandwidth of the links crossed, widest first
       (oversubscription included);
    3. the blocks spanned, tier by tier from the top down (core groups, then
       pods, then leaves: the fewest of each tier before the fewest of the next);
    4. best fit, tier by tier from the top down: the fewest usable nodes left
       over on the blocks spanned, then the smaller largest block (a pod kept
       whole is worth more than a leaf kept whole);
    5. the fewest whole free NVLink domains broken (``breaks``; 0 without
       domains), so domains stay whole for the jobs that ask for one;
    6. names (``names``: the blocks chosen at the top tier), so ties are stable.

    ``free`` holds the usable nodes of every leaf and unit before the gang.
    """
    need = sum(n for _, n in choice.take)
    spanned: list[int] = []
    fit: list[int] = []
    for below in range(max(choice.tier - 1, 0), -1, -1):
        blocks = {_block(tiers, leaf, below) for leaf, _ in choice.take}
        sizes = [free.get(b, 0) for b in blocks]
        spanned.append(len(blocks))
        fit.extend((sum(sizes) - need, max(sizes)))
    broken = 0 if breaks is None else breaks(choice.take)
    return (choice.tier, -choice.gbps, tuple(spanned), tuple(fit), broken, names)


def _block(tiers: Tiers, leaf: str, tier: int) -> str:
    """The largest unit at or below ``tier`` that holds ``leaf``."""
    block = leaf
    for unit in tiers.chain(leaf):
        if tiers.tier.get(unit, 0) > tier:
            break
        block = unit
    return block


def _best_subset(
    cands: list[tuple[int, str]], need: int, m: int, breaks: Breaks | None = None
) -> tuple[int, int, list[str]]:
    """The best ``m`` blocks among ``cands`` (sorted largest first) for ``need`` nodes.

    The ``m - 2`` largest blocks are taken whole; then the pair of other
    blocks that covers the rest with the fewest nodes left over, ties to the
    pair whose larger block is smaller (big blocks stay free for big jobs),
    then (given ``breaks``, with leaves for blocks) to the pair that breaks
    the fewest whole free NVLink domains (of the first :data:`TIED_PAIRS` by
    name), then by name.  Returns (left over,
    largest block used, block names); left over is -1 when no such pair exists.
    """
    whole = cands[: m - 2]
    rest_need = need - sum(c for c, _ in whole)
    rest = sorted((c, name) for c, name in cands[m - 2 :])
    counts = [c for c, _ in rest]
    best: tuple[int, int, str, str] | None = None
    for i, (a, name_a) in enumerate(rest):
        j = bisect.bisect_left(counts, rest_need - a, lo=i + 1)
        if j >= len(rest):
            continue
        b, name_b = rest[j]
        key = (a + b - rest_need, b, name_a, name_b)
        if best is None or key < best:
            best = key
    if best is None:
        return -1, 0, []
    left, largest, name_a, name_b = best
    if breaks is not None:
        # The pairs as good by fit (a block of the smaller count with a later one of the
        # larger), in name order, so that with no domain broken the choice is the one above;
        # the first TIED_PAIRS of them.
        small = rest_need + left - largest
        lo, hi = bisect.bisect_left(counts, largest), bisect.bisect_right(counts, largest)
        tied = (
            (rest[x], rest[y])
            for x in range(bisect.bisect_left(counts, small), bisect.bisect_right(counts, small))
            for y in range(max(x + 1, lo), hi)
        )
        pair = _least_broken(
            itertools.islice(tied, TIED_PAIRS), lambda p: _fill([*whole, *p], need), breaks
        )
        name_a, name_b = pair[0][1], pair[1][1]
    largest = max([largest, *(c for c, _ in whole)])
    return left, largest, [name for _, name in whole] + [name_a, name_b]


def _least_broken(
    options: Iterable[T], take: Callable[[T], Sequence[tuple[str, int]]], breaks: Breaks
) -> T:
    """The first of ``options`` whose take breaks the fewest whole free NVLink domains.

    Stops at the first that breaks none, so the usual case (nothing to
    break) costs one evaluation.
    """
    best: tuple[int, T] | None = None
    for option in options:
        broken = breaks(take(option))
        if best is None or broken < best[0]:
            best = (broken, option)
            if broken == 0:
                break
    assert best is not None
    return best[1]


def _gbps(tiers: Tiers, leaves: Iterable[str]) -> float:
    """A leaf set's bottleneck: its leaves' node links and each unit it spans two children of."""
    gbps = math.inf
    children: dict[str, set[str]] = {}
    for leaf in leaves:
        gbps = min(gbps, tiers.gbps.get(leaf, math.inf))
        below = leaf
        for unit in tiers.chain(leaf):
            children.setdefault(unit, set()).add(below)
            below = unit
    for unit, kids in children.items():
        if len(kids) > 1:
            gbps = min(gbps, tiers.gbps.get(unit, math.inf))
    return gbps


class _Search:
    """One gang's search down the tiers: free nodes per unit, the best choice inside each.

    Candidates come from the tiers, never from combinations of leaves: the
    lowest units that hold the gang; inside a pod (children are leaves) the
    fewest leaves by best fit, as on a two-tier fabric; above pods a few sets
    of the fewest children (the fullest, and each with its tightest
    partner), each spread over the fewest of its leaves.
    """

    def __init__(
        self, free_by_leaf: Mapping[str, int], tiers: Tiers, breaks: Breaks | None = None
    ) -> None:
        self.tiers = tiers
        self.breaks = breaks
        self.free: dict[str, int] = dict(free_by_leaf)
        kids: dict[str, dict[str, None]] = {}
        tops: dict[str, None] = {}
        for leaf, count in free_by_leaf.items():
            below = leaf
            for unit in tiers.chain(leaf):
                self.free[unit] = self.free.get(unit, 0) + count
                kids.setdefault(unit, {})[below] = None
                below = unit
            tops[below] = None
        self.kids = {unit: list(members) for unit, members in kids.items()}
        if len(tops) == 1:
            self.root = next(iter(tops))
        else:  # leaves the tiers do not join: join them above everything
            self.root = "*"
            self.kids["*"] = list(tops)
            self.free["*"] = sum(free_by_leaf.values())
        self.top_tier = 1 + max(tiers.tier.values(), default=0)

    def _tier(self, unit: str) -> int:
        return self.tiers.tier.get(unit, self.top_tier) if unit in self.kids else 0

    def best(self, unit: str, need: int) -> tuple[Cost, LeafChoice]:
        """The lowest-cost choice of ``need`` nodes inside ``unit`` (which holds them)."""
        free = self.free
        if unit not in self.kids:
            gbps = self.tiers.gbps.get(unit, math.inf)
            leaf = LeafChoice(((unit, need),), free[unit] - need, 0, gbps)
            return placement_cost(leaf, self.tiers, free, (unit,), self.breaks), leaf
        kids = self.kids[unit]
        holding = [k for k in kids if free[k] >= need]
        if holding:
            return min((self.best(k, need) for k in holding), key=lambda found: found[0])
        cands = sorted(((free[k], k) for k in kids), key=lambda x: (-x[0], x[1]))
        tier = self._tier(unit)
        if all(k not in self.kids for k in kids):  # children are leaves
            _, _, names = _best_subset(cands, need, _fewest(cands, need), self.breaks)
            choice = self._leaf_choice([(free[k], k) for k in names], need, tier)
            return placement_cost(choice, self.tiers, free, tuple(names), self.breaks), choice
        # Above pods: each of a few sets of the fewest children (the fullest ones, and the
        # best partner of each), narrowed tier by tier to the fewest units; the cheapest wins.
        best: tuple[Cost, LeafChoice] | None = None
        for names in _subsets(cands, need, _fewest(cands, need)):
            for picked in self._narrow(names, need):
                choice = self._leaf_choice([(free[leaf], leaf) for leaf in picked], need, tier)
                cost = placement_cost(choice, self.tiers, free, tuple(names), self.breaks)
                found = (cost, choice)
                if best is None or found[0] < best[0]:
                    best = found
        assert best is not None
        return best

    def _narrow(self, units: list[str], need: int) -> list[list[str]]:
        """Leaf sets for ``need`` nodes inside ``units``: the fewest units of each tier, top down.

        The units of the highest tier among ``units`` give way to their children, pooled; of
        the pool, a few sets of the fewest (as :func:`_subsets`) are narrowed again, and at
        the leaves the fewest by best fit.  So a gang across core groups takes the fewest
        pods in them before the fewest leaves, whatever the depth of the tree.
        """
        top = max(self._tier(u) for u in units)
        below = [k for u in units for k in (self.kids[u] if self._tier(u) == top else [u])]
        pool = sorted(((self.free[k], k) for k in below), key=lambda x: (-x[0], x[1]))
        m = _fewest(pool, need)
        if all(k not in self.kids for _, k in pool):
            return [_best_subset(pool, need, m, self.breaks)[2]]
        return [leaves for names in _subsets(pool, need, m) for leaves in self._narrow(names, need)]

    def _leaf_choice(self, chosen: list[tuple[int, str]], need: int, tier: int) -> LeafChoice:
        take = _fill(chosen, need)
        leaves = [leaf for leaf, _ in take]
        left = sum(c for c, _ in chosen) - need
        return LeafChoice(take, left, tier, _gbps(self.tiers, leaves))


def _fewest(cands: Sequence[tuple[int, str]], need: int) -> int:
    """How many of ``cands`` (largest first) it takes to hold ``need``."""
    m, running = 0, 0
    for c, _ in cands:
        m += 1
        running += c
        if running >= need:
            break
    return m


def _fill(chosen: Sequence[tuple[int, str]], need: int) -> tuple[tuple[str, int], ...]:
    """Take whole blocks, smallest first; the largest chosen block gives only the remainder.

    Leaving the spare nodes on one leaf (the largest) keeps them together
    for the next job instead of scattering one or two over every leaf.
    """
    take = []
    remaining = need
    ordered = sorted(chosen)
    for i, (count, leaf) in enumerate(ordered):
        n = remaining if i == len(ordered) - 1 else min(count, remaining)
        if n > 0:
            take.append((leaf, n))
        remaining -= n
    return tuple(sorted(take))


def _subsets(cands: list[tuple[int, str]], need: int, m: int) -> list[list[str]]:
    """Sets of ``m`` of ``cands`` (largest first) that hold ``need``: the ``m`` largest, and the
    ``m - 2`` largest with each other block and its tightest partner."""
    whole = cands[: m - 2]
    rest_need = need - sum(c for c, _ in whole)
    rest = sorted(cands[m - 2 :])
    counts = [c for c, _ in rest]
    found = [[name for _, name in cands[:m]]]
    seen = {frozenset(found[0])}
    for i, (a, name_a) in enumerate(rest):
        j = bisect.bisect_left(counts, rest_need - a, lo=i + 1)
        if j >= len(rest):
            continue
        names = [name for _, name in whole] + [name_a, rest[j][1]]
        if frozenset(names) not in seen:
            seen.add(frozenset(names))
            found.append(names)
    return found


def choose_leaves(
    free_by_leaf: Mapping[str, int],
    need: int,
    tiers: Tiers | Mapping[str, str],
    single_leaf: bool,
    breaks: Breaks | None = None,
) -> LeafChoice | None:
    """Pick leaves for a gang of ``need`` nodes, given usable nodes per leaf.

    The choice of least :func:`placement_cost`: the lowest tier, then the
    widest bottleneck, then the fewest blocks spanned tier by tier, then
    best fit, then the fewest whole free NVLink domains broken (given
    ``breaks``).  ``tiers`` is the fabric's (:meth:`Fabric.tiers`), or a
    leaf-to-group map for two tiers.  With ``single_leaf`` only a one-leaf
    answer is accepted.  None when the nodes are not there.
    """
    if not isinstance(tiers, Tiers):
        tiers = Tiers.from_groups(tiers, free_by_leaf)
    free = {leaf: c for leaf, c in free_by_leaf.items() if c > 0}
    if sum(free.values()) < need:
        return None
    fitting = [(-tiers.gbps.get(leaf, math.inf), c, leaf) for leaf, c in free.items() if c >= need]
    if fitting:
        best = min(fitting)
        if breaks is not None:
            tied = sorted(f for f in fitting if f[:2] == best[:2])
            best = _least_broken(tied, lambda f: ((f[2], need),), breaks)
        _, count, leaf = best
        return LeafChoice(((leaf, need),), count - need, 0, tiers.gbps.get(leaf, math.inf))
    if single_leaf:
        return None
    search = _Search(free, tiers, breaks)
    root = search.root
    if root in tiers.apart:  # separate trees: the gang must fit inside one of them
        inside = [search.best(k, need) for k in search.kids[root] if search.free[k] >= need]
        return min(inside, key=lambda found: found[0])[1] if inside else None
    return search.best(root, need)[1]


# -- single-node choice: FGD ---------------------------------------------------------------------
def fgd_increase(
    free_histogram: Mapping[int, int], shapes: Sequence[JobShape], gpus: int
) -> dict[int, float]:
    """For each free count ``f`` a node could be taken from, the weighted rise in unusable GPUs.

    Same measure as :func:`slurmopt.policy.fragmentation.shape_unusable_gpus`
    (a shape ``(k, s)`` cannot use the free GPUs on nodes with fewer than
    ``s`` free, nor any when fewer than ``k`` nodes have ``s`` free), worked
    out for the move of one node from ``f`` to ``f - gpus`` in O(shapes)
    per candidate instead of rebuilding the histogram.
    """
    if not free_histogram:
        return {}
    top = max(free_histogram)
    # fit[s]: nodes with at least s free; below[s]: free GPUs on nodes with fewer than s free.
    fit = [0] * (top + 2)
    total = 0
    for f, n in free_histogram.items():
        fit[f] += n
        total += f * n
    below = [0] * (top + 2)
    for s in range(1, top + 2):
        below[s] = below[s - 1] + (s - 1) * fit[s - 1]
    for s in range(top, -1, -1):
        fit[s] += fit[s + 1]

    # Per shape, worked out once (this runs for every single-node start): its weighted rise in
    # GPUs it cannot use when the node moves from f to g = f - gpus free, for each way f and g
    # lie around its size s.  Too few nodes fit it already: all free GPUs are unusable to it
    # before and after, whatever f is.  Else below s both (f < s): the node's free GPUs drop
    # by `gpus` under s; both at or above it: nothing changes for the shape; f at or above and
    # g below: one node fewer fits it and the node's g GPUs join those below s.
    after = total - gpus
    terms: list[tuple[int, float, float, float, float | None]] = []
    for shape in shapes:
        s, nodes, weight = shape.gpus_per_node, shape.nodes, shape.weight
        si = s if s <= top else top + 1
        if fit[si] < nodes:
            every = weight * (after - total)
            terms.append((s, weight, every, every, every))
            continue
        below_s = below[si]
        # across s: a fixed rise when too few nodes fit once this one no longer does, else
        # the node's g GPUs join those below s (None marks that case)
        across = weight * (after - below_s) if fit[si] - 1 < nodes else None
        terms.append((s, weight, weight * -gpus, weight * 0, across))
    out: dict[int, float] = {}
    for f, n in free_histogram.items():
        if n <= 0 or f < gpus:
            continue
        g = f - gpus
        rise = 0.0
        for s, weight, under, same, across in terms:
            if f < s:
                rise += under
            elif g >= s:
                rise += same
            elif across is not None:
                rise += across
            else:
                rise += weight * g
        out[f] = rise
    return out
