"""Backfill reservations: when and on which nodes a job that cannot start now will start.

The job is held on the earliest block of nodes the timeline frees up for
it, so lower-priority jobs start now only where they delay no reservation.
Kept apart because it reads the future (release and reservation times),
where the start-now placements read only what is free now.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Sequence

from slurmopt.policy.backfill import INFINITY
from slurmopt.policy.decisions import Reason, Reservation
from slurmopt.policy.domains import (
    choose_domains,
    domain_sizes,
    group_by_domain,
    pick_in_domains,
    segment_problem,
)
from slurmopt.policy.placement import choose_leaves
from slurmopt.policy.planner import Ask, Failure, PlannerCore, Pool


class Reservations(PlannerCore):
    """Reserves nodes for jobs that wait; mixed into the planner by ``plan``."""

    def _try_reserve(self, asks: Sequence[Ask], failure: Failure) -> bool:
        """Hold the earliest block of nodes that frees up for the job; False if none ever does."""
        best: tuple[float, list[str], Pool] | None = None
        for ask in asks:
            found = self._earliest_block(ask)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], found[1], ask.pool)
        if best is None:
            return False
        job = asks[0].job
        start, chosen, pool = best
        limit = self._end(job, pool.partition) - self.now
        end = start + limit
        for name in chosen:
            self._reserve(job.job_id, name, self._need(job, self.snapshot.nodes[name]), start, end)
        self.reservations.append(
            Reservation(job.job_id, tuple(chosen), start, failure.reason, failure.detail)
        )
        wait = start - self.now
        self._unplaced(
            job,
            Reason.WAITS_FOR_RESERVATION,
            f"{failure.detail}; reserved {len(chosen)} node(s) from now+{wait:.0f} s",
            start,
        )
        return True

    def _availability(self, ask: Ask) -> dict[str, list[tuple[float, str]]]:
        """Per leaf (or per off-leaf node, for one-node jobs): when each node is ready, sorted.

        A group whose nodes are never ready has an empty list (or none).  For
        jobs without node constraints the answer is kept per pool and GPU
        count and only the groups changed since the last ask are read again
        (a pass reserves for many jobs and changes few leaves in between); the
        caller must not change it.
        """
        job, pool = ask.job, ask.pool
        groups = pool.leaf_nodes if ask.k > 1 else pool.avail_groups
        if not self._is_simple(job):
            return {
                key: self._ready_in(ask, key, members, False) for key, members in groups.items()
            }
        view_key = (job.gpus_per_node, ask.k > 1)
        view = pool.avail_views.get(view_key)
        changed = self.changed
        if view is None:
            out = {key: self._ready_in(ask, key, members, True) for key, members in groups.items()}
        else:
            seen, out = view
            for key in set(changed[seen:]):
                members = groups.get(key)
                if members is not None:
                    out[key] = self._ready_in(ask, key, members, True)
        pool.avail_views[view_key] = (len(changed), out)
        return out

    def _ready_in(
        self, ask: Ask, key: str, members: list[str], simple: bool
    ) -> list[tuple[float, str]]:
        """When each of the group's nodes is ready for the job, sorted; never-ready ones left out.

        For jobs without node constraints (``simple``) the list is cached per
        group and rebuilt only once the group has changed since.
        """
        job, pool = ask.job, ask.pool
        gpus = job.gpus_per_node
        version = self.versions.get(key, 0)
        cache = pool.avail_cache.setdefault(gpus, {}) if simple else None
        if cache is not None:
            hit = cache.get(key)
            if hit is not None and hit[0] == version:
                return hit[1]
            if not version:  # untouched by this pass: as the pass started
                times = self.cache.ready_times(pool.layout, key, members, gpus, self.now)
                cache[key] = (version, times)
                return times
        nodes = self.snapshot.nodes
        ready_from = self.timeline.available_from
        times = []
        for name in members:
            node = nodes[name]
            if node.gpus_total < gpus:
                continue
            if not simple and not self._static_ok(job, node, ask.constraint, gpus):
                continue
            # A job without node constraints is not exclusive: it needs its own GPUs only.
            at = ready_from(name, gpus if simple else self._need(job, node))
            if at < INFINITY:
                times.append((at, name))
        times.sort()
        if cache is not None:
            cache[key] = (version, times)
        return times

    def _earliest_in_domains(
        self, when: dict[str, list[tuple[float, str]]], k: int, segment: int
    ) -> tuple[float, list[str]] | None:
        """When and where the groups of a domain-asking job are first free, each in one domain."""
        domain_of = self.fabric.domain_of
        if segment_problem(k, segment, len(self.fabric.domains())) is not None:
            return None
        ready = sorted((at, n) for v in when.values() for at, n in v if domain_of(n) is not None)
        counts: dict[str, int] = {}
        groups, start = 0, None
        for at, name in ready:
            domain = domain_of(name)
            assert domain is not None
            counts[domain] = counts.get(domain, 0) + 1
            groups += counts[domain] % segment == 0
            if groups * segment >= k:
                start = at
                break
        if start is None:
            return None
        at_of = {name: at for at, name in ready if at <= start}
        by_domain = group_by_domain(((self._leaf(n) or n, n) for n in at_of), domain_of)
        take = choose_domains(domain_sizes(by_domain), k, segment)
        # Latest-ready nodes first: the earlier ones stay free for backfill.
        chosen = (
            None
            if take is None
            else pick_in_domains(take, by_domain, self.tiers, lambda n: (-at_of[n], n))
        )
        return None if chosen is None else (start, chosen)

    def _earliest_block(
        self, ask: Ask, one_leaf: bool | None = None
    ) -> tuple[float, list[str]] | None:
        """When and on which nodes the job could start first, by the timeline.

        A gang that fits one leaf gets the earliest one-leaf block when
        ``one_leaf`` (default: the policy's ``reserve_one_leaf``), else the
        earliest block anywhere, placed by the same cost among the nodes ready then.
        """
        if one_leaf is None:
            one_leaf = self.policy.reserve_one_leaf
        job, pool, k = ask.job, ask.pool, ask.k
        gpus = job.gpus_per_node
        when = self._availability(ask)
        required = set(job.required_nodes)
        segment = self._segment(job)
        if required and segment is not None:
            domain_of = self.fabric.domain_of
            pinned, _ = self._required_domain(job, k, segment)
            if pinned is None:
                return None
            when = {
                key: inside
                for key, v in when.items()
                if (inside := [x for x in v if domain_of(x[1]) == pinned])
            }
        if required:
            req = [(at, n) for v in when.values() for at, n in v if n in required]
            if len(req) < len(required):
                return None
            if len(required) >= k:
                return max(at for at, _ in req), sorted(required)[:k]
        if segment is not None and not required:
            return self._earliest_in_domains(when, k, segment)
        single = one_leaf and self._single_leaf(pool, k, gpus) and not required
        if k == 1:
            # The earliest-ready node of all; on equal times the first name, as below.
            firsts = [v[0] for v in when.values() if v]
            if not firsts:
                return None
            start, name = min(firsts)
            return start, [name]
        if single:
            starts = [v[k - 1][0] for v in when.values() if len(v) >= k]
            if not starts:
                return None
            start = min(starts)
        else:
            earliest = list(itertools.islice(heapq.merge(*when.values()), k))
            if len(earliest) < k:
                return None
            start = earliest[-1][0]
        # Per group, how many of its nodes (a prefix of its sorted list) are ready by then; on
        # one leaf only those with all k ready count, so only they are counted.
        last = (start, "\uffff")
        upto = k - 1 if single else 0
        ready = {
            key: bisect.bisect_right(v, last)
            for key, v in when.items()
            if len(v) > upto and v[upto][0] <= start
        }
        if required:
            fixed = [n for key, upto in ready.items() for _, n in when[key][:upto] if n in required]
            counts = {
                key: sum(1 for _, n in when[key][:upto] if n not in required)
                for key, upto in ready.items()
            }
        else:
            fixed, counts = [], ready
        choice = choose_leaves(counts, k - len(fixed), self.tiers, single)
        if choice is None:
            return None
        chosen = list(fixed)
        for leaf, count in choice.take:
            # Latest-ready nodes first: the earlier ones stay free for backfill.
            ranked = sorted(
                (n for n in when[leaf][: ready[leaf]] if n[1] not in required),
                key=lambda x: (-x[0], x[1]),
            )
            chosen.extend(n for _, n in ranked[:count])
        return start, chosen
