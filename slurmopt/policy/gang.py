"""Gang placement: the nodes a multi-node (or node-pinned) job takes now, on the fewest tiers.

A gang's nodes are chosen per leaf switch (``choose_leaves``): one leaf when
the policy asks for it, unless waiting for one would take too long, else
the lowest :func:`~slurmopt.policy.placement.placement_cost` over the
fabric's tiers (fewest tiers crossed, widest links, fewest pods and
leaves).  Kept apart from single-node placement because it reads the
per-leaf counts, not the free-GPU buckets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmopt.policy.decisions import Reason
from slurmopt.policy.domains import (
    choose_domains,
    domain_sizes,
    group_by_domain,
    pick_in_domains,
    segment_problem,
)
from slurmopt.policy.placement import Breaks, choose_leaves
from slurmopt.policy.planner import Ask, Failure, PlannerCore, Pool


@dataclass
class Usable:
    """The nodes a gang could take now, per leaf: counts for every leaf, node lists on demand.

    ``listed`` holds the leaves whose nodes had to be tested one by one; any
    other leaf's usable nodes are those with at least ``gpus`` free.
    """

    pool: Pool
    gpus: int
    free: Mapping[str, int]
    counts: dict[str, int] = field(default_factory=dict)
    listed: dict[str, list[str]] = field(default_factory=dict)
    ranked: dict[str, list[str]] = field(default_factory=dict)

    def nodes(self, leaf: str) -> list[str]:
        """The leaf's usable nodes, in the pool's order."""
        listed = self.listed.get(leaf)
        if listed is None:
            free, gpus = self.free, self.gpus
            listed = [n for n in self.pool.leaf_nodes[leaf] if free[n] >= gpus]
        return listed


class GangPlacement(PlannerCore):
    """Starts multi-node and node-pinned jobs; mixed into the planner by ``plan``."""

    def _node_order(self, name: str) -> tuple[int, int, bool, int, str]:
        """Best fit within a leaf: fewest free GPUs first, partly used before idle, a whole free
        NVLink domain kept whole, weight, name."""
        node = self.snapshot.nodes[name]
        free = self.timeline.free[name]
        idle = 1 if free >= node.gpus_total else 0
        return (free, idle, self._breaks_domain(name), node.weight, name)

    def _start_gang(self, ask: Ask) -> Failure | None:
        job, pool, end, k = ask.job, ask.pool, ask.end, ask.k
        gpus = job.gpus_per_node
        nodes = self.snapshot.nodes
        required = [n for n in job.required_nodes]
        segment = self._segment(job)
        pinned = None  # the NVLink domain of a domain-asking job's required nodes
        if required and segment is not None:
            pinned, problem = self._required_domain(job, k, segment)
            if problem is not None:
                return Failure(Reason.NEEDS_NODES_IN_ONE_DOMAIN, problem)
        if required:
            bad = [
                n
                for n in required
                if n not in pool.members or not self._fits_now(ask, nodes[n], respect=True)
            ]
            if bad:
                return Failure(
                    Reason.WAITS_FOR_RESOURCES, f"required node(s) {', '.join(bad)} not free"
                )
            if len(required) >= k:
                self._commit_start(ask, required[:k], Reason.GANG_FEWEST_LEAVES, "")
                return None
        simple = self._is_simple(job)
        respected = self._usable_by_leaf(ask, simple, True, set(required))
        if pinned is not None:
            respected = self._in_domain(respected, pinned)
        elif segment is not None:
            return self._start_in_domains(ask, respected, segment)
        need = k - len(required)
        single = self._single_leaf(pool, k, gpus) and not required
        breaks = self._domain_breaks(respected)
        choice = choose_leaves(respected.counts, need, self.tiers, single, breaks)
        spread_note = ""
        if choice is None and single and self.policy.compact_wait_share is not None:
            spread = choose_leaves(respected.counts, need, self.tiers, False, breaks)
            if spread is not None:
                found = self._earliest_block(ask, one_leaf=True)
                bound = self.policy.compact_wait_share * (end - self.now)
                if found is None or found[0] - self.now > bound:
                    choice = spread
                    one_leaf = "never" if found is None else f"from now+{found[0] - self.now:.0f} s"
                    spread_note = f"; one leaf only {one_leaf}, over the {bound:.0f} s bound"
        if choice is None and pinned is not None:
            return Failure(
                Reason.NEEDS_NODES_IN_ONE_DOMAIN,
                f"needs {need} more node(s) with {gpus} free GPUs in NVLink domain {pinned}, "
                f"that of its required nodes; {sum(respected.counts.values())} free there",
            )
        if choice is None:
            return self._gang_failure(ask, respected, single, required)
        chosen = list(required)
        for leaf, count in choice.take:
            chosen.extend(self._ranked(respected, leaf)[:count])
        leaves = ", ".join(choice.leaves)
        detail = (
            f"{k} nodes on {len(choice.leaves)} leaf switch(es) ({leaves}); "
            f"{choice.left_over} usable node(s) left on them{spread_note}"
        )
        self._commit_start(ask, chosen, Reason.GANG_FEWEST_LEAVES, detail)
        return None

    def _ranked(self, usable: Usable, leaf: str) -> list[str]:
        """The leaf's usable nodes in the order a gang takes them (:meth:`_node_order`)."""
        ranked = usable.ranked.get(leaf)
        if ranked is None:
            ranked = usable.ranked[leaf] = sorted(usable.nodes(leaf), key=self._node_order)
        return ranked

    def _domain_breaks(self, usable: Usable) -> Breaks | None:
        """How many whole free NVLink domains a take per leaf breaks; None without domains.

        A domain counts when the gang takes some of its nodes but not all, so
        of two leaf choices otherwise equal the one that keeps more domains
        whole wins (``placement_cost``).  The nodes are those the gang would
        take, so the count agrees with the start.
        """
        domains = self.fabric.domains()
        if not domains:
            return None
        domain_of = self.fabric.domain_of
        # Per (leaf, nodes taken): the nodes taken from each whole free domain; a search
        # weighs the same leaf with the same count many times.
        per_leaf: dict[tuple[str, int], dict[str, int]] = {}

        def taken(leaf: str, count: int) -> dict[str, int]:
            hit = per_leaf.get((leaf, count))
            if hit is None:
                hit = per_leaf[(leaf, count)] = {}
                nodes = usable.nodes(leaf)  # a whole leaf needs no ranking
                for name in nodes if count >= len(nodes) else self._ranked(usable, leaf)[:count]:
                    if self._breaks_domain(name):
                        domain = domain_of(name)
                        assert domain is not None
                        hit[domain] = hit.get(domain, 0) + 1
            return hit

        def breaks(take: Sequence[tuple[str, int]]) -> int:
            hit: dict[str, int] = {}
            for leaf, count in take:
                for domain, n in taken(leaf, count).items():
                    hit[domain] = hit.get(domain, 0) + n
            return sum(1 for domain, n in hit.items() if n < len(domains[domain]))

        return breaks

    def _in_domain(self, usable: Usable, domain: str) -> Usable:
        """The usable nodes that lie in one NVLink domain, per leaf."""
        domain_of = self.fabric.domain_of
        leaves = {self._leaf(n) for n in self.fabric.domains()[domain]}
        inside = Usable(usable.pool, usable.gpus, usable.free)
        for leaf in usable.counts:
            if leaf in leaves:
                listed = [n for n in usable.nodes(leaf) if domain_of(n) == domain]
                if listed:
                    inside.listed[leaf] = listed
                    inside.counts[leaf] = len(listed)
        return inside

    def _start_in_domains(self, ask: Ask, respected: Usable, segment: int) -> Failure | None:
        """Start a domain-asking job with each group of ``segment`` nodes inside one domain."""
        k, gpus = ask.k, ask.job.gpus_per_node
        domains = self.fabric.domains()
        problem = segment_problem(k, segment, len(domains))
        if problem is not None:
            return Failure(Reason.NEEDS_NODES_IN_ONE_DOMAIN, problem)
        by_domain = group_by_domain(
            ((leaf, name) for leaf in respected.counts for name in respected.nodes(leaf)),
            self.fabric.domain_of,
        )
        usable = domain_sizes(by_domain)
        take = choose_domains(usable, k, segment)
        order = self._node_order
        chosen = None if take is None else pick_in_domains(take, by_domain, self.tiers, order)
        if take is None or chosen is None:
            groups = "" if segment == k else f" in groups of {segment}"
            return Failure(
                Reason.NEEDS_NODES_IN_ONE_DOMAIN,
                f"needs {k} nodes with {gpus} free GPUs{groups} inside one NVLink domain; "
                f"at most {max(usable.values(), default=0)} free in one of {len(domains)} domains",
            )
        names = ", ".join(d for d, _ in take)
        detail = f"{k} nodes in NVLink domain(s) {names}" + (
            "" if segment == k else f", in groups of {segment}"
        )
        self._commit_start(ask, chosen, Reason.GANG_FEWEST_LEAVES, detail)
        return None

    def _usable_by_leaf(self, ask: Ask, simple: bool, respect: bool, skip: set[str]) -> Usable:
        """Nodes the job could take now, per leaf; the indexes skip leaves with none.

        For a job with no node constraints on a leaf with no reservation the
        count comes from the leaf's free-GPU index; its nodes are listed only
        for the leaves the gang takes.
        """
        pool = ask.pool
        gpus = ask.job.gpus_per_node
        free = self.timeline.free
        nodes = self.snapshot.nodes
        usable = Usable(pool, gpus, free)
        fast = simple and not skip
        for leaf, counts in pool.count_ge.items():
            count = counts[gpus]
            if count == 0:
                continue
            if not fast or (respect and self.reserved_in_leaf.get(leaf)):
                members = pool.leaf_nodes[leaf]
                listed = [
                    n for n in members if n not in skip and self._fits_now(ask, nodes[n], respect)
                ]
                if not listed:
                    continue
                usable.listed[leaf] = listed
                count = len(listed)
            usable.counts[leaf] = count
        return usable

    def _gang_failure(
        self, ask: Ask, respected: Usable, single: bool, required: list[str]
    ) -> Failure:
        """Why the gang cannot start now: held back by reservations, one leaf, or too few nodes."""
        job, k = ask.job, ask.k
        gpus = job.gpus_per_node
        counts = respected.counts
        total = sum(counts.values())
        best = max(counts.values(), default=0)
        where = (
            f"needs {k} nodes with {gpus} free GPUs; {total} free across "
            f"{len(counts)} leaves, at most {best} on one"
        )
        if self.reservations:
            loose = self._usable_by_leaf(ask, self._is_simple(job), False, set(required))
            if choose_leaves(loose.counts, k - len(required), self.tiers, single):
                return Failure(
                    Reason.RESERVED, f"{where}; more are free but reserved for higher-priority jobs"
                )
        if single and total >= k:
            return Failure(Reason.NEEDS_NODES_IN_ONE_LEAF, where)
        return Failure(Reason.WAITS_FOR_RESOURCES, where)
