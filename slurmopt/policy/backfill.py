"""Free GPUs per node over time: what backfill needs to keep its promises.

Each node has a count of GPUs free now and a sorted list of future
changes: running jobs ending (+), reservations starting (-) and ending (+).
Two questions are asked of it:

* may a job take ``g`` GPUs now until ``end``?  Only if the node keeps at
  least ``g`` free at every instant of ``[now, end)``, which is exactly "it
  delays no reservation on this node";
* from when does the node keep ``g`` free for good?  Reservations start at
  the earliest such time of the nodes they take.  Gaps before a later
  reservation are not used for new reservations (they are for backfill),
  which keeps reservations simple and never earlier than they can be kept.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

INFINITY = math.inf


class Timeline:
    """Free GPUs now and scheduled changes for every node; changes are made through it."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.free: dict[str, int] = {}
        self.events: dict[str, list[tuple[float, int]]] = {}
        #: Nodes carrying at least one reservation; only these need the interval test.
        self.reserved: set[str] = set()
        self._available: dict[str, dict[int, float]] = {}
        #: Nodes whose event list this timeline may change in place (None: every node).
        self._owned: set[str] | None = None

    @classmethod
    def shared(
        cls, now: float, free: dict[str, int], events: dict[str, list[tuple[float, int]]]
    ) -> Timeline:
        """A timeline over ``free`` (taken over) and sorted ``events`` lists it never changes.

        The event lists may be shared with the next pass's timeline, so a
        list is copied before its first change here.
        """
        timeline = cls(now)
        timeline.free = free
        timeline.events = events
        timeline._owned = set()
        return timeline

    def add_node(self, node: str, free_now: int, releases: Iterable[tuple[float, int]]) -> None:
        """A node with ``free_now`` GPUs and the GPUs running jobs give back at each time."""
        self.free[node] = free_now
        events = sorted((max(t, self.now), g) for t, g in releases if g > 0 and t < INFINITY)
        if events:
            self.events[node] = events

    def fits_now(self, node: str, gpus: int, end: float) -> bool:
        """``gpus`` free now and at every instant until ``end`` (reservations included)."""
        level = self.free[node]
        if level < gpus:
            return False
        if node not in self.reserved:
            return True
        for t, delta in self.events[node]:
            if t >= end:
                break
            level += delta
            if level < gpus:
                return False
        return True

    def available_from(self, node: str, gpus: int) -> float:
        """The earliest time from which the node keeps ``gpus`` free for good; inf if never."""
        cache = self._available.setdefault(node, {})
        cached = cache.get(gpus)
        if cached is not None:
            return cached
        events = self.events.get(node, ())
        level = self.free[node] + sum(d for _, d in events)
        result = self.now
        if level < gpus:
            result = INFINITY
        else:
            for t, delta in reversed(events):
                level -= delta
                if level < gpus:
                    result = t
                    break
        cache[gpus] = result
        return result

    def _changed(self, node: str) -> None:
        self._available.pop(node, None)

    def _add_event(self, node: str, at: float, delta: int) -> None:
        events = self.events.get(node)
        if events is None:
            events = self.events[node] = []
        elif self._owned is not None and node not in self._owned:
            events = self.events[node] = list(events)
        if self._owned is not None:
            self._owned.add(node)
        bisect.insort(events, (at, delta))

    def occupy(self, node: str, gpus: int, end: float) -> None:
        """A job takes ``gpus`` now and gives them back at ``end`` (never, if inf)."""
        self.free[node] -= gpus
        if end < INFINITY:
            self._add_event(node, end, gpus)
        self._changed(node)

    def reserve(self, node: str, gpus: int, start: float, end: float) -> None:
        """Hold ``gpus`` from ``start`` to ``end`` for a job that cannot start now."""
        self._add_event(node, start, -gpus)
        if end < INFINITY:
            self._add_event(node, end, gpus)
        self.reserved.add(node)
        self._changed(node)
