"""How placement stretches a job's run time: the simulator's communication model.

A trace records how long a job ran, taken here as its run time at the best
placement the fabric allows (one leaf when the job fits under one, else the
fewest consecutive leaves).  A job placed worse runs longer:

    run = duration * ((1 - c) + c * slowdown)
    slowdown = (best_gbps / placed_gbps) * (1 + level_penalty * levels + leaf_penalty * leaves)

* ``c``: the communication share of the job's time, by total GPUs
  (:data:`DEFAULT_SHARES`: single-node jobs talk over NVLink, so 0);
* ``best_gbps / placed_gbps``: the slowest link the job's traffic crosses
  at its best placement over the one it crosses where placed
  (``Fabric.span``); an oversubscribed uplink halves bandwidth at 2:1;
* ``levels``: switch levels crossed beyond the best placement, as extra
  hops over two (a leaf-spine job on two leaves where one would do: 1),
  each tier crossed weighted by how much narrower its links are than the
  first tier's (:meth:`Stretcher.levels`: crossing a 2:1 oversubscribed
  core counts twice); on two-level fabrics, and wherever upper tiers are
  as wide as the first, that weight is 1;
* ``leaves``: leaf switches spanned beyond the best placement.

With the model off every job runs exactly its trace duration.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from slurmopt.fabric import Fabric, Span
from slurmopt.sim.metrics import JobOutcome

#: (smallest total GPUs, communication share): the share of the last row a job reaches.
DEFAULT_SHARES: tuple[tuple[int, float], ...] = (
    (1, 0.0),
    (9, 0.15),
    (32, 0.20),
    (64, 0.25),
    (128, 0.30),
)


@dataclass(frozen=True)
class CommModel:
    """The stretch of a job's run time by placement; see the module docstring."""

    enabled: bool = True
    shares: tuple[tuple[int, float], ...] = DEFAULT_SHARES
    level_penalty: float = 0.5
    leaf_penalty: float = 0.1

    def share(self, gpus: int) -> float:
        """The communication share of a job of ``gpus`` GPUs."""
        found = 0.0
        for smallest, share in sorted(self.shares):
            if gpus >= smallest:
                found = share
        return found

    def to_json(self) -> dict[str, object]:
        return {
            "penalty": "on" if self.enabled else "off",
            "shares": [{"min_gpus": g, "share": s} for g, s in self.shares],
            "level_penalty": self.level_penalty,
            "leaf_penalty": self.leaf_penalty,
        }


@dataclass
class Stretcher:
    """A :class:`CommModel` bound to one fabric, with the best spans cached per gang size."""

    model: CommModel
    fabric: Fabric
    _best: dict[int, Span] = field(default_factory=dict)

    def best_span(self, nodes: int) -> Span:
        """The span of the best placement of ``nodes`` nodes: one leaf, else the fewest in order."""
        cached = self._best.get(nodes)
        if cached is not None:
            return cached
        by_leaf = [self.fabric.nodes_under(leaf) for leaf in self.fabric.leaves()]
        biggest = max(by_leaf, key=len, default=())
        if nodes <= len(biggest):
            chosen = list(biggest[:nodes])
        else:
            # Generated fabrics number leaves in order, pods and groups contiguous.
            chosen = [n for members in by_leaf for n in members][:nodes]
        span = self.fabric.span(chosen)
        self._best[nodes] = span
        return span

    def levels(self, span: Span, best: Span) -> float:
        """Switch levels crossed beyond ``best``, each tier weighted by its narrowness.

        Extra hops over two, plus, for each tier the placement crosses and
        the best one does not, that tier's added hops over two times
        (first tier's bandwidth / this tier's - 1): the weight is the first
        tier's bandwidth over the tier's own (``Fabric.tiers``), so only a
        tier narrower than the first adds anything.
        """
        plain = max(0, span.max_hops - best.max_hops) / 2
        tiers = self.fabric.tiers()
        chain = tiers.chain(span.leaves[0]) if span.leaves else ()
        if not chain:
            return plain
        placed_tier = tiers.tier_of(span.leaves)
        best_tier = tiers.tier_of(best.leaves)
        first = tiers.gbps.get(chain[0], 0.0)
        extra = 0.0
        below = 2
        for unit in chain:
            tier = tiers.tier.get(unit, 0)
            if tier > placed_tier:
                break
            hops = tiers.hops.get(unit, below)
            gbps = tiers.gbps.get(unit, 0.0)
            if tier > best_tier and gbps > 0 and first > gbps:
                extra += (hops - below) / 2 * (first / gbps - 1)
            below = hops
        return plain + extra

    def factor(self, nodes: Sequence[str], gpus: int) -> tuple[float, int]:
        """Run-time factor (>= 1) for a job of ``gpus`` GPUs on ``nodes``, and leaves spanned."""
        if len(nodes) < 2:
            return 1.0, 1
        span = self.fabric.span(nodes)
        if not self.model.enabled:
            return 1.0, span.num_leaves
        share = self.model.share(gpus)
        if share <= 0:
            return 1.0, span.num_leaves
        best = self.best_span(len(nodes))
        ratio = 1.0
        if span.slowest_link_gbps and best.slowest_link_gbps:
            ratio = max(1.0, best.slowest_link_gbps / span.slowest_link_gbps)
        levels = self.levels(span, best)
        leaves = max(0, span.num_leaves - best.num_leaves)
        slowdown = ratio * (
            1 + self.model.level_penalty * levels + self.model.leaf_penalty * leaves
        )
        return (1 - share) + share * slowdown, span.num_leaves


def tier_metrics(outcomes: Iterable[JobOutcome], fabric: Fabric) -> dict[str, float | int | None]:
    """How high the multi-node jobs' traffic climbs (``Fabric.tiers``: 0 one leaf, 1 one pod, ...).

    ``avg_tier_multinode``: the mean highest tier spanned;
    ``multinode_above_best_tier``: the jobs spanning a higher tier than
    their best placement on the idle fabric (:meth:`Stretcher.best_span`)
    needs, that is, crossing a tier they did not have to.
    """
    tiers = fabric.tiers()
    stretcher = Stretcher(CommModel(), fabric)
    spanned: list[int] = []
    above = 0
    for outcome in outcomes:
        if outcome.job.nodes <= 1 or len(outcome.nodes) < 2 or outcome.start is None:
            continue
        span = fabric.span(outcome.nodes)
        tier = tiers.tier_of(span.leaves)
        spanned.append(tier)
        above += tier > tiers.tier_of(stretcher.best_span(len(outcome.nodes)).leaves)
    mean = round(sum(spanned) / len(spanned), 3) if spanned else None
    return {"avg_tier_multinode": mean, "multinode_above_best_tier": above}


def parse_shares(text: str) -> tuple[tuple[int, float], ...]:
    """``"1:0,9:0.15,32:0.2"`` -> the share table; raises ValueError on a bad entry."""
    rows = []
    for item in text.split(","):
        gpus, sep, share = item.partition(":")
        if not sep:
            raise ValueError(f"bad share entry {item!r}: use MIN_GPUS:SHARE")
        value = float(share)
        if not 0 <= value <= 1:
            raise ValueError(f"share {value} is not between 0 and 1")
        rows.append((int(gpus), value))
    return tuple(sorted(rows))
