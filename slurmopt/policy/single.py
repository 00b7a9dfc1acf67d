"""Single-node placement: which node a one-node job takes now.

FGD chooses the free-GPU bucket that strands the fewest GPUs for the
queue's job sizes; within it the best-fit node, and with ``align_ends`` the
partly used node whose running jobs end nearest the job's own end.  Kept
apart because it reads the per-count buckets, which no gang rule uses.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Sequence

from slurmopt.policy.backfill import INFINITY
from slurmopt.policy.decisions import Reason, Start
from slurmopt.policy.placement import fgd_increase
from slurmopt.policy.planner import Ask, Failure, PlannerCore, Pool

#: ``fits(name, respect)``: whether the job may take the node now (see ``_fit_test``).
Fits = Callable[[str, bool], bool]


class SingleNodePlacement(PlannerCore):
    """Starts one-node jobs; mixed into the planner by ``plan``."""

    def _start_single(self, ask: Ask) -> Failure | None:
        job, pool, end = ask.job, ask.pool, ask.end
        gpus = job.gpus_per_node
        rise = fgd_increase(pool.histogram, self.shapes, gpus)
        blocked = False
        order = [f for _, _, f in sorted([(r, f - gpus, f) for f, r in rise.items()])]
        fits = self._fit_test(ask)
        for i, f in enumerate(order):
            name, held_back = self._first_in_bucket(ask, f, fits)
            blocked = blocked or held_back
            if name is None:
                continue
            if self.policy.align_ends:
                name, f = self._aligned_across(ask, order[i + 1 :], name, f, fits)
            if self._breaks_domain(name):
                name = self._in_used_domain(ask, f, fits) or name
            node = self.snapshot.nodes[name]
            need = self._need(job, node)
            self._take_now(name, need, end)
            detail = (
                f"{name}: {need} of {f} free GPUs taken, {f - need} left; "
                f"FGD unusable GPUs {rise[f]:+.2f}"
            )
            self.actions.append(
                Start(job.job_id, (name,), self._start_reason(Reason.BEST_FIT_NODE), detail)
            )
            return None
        if blocked:
            return Failure(
                Reason.RESERVED,
                f"nodes with {gpus} free GPUs are reserved for higher-priority jobs",
            )
        return Failure(
            Reason.WAITS_FOR_RESOURCES,
            f"needs {gpus} free GPUs on one node matching its constraints",
        )

    def _fit_test(self, ask: Ask) -> Callable[[str, bool], bool]:
        """``fits(name, respect)``: :meth:`_fits_now` for a node of a bucket the job fits by count.

        Such a node has at least the job's GPUs free, so for a job with no
        node constraints only the reservations are left to test.
        """
        if not self._is_simple(ask.job):
            nodes = self.snapshot.nodes
            fits_now = self._fits_now

            def fits(name: str, respect: bool) -> bool:
                return fits_now(ask, nodes[name], respect)

            return fits
        reserved = self.timeline.reserved
        timeline_fits = self.timeline.fits_now
        gpus, end = ask.job.gpus_per_node, ask.end

        def fits_simple(name: str, respect: bool) -> bool:
            return not respect or name not in reserved or timeline_fits(name, gpus, end)

        return fits_simple

    def _aligned_across(
        self, ask: Ask, buckets: Sequence[int], name: str, free: int, fits: Fits
    ) -> tuple[str, int]:
        """Of the partly used nodes the job may take, the one ending nearest ``ask.end``.

        ``name`` (with ``free`` free GPUs) is FGD's choice; when it is a partly
        used node, the aligned node of each other bucket competes with it on
        the end gap alone.  Best fit strands little at the start, but nodes
        whose jobs end far apart strand the rest while the last one runs on;
        over a replay that costs more than the fit saves.  An idle choice
        stays: there is no end to match.
        """
        gap = self._end_gap(name, ask.end)
        if gap is None:
            return name, free
        best = (gap, name, free)
        end, last_end = ask.end, self._last_end
        for other_free in buckets:
            # Only a node nearer than the best so far counts, so the bucket's scan stops there.
            other, _ = self._first_in_bucket(ask, other_free, fits, best[0])
            if other is None:
                continue
            last = last_end(other)
            if last is not None and abs(last - end) < best[0]:
                best = (abs(last - end), other, other_free)
        return best[1], best[2]

    def _in_used_domain(self, ask: Ask, free: int, fits: Fits) -> str | None:
        """A node with ``free`` free GPUs the job may take that breaks no whole NVLink domain.

        Whole domains stay free for the jobs that ask for one; the bucket is
        scanned in its best-fit order, so the first such node is taken.
        """
        heap = ask.pool.buckets.get(free, [])
        free_now = self.timeline.free
        for name in map(ask.pool.layout.name_of, sorted(heap)):
            if free_now[name] == free and not self._breaks_domain(name) and fits(name, True):
                return name
        return None

    def _first_in_bucket(
        self, ask: Ask, free: int, fits: Fits, bound: float = INFINITY
    ) -> tuple[str | None, bool]:
        """The best-fit node with ``free`` free GPUs the job may take; and was one reserved.

        With end alignment, the node of the bucket ending nearest the job's
        end instead, where one ends nearer than ``bound`` (else any node no
        nearer than ``bound``: the caller has a better one).
        """
        heap = ask.pool.buckets.get(free, [])
        skipped: list[int] = []
        found: str | None = None
        blocked = False
        free_now = self.timeline.free
        ranked = ask.pool.layout.ranked
        size = len(ranked)
        while heap:
            entry = heapq.heappop(heap)
            name = ranked[entry % size]  # Layout.name_of, inline: this loop runs for every start
            if free_now[name] != free:
                continue  # stale: the node has moved to another bucket
            skipped.append(entry)
            if fits(name, True):
                found = name
                break
            if not blocked and fits(name, False):
                blocked = True
        if found is not None and self.policy.align_ends and heap:
            found = self._closest_end(ask, heap, found, free, fits, bound)
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found, blocked

    def _closest_end(
        self,
        ask: Ask,
        heap: list[int],
        first: str,
        free: int,
        fits: Fits,
        bound: float = INFINITY,
    ) -> str:
        """Of the partly used nodes with ``free`` free GPUs, the one ending nearest ``ask.end``.

        A node whose GPUs all free up within a short span empties whole; one
        that keeps a single long job strands the rest.  Only partly used
        nodes are compared (an idle node has no end to match), so with no
        running jobs nothing changes; on a tie the best-fit node ``first``
        stays, else the first of the equally near ones in the bucket's heap.
        Only nodes nearer than ``bound`` are looked for (``first`` when none is).

        The pool's end index (nodes of this free count sorted by last end)
        is walked outward from ``ask.end``, nearest first, so only the nodes
        nearer than ``first`` are tested, not the whole bucket.
        """
        end = ask.end
        last = self._last_end(first)
        if last is None:
            return first
        gap = abs(last - end)
        ends = ask.pool.ends
        index = (self._end_index(ask.pool) if ends is None else ends).get(free)
        if not index:
            return first
        best = gap if gap < bound else bound
        found: list[str] = []
        size = len(index)
        hi = bisect.bisect_left(index, (end,))
        lo = hi - 1
        while lo >= 0 or hi < size:
            up = abs(index[hi][0] - end) if hi < size else INFINITY
            down = abs(index[lo][0] - end) if lo >= 0 else INFINITY
            if hi < size and (lo < 0 or up <= down):
                other, name = up, index[hi][1]
                hi += 1
            else:
                other, name = down, index[lo][1]
                lo -= 1
            if other > best or (other == best and not found):
                break  # nearest first: nothing further on is nearer
            if fits(name, True):
                best = other
                found.append(name)
        if len(found) <= 1:
            return found[0] if found else first
        # Equally near: the first of them in the heap's own list, as a scan of the bucket finds.
        layout, nodes = ask.pool.layout, self.snapshot.nodes
        tied = {layout.entry(nodes[name], free) for name in found}
        return layout.name_of(next(filter(tied.__contains__, heap)))

    def _end_index(self, pool: Pool) -> dict[int, list[tuple[float, str]]]:
        """The pool's nodes by free GPUs, each list sorted by last end; built on first use."""
        if pool.ends is None:
            ends: dict[int, list[tuple[float, str]]] = {}
            for name in pool.layout.members:
                entry = self._end_entry(name)
                if entry is not None:
                    ends.setdefault(entry[0], []).append(entry[1])
            for bucket in ends.values():
                bucket.sort()
            pool.ends = ends
        return pool.ends

    def _end_gap(self, name: str, end: float) -> float | None:
        """Seconds between ``end`` and the last running job's end on the node; None when idle."""
        last = self._last_end(name)
        return None if last is None else abs(last - end)
