"""Where a job goes: feature constraints, leaf choice for gangs, FGD node choice for single nodes.

Pure functions over counts, so the rules can be tested and explained on
their own; :mod:`slurmopt.policy.cache` and :mod:`slurmopt.policy.planner` keep the
indexes that feed them.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmopt.policy.fragmentation import JobShape


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


# -- gang placement over leaves ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeafChoice:
    """Nodes to take per leaf, and the usable nodes the chosen leaves keep free afterwards."""

    take: tuple[tuple[str, int], ...]
    left_over: int

    @property
    def leaves(self) -> tuple[str, ...]:
        return tuple(leaf for leaf, _ in self.take)


def _fill(chosen: Sequence[tuple[int, str]], need: int) -> tuple[tuple[str, int], ...]:
    """Take whole leaves, smallest first; the largest chosen leaf gives only the remainder.

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


def _best_subset(cands: list[tuple[int, str]], need: int, m: int) -> tuple[int, int, list[str]]:
    """The best ``m`` leaves among ``cands`` (sorted largest first) for ``need`` nodes.

    The ``m - 2`` largest leaves are taken whole; then the pair of other
    leaves that covers the rest with the fewest nodes left over, ties to the
    pair whose larger leaf is smaller (big leaves stay free for big jobs),
    then by name.  Returns (left over, largest leaf used, leaf names);
    left over is -1 when no such pair exists.
    """
    whole = cands[: m - 2]
    rest_need = need - sum(c for c, _ in whole)
    rest = sorted((c, leaf) for c, leaf in cands[m - 2 :])
    counts = [c for c, _ in rest]
    best: tuple[int, int, str, str] | None = None
    for i, (a, leaf_a) in enumerate(rest):
        j = bisect.bisect_left(counts, rest_need - a, lo=i + 1)
        if j >= len(rest):
            continue
        b, leaf_b = rest[j]
        key = (a + b - rest_need, b, leaf_a, leaf_b)
        if best is None or key < best:
            best = key
    if best is None:
        return -1, 0, []
    left, largest, leaf_a, leaf_b = best
    largest = max([largest, *(c for c, _ in whole)])
    return left, largest, [leaf for _, leaf in whole] + [leaf_a, leaf_b]


def choose_leaves(
    free_by_leaf: Mapping[str, int],
    need: int,
    group_of: Mapping[str, str],
    single_leaf: bool,
) -> LeafChoice | None:
    """Pick leaves for a gang of ``need`` nodes, given usable nodes per leaf.

    Rules, in order: the fewest leaves; then leaves of one group (leaves
    sharing their uplinks, so every pair is the fewest hops apart); then
    the fewest usable nodes left over on the chosen leaves (best fit); then
    the smaller largest leaf; then leaf names.  With ``single_leaf`` only a
    one-leaf answer is accepted.  None when the nodes are not there.
    """
    cands = sorted(
        ((c, leaf) for leaf, c in free_by_leaf.items() if c > 0), key=lambda x: (-x[0], x[1])
    )
    if sum(c for c, _ in cands) < need:
        return None
    fitting = [(c, leaf) for c, leaf in cands if c >= need]
    if fitting:
        count, leaf = min(fitting)
        return LeafChoice(((leaf, need),), count - need)
    if single_leaf:
        return None
    m, running = 0, 0
    for c, _ in cands:
        m += 1
        running += c
        if running >= need:
            break
    by_group: dict[str, list[tuple[int, str]]] = {}
    for c, leaf in cands:
        by_group.setdefault(group_of.get(leaf, leaf), []).append((c, leaf))
    best: tuple[int, int, list[str]] | None = None
    for members in by_group.values():
        if len(members) < m or sum(c for c, _ in members[:m]) < need:
            continue
        found = _best_subset(members, need, m)
        if found[0] >= 0 and (best is None or found < best):
            best = found
    if best is None:
        best = _best_subset(cands, need, m)
    left, _, names = best
    chosen = [(free_by_leaf[leaf], leaf) for leaf in names]
    return LeafChoice(_fill(chosen, need), left)


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
    total = sum(f * n for f, n in free_histogram.items())
    # fit[s]: nodes with at least s free; below[s]: free GPUs on nodes with fewer than s free.
    fit = [0] * (top + 2)
    below = [0] * (top + 2)
    for f, n in free_histogram.items():
        fit[f] += n
    for s in range(top, -1, -1):
        fit[s] += fit[s + 1]
    for s in range(1, top + 2):
        below[s] = below[s - 1] + (s - 1) * free_histogram.get(s - 1, 0)

    # Per shape, unpacked once (this runs for every single-node start): nodes, GPUs per
    # node, fit and below at that size, weight, and the GPUs it cannot use as things stand.
    terms = []
    for shape in shapes:
        s = shape.gpus_per_node
        si = min(s, top + 1)
        base = total if fit[si] < shape.nodes else below[si]
        terms.append((shape.nodes, s, fit[si], below[si], shape.weight, base))
    after = total - gpus
    out: dict[int, float] = {}
    for f, n in free_histogram.items():
        if n <= 0 or f < gpus:
            continue
        g = f - gpus
        rise = 0.0
        for nodes, s, fit_s, below_s, weight, base in terms:
            if f >= s:
                fit_s -= 1
            else:
                below_s -= f
            if g >= s:
                fit_s += 1
            else:
                below_s += g
            rise += weight * ((after if fit_s < nodes else below_s) - base)
        out[f] = rise
    return out
