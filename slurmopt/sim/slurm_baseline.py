"""Slurm's own schedulers, as the simulator's baselines.

* ``slurm-fifo``: Slurm's ``sched/builtin``: strict priority order, each
  job on the first nodes by index with enough free GPUs, and the first job
  that does not fit stops the pass (no backfill).
* ``slurm-backfill-tree``: Slurm 22.05's ``sched/backfill`` with
  ``topology/tree``.  At every arrival and end the main scheduler starts
  jobs in priority order until one does not fit (Slurm then marks the
  partition failed and tries no lower job in it); the pass an end triggers
  comes ``main_pass_delay_s`` later, when Slurm hears the job's epilog is
  complete, and sees every job that ended by then.  The backfill pass comes
  when Slurm's backfill agent would run it (``bf_interval`` after its last
  pass ended, at once after a quiet spell; see :mod:`slurmopt.sim.engine`) and
  walks up to ``bf_max_job_test`` jobs: each starts now if it fits without
  touching the nodes held for the jobs before it, else it holds SPECIFIC
  nodes, whole as in Slurm's backfill map, from the time and on the nodes
  select/cons_tres's ``_will_run_test()`` finds (running jobs freed at their
  limits in 30 s-aligned, doubling batches, so often later and on other
  nodes than the first moment enough are free), retrying from later times
  as ``_attempt_backfill()``'s ``TRY_LATER`` does, if that is within
  ``bf_window``.  As in ``_attempt_backfill()`` the
  hold begins at the start of the ``bf_resolution`` slot (of the wall clock)
  that time falls in, and a job whose end reaches a hold's begin, even
  exactly, may not use its nodes (``begin_time <= end_time``).  Nodes are
  chosen as ``topology/tree`` does (:class:`TreePlacement`).

The planner cannot express the two baselines (it has no strict-FIFO mode
and chooses nodes by fewest leaves and FGD, not by node index), so they are
thin placement functions over the planner's own
:class:`~slurmopt.policy.backfill.Timeline`, which keeps the same
free-GPUs-over-time bookkeeping for both sides; where the backfill
baseline holds nodes follows Slurm's backfill map instead of the
planner's "free for good" rule.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import networkx as nx

from slurmopt.fabric import Fabric
from slurmopt.model import Job
from slurmopt.policy.backfill import INFINITY, Timeline
from slurmopt.policy.plan import priority_order
from slurmopt.sim.cluster import SimCluster

#: Slurm's defaults (slurm.conf SchedulerParameters): 500 jobs, 1 day, every 30 s, 60 s slots.
BF_MAX_JOB_TEST = 500
BF_WINDOW_S = 86400
BF_INTERVAL_S = 30.0
BF_RESOLUTION_S = 60.0

StartList = list[tuple[int, tuple[str, ...]]]


class TreePlacement:
    """``topology/tree`` node choice, as Slurm 22.05's ``_eval_nodes_topo`` makes it.

    With equal node weights and no required nodes Slurm picks leaves one at a
    time and takes each one's usable nodes in index order.  A leaf beats the
    best so far when both are as close (switch hops summed over the leaves
    already picked) and it fits tighter: of two leaves that each hold the rest
    of the job, the one with fewer usable nodes; of a leaf that holds it and
    one that does not, the first; of two that do not, the one whose parent
    switch holds it (climbing while the parents differ), else the larger.  A
    closer leaf wins unless it fits worse.  Ties go to the switch listed first;
    the fabric keeps no file order, so here that is the one whose first node
    comes first.  A node under no leaf is a group of its own below the switch
    it is wired to.

    ``closer_first`` is the rule of Slurm 24.05.3 and later (SchedMD commit
    64263118, "Prefer shorter switch distance over tighter resource fit"): a
    closer leaf wins whenever it holds the rest of the job (or the switch the
    comparison climbed to does), however much worse it fits.
    """

    def __init__(self, fabric: Fabric, order: dict[str, int], closer_first: bool = False) -> None:
        self.order = order
        self.closer_first = closer_first
        graph = fabric.graph
        self.group_of = {n: fabric.leaf_of(n) or n for n in order}
        rank: dict[str, int] = {}
        self._position: dict[str, str | None] = {}
        for name, i in order.items():
            group = self.group_of[name]
            rank[group] = min(rank.get(group, i), i)
            self._position[group] = group if group != name else fabric.attachment_of(name)
        #: Groups (leaves) in Slurm's switch-table order.
        self.groups = sorted(rank, key=lambda g: (rank[g], g))
        self._level = {sw: int(graph.nodes[sw].get("level", 0)) for sw in fabric.switches}
        # A switch's parent is its first uplink (Slurm keeps one); the top is its own parent.
        self._parent: dict[str, str] = {}
        for sw in fabric.switches:
            ups = fabric.uplinks(sw)
            self._parent[sw] = ups[0] if ups else sw
        for group, pos in self._position.items():
            if group not in fabric.switches:
                self._parent[group] = pos if pos is not None else group
        # The groups under each switch, through any path of uplinks.
        self._below: dict[str, set[str]] = {}
        for group, pos in self._position.items():
            stack = [pos] if pos is not None else []
            seen: set[str] = set()
            while stack:
                sw = stack.pop()
                if sw in seen:
                    continue
                seen.add(sw)
                self._below.setdefault(sw, set()).add(group)
                stack.extend(fabric.uplinks(sw))
        self._rank = rank
        switch_rank = {sw: min(rank[g] for g in groups) for sw, groups in self._below.items()}
        #: Switches in the order Slurm looks for the top one: highest level, then listed first.
        self._tops = sorted(self._below, key=lambda sw: (-self._level[sw], switch_rank[sw], sw))
        self._switch_graph = graph.subgraph(fabric.switches)
        self._hops: dict[str, dict[str, int]] = {}
        # What a top switch reaches: its part of the switch graph (a tree, or peers wired
        # together as in a dragonfly); a node under no switch is a part of its own.
        self._component: dict[str, int] = {}
        for n, part in enumerate(nx.connected_components(self._switch_graph)):
            self._component.update(dict.fromkeys(part, n))
        for group, pos in self._position.items():
            if group not in self._component:
                self._component[group] = (
                    self._component[pos] if pos is not None else -1 - len(self._component)
                )

    def _hops_from(self, group: str) -> dict[str, int]:
        """Switch hops from ``group`` to every group it reaches (Slurm's ``switches_dist``)."""
        found = self._hops.get(group)
        if found is None:
            pos = self._position[group]
            found = {group: 0}
            if pos is not None:
                lengths = nx.single_source_shortest_path_length(self._switch_graph, pos)
                for other in self.groups:
                    other_pos = self._position[other]
                    if other != group and other_pos is not None and other_pos in lengths:
                        found[other] = lengths[other_pos]
            self._hops[group] = found
        return found

    def _level_of(self, name: str) -> int:
        return self._level.get(name, 0)

    def _compare(self, i: str, j: str, rem: int, count: dict[str, int]) -> tuple[int, bool]:
        """Slurm's ``_topo_compare_switches``: > 0 when ``i`` fits the ``rem`` nodes tighter;
        with it whether ``i``, or the switch above it the comparison stopped at, holds them."""
        while True:
            i_fit, j_fit = count.get(i, 0) >= rem, count.get(j, 0) >= rem
            if i_fit and j_fit:
                if count.get(i, 0) != count.get(j, 0):
                    return (1 if count.get(i, 0) < count.get(j, 0) else -1), i_fit
                break
            if i_fit != j_fit:
                return (1 if i_fit else -1), i_fit
            pi, pj = self._parent.get(i, i), self._parent.get(j, j)
            if (pi != i or pj != j) and pi != pj:
                i, j = pi, pj
                continue
            break
        if count.get(i, 0) != count.get(j, 0):
            return (1 if count.get(i, 0) > count.get(j, 0) else -1), i_fit
        if self._level_of(i) != self._level_of(j):
            return (1 if self._level_of(i) < self._level_of(j) else -1), i_fit
        return 0, i_fit

    def place(self, usable: Sequence[str], k: int) -> list[str] | None:
        """``k`` of the ``usable`` nodes (given in node order), or None if they are too few."""
        if len(usable) < k or k <= 0:
            return None if k > 0 else []
        by_group: dict[str, list[str]] = {}
        for name in usable:
            by_group.setdefault(self.group_of[name], []).append(name)
        # The top switch: the highest level (first listed) above any usable node; nodes it
        # cannot reach are dropped, as Slurm drops them.
        top = next((sw for sw in self._tops if not self._below[sw].isdisjoint(by_group)), None)
        if top is not None:
            part = self._component[top]
            if any(self._component.get(g) != part for g in by_group):
                by_group = {g: v for g, v in by_group.items() if self._component.get(g) == part}
                if sum(map(len, by_group.values())) < k:
                    return None
        count: dict[str, int] = {g: len(v) for g, v in by_group.items()}
        # First leaf, all distances 0: if any leaf holds the job, the one with the fewest
        # usable nodes (first listed on a tie), which is what the comparison below yields.
        fits = [(c, self._rank[g], g) for g, c in count.items() if c >= k]
        if fits:
            return by_group[min(fits)[2]][:k]
        for sw, groups in self._below.items():
            if sw not in count:
                count[sw] = sum(count.get(g, 0) for g in groups)
        dist = dict.fromkeys(self.groups, 0.0)
        chosen: list[str] = []
        rem = k
        while rem > 0:
            best: str | None = None
            for group in self.groups:
                if not count.get(group) or dist[group] == INFINITY:
                    continue
                if best is None:
                    best = group
                    continue
                tcs, holds = self._compare(group, best, rem, count)
                closer_wins = holds if self.closer_first else tcs >= 0
                if (dist[group] < dist[best] and closer_wins) or (
                    dist[group] == dist[best] and tcs > 0
                ):
                    best = group
            if best is None:
                return None
            taken = by_group[best][:rem]
            chosen.extend(taken)
            rem -= len(taken)
            count[best] = 0
            if rem > 0:
                hops = self._hops_from(best)
                for group in self.groups:
                    dist[group] += hops.get(group, INFINITY)
        return chosen


def _first_fit(cluster: SimCluster, free: dict[str, int], job: Job) -> list[str] | None:
    chosen = []
    for name in cluster.node_names:
        if free[name] >= job.gpus_per_node:
            chosen.append(name)
            if len(chosen) == job.node_count:
                return chosen
    return None


def _until_first_wait(
    cluster: SimCluster, choose: Callable[[dict[str, int], Job], Sequence[str] | None]
) -> StartList:
    """Slurm's main scheduler: priority order, each job on ``choose``'s nodes, until one waits."""
    free = dict(cluster.free)
    starts: StartList = []
    for job in priority_order(list(cluster.pending.values())):
        chosen = choose(free, job)
        if chosen is None:
            break
        for name in chosen:
            free[name] -= job.gpus_per_node
        starts.append((job.job_id, tuple(chosen)))
    return starts


@dataclass
class SlurmFifo:
    """Slurm ``sched/builtin``: priority order, first fit by node index, stop at the first miss."""

    name: str = "slurm-fifo"
    tick_s: float | None = None

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList:
        return _until_first_wait(cluster, lambda free, job: _first_fit(cluster, free, job))


@dataclass
class SlurmBackfillTree:
    """Slurm ``sched/backfill`` with ``topology/tree``; see the module docstring."""

    fabric: Fabric
    bf_max_job_test: int = BF_MAX_JOB_TEST
    bf_window_s: float = BF_WINDOW_S
    bf_interval_s: float = BF_INTERVAL_S
    bf_resolution_s: float = BF_RESOLUTION_S
    #: Wall-clock time (s since the epoch) of the simulation's time 0: Slurm rounds the
    #: backfill map to multiples of ``bf_resolution`` of the wall clock, not of the trace.
    clock_origin_s: float = 0.0
    #: When the backfill agent passes first if it was already passing every ``bf_interval``
    #: at time 0 (it keeps doing so while anything changes); None: it starts idle.
    bf_phase_s: float | None = None
    #: How long one backfill pass takes, waking included: ``backfill_agent()`` sleeps
    #: ``bf_interval`` after each ``_attempt_backfill()`` returns, so the passes come every
    #: ``bf_interval`` plus this and drift later against a fixed rhythm.  0: instant passes.
    bf_pass_s: float = 0.0
    #: Seconds from a job's end to the main pass it triggers: slurmctld calls ``schedule()``
    #: when the job's epilog-complete message arrives (``_slurm_rpc_epilog_complete()``),
    #: so that pass sees every job that ended meanwhile.  0: the pass comes at the end.
    main_pass_delay_s: float = 0.0
    name: str = "slurm-backfill-tree"
    _tree: TreePlacement | None = None

    @property
    def tick_s(self) -> float | None:
        return self.bf_interval_s + self.bf_pass_s if self.bf_interval_s > 0 else None

    @property
    def tick_phase_s(self) -> float | None:
        return self.bf_phase_s

    def _placement(self, cluster: SimCluster) -> TreePlacement:
        if self._tree is None:
            self._tree = TreePlacement(self.fabric, cluster.index)
        return self._tree

    def schedule(self, cluster: SimCluster, now: float, tick: bool) -> StartList:
        if tick or self.bf_interval_s <= 0:
            return self._backfill(cluster, now)
        return self._main(cluster)

    def _main(self, cluster: SimCluster) -> StartList:
        """The event-driven main scheduler: priority order until the first job that waits."""
        tree = self._placement(cluster)

        def choose(free: dict[str, int], job: Job) -> Sequence[str] | None:
            usable = [n for n in cluster.node_names if free[n] >= job.gpus_per_node]
            return tree.place(usable, job.node_count)

        return _until_first_wait(cluster, choose)

    def _backfill(self, cluster: SimCluster, now: float) -> StartList:
        tree = self._placement(cluster)
        timeline = Timeline(now)
        #: (expected end, nodes, GPUs per node) of every running job, as will_run sees them.
        running: list[tuple[float, tuple[str, ...], int]] = []
        releases: dict[str, list[tuple[float, int]]] = {}
        for job in cluster.running.values():
            assert job.start_time is not None and job.time_limit_s is not None
            job_end = job.start_time + job.time_limit_s
            running.append((job_end, job.nodes, job.gpus_per_node))
            for name in job.nodes:
                releases.setdefault(name, []).append((job_end, job.gpus_per_node))
        for name in cluster.node_names:
            timeline.add_node(name, cluster.free[name], releases.get(name, ()))
        running.sort(key=_end_of)
        free = dict(cluster.free)
        bf_map = _BackfillMap()
        #: _will_run answers for this pass, until a start changes what runs.
        seen: dict[tuple[int, int, tuple[str, ...]], tuple[float, list[str]] | None] = {}
        starts: StartList = []
        failed: set[tuple[int, int, float]] = set()
        #: Shapes _hold found no hold for since the last start or hold: it would find none again.
        unheld: set[tuple[int, int, float]] = set()
        pending = priority_order(list(cluster.pending.values()))
        for job in pending[: self.bf_max_job_test]:
            gpus, k = job.gpus_per_node, job.node_count
            limit = float(job.time_limit_s) if job.time_limit_s is not None else INFINITY
            end = now + limit
            key = (k, gpus, limit)
            if key not in failed:
                # A hold that begins at the job's very end still excludes its nodes: Slurm
                # tests every map slot with begin_time <= end_time.
                last = math.nextafter(end, INFINITY)
                usable = [n for n in cluster.node_names if timeline.fits_now(n, gpus, last)]
                chosen = tree.place(usable, k)
                if chosen is not None:
                    for name in chosen:
                        timeline.occupy(name, gpus, end)
                        free[name] -= gpus
                    bisect.insort(running, (end, tuple(chosen), gpus), key=_end_of)
                    seen.clear()
                    unheld.clear()
                    starts.append((job.job_id, tuple(chosen)))
                    continue
                failed.add(key)  # resources only shrink within a pass
            if key in unheld:
                continue

            def will_run(usable: list[str], job: Job = job) -> tuple[float, list[str]] | None:
                key = (job.node_count, job.gpus_per_node, tuple(usable))
                if key not in seen:
                    seen[key] = self._will_run(tree, running, free, usable, job, now)
                return seen[key]

            hold = self._hold(cluster, will_run, bf_map, now, limit)
            if hold is None:
                unheld.add(key)
                continue
            unheld.clear()
            begin, until, held = hold
            # Slurm's backfill map holds whole nodes, whatever share of them the job needs.
            for name in held:
                timeline.reserve(name, cluster.gpus_per_node, max(begin, now), until)
            bf_map.add(begin, until, held)
        return starts

    def _hold(
        self,
        cluster: SimCluster,
        will_run: Callable[[list[str]], tuple[float, list[str]] | None],
        bf_map: _BackfillMap,
        now: float,
        limit: float,
    ) -> tuple[float, float, list[str]] | None:
        """Where and when a job that cannot start now is held: ``_attempt_backfill()``'s loop.

        From ``start_res`` (now at first) the nodes held for no earlier job during
        ``[start_res, start_res + limit]`` go to :meth:`_will_run`.  If the start it
        finds comes after the next hold ends (``later_start``), or its nodes are held
        during its own slots (``_test_resv_overlap()``), the loop tries again from
        that time (``TRY_LATER``).  None: no hold (no room, or beyond ``bf_window``).

        The loop steps through every hold's end, so the holds overlapping the
        window are counted per node as it slides (each hold enters and leaves
        once), and :meth:`_will_run` is asked again only when the usable nodes
        change.
        """
        hold_ends, spans, by_begin, by_end = (
            bf_map.ends, bf_map.spans, bf_map.by_begin, bf_map.by_end
        )  # fmt: skip
        start_res = now
        window_end = start_res + limit
        #: Holds overlapping [start_res, window_end] per node (nodes with none are usable).
        overlaps = dict.fromkeys(cluster.node_names, 0)
        next_begin = bisect.bisect_right(by_begin, (window_end, INFINITY))
        for _, i in by_begin[:next_begin]:
            if spans[i][1] > start_res:
                for name in bf_map.nodes[i]:
                    overlaps[name] += 1
        next_end = bisect.bisect_right(by_end, (start_res, INFINITY))
        found = will_run([n for n in cluster.node_names if not overlaps[n]])
        for _ in range(2 * len(hold_ends) + 2):
            if start_res - now > self.bf_window_s:
                return None  # every start from here is at or after start_res: beyond the window
            after = bisect.bisect_right(hold_ends, start_res)
            later = hold_ends[after] if after < len(hold_ends) else None
            if found is None:
                if later is None:
                    return None
                step_to = later
            else:
                at, nodes = found
                start = max(at, start_res)
                if later is not None and start > later:
                    step_to = later
                else:
                    if start - now > self.bf_window_s:
                        return None
                    begin = self._slot(start)
                    until = max(self._slot(start + limit), begin + self.bf_resolution_s)
                    clash = bf_map.clashes(nodes, begin, until)
                    if not clash or start <= start_res:
                        return (begin, until, nodes) if not clash else None
                    step_to = start
            # Slide the window to [step_to, step_to + limit]: holds ending by step_to leave
            # it, holds beginning by its new end (and still running then) enter it.
            changed = False
            old_end = window_end
            start_res, window_end = step_to, step_to + limit
            while next_end < len(by_end) and by_end[next_end][0] <= start_res:
                i = by_end[next_end][1]
                next_end += 1
                if spans[i][0] <= old_end:
                    for name in bf_map.nodes[i]:
                        overlaps[name] -= 1
                        changed = changed or not overlaps[name]
            while next_begin < len(by_begin) and by_begin[next_begin][0] <= window_end:
                i = by_begin[next_begin][1]
                next_begin += 1
                if spans[i][1] > start_res:
                    for name in bf_map.nodes[i]:
                        changed = changed or not overlaps[name]
                        overlaps[name] += 1
            if changed:
                found = will_run([n for n in cluster.node_names if not overlaps[n]])
        return None

    def _will_run(
        self,
        tree: TreePlacement,
        running: list[tuple[float, tuple[str, ...], int]],
        free: dict[str, int],
        usable: list[str],
        job: Job,
        now: float,
    ) -> tuple[float, list[str]] | None:
        """When and where ``job`` could start on ``usable``: select/cons_tres ``_will_run_test()``.

        Running jobs end at their limits, in end order, and not one by one: the
        first batch takes every job ending up to the first end rounded up to 30 s
        of the wall clock plus 30 s, each next batch a window twice as long.  The
        job is placed after each batch; its start is the last removed job's end,
        so a hold can begin later, and on other nodes, than the first moment
        enough nodes are free.
        """
        gpus, k = job.gpus_per_node, job.node_count
        usable_set = set(usable)
        left = {n: free[n] for n in usable}
        chosen = tree.place([n for n in usable if left[n] >= gpus], k)
        if chosen is not None:
            return now, chosen
        jobs = running  # sorted by end
        window = 30.0
        first: float | None = None
        i = 0
        more = True
        while more:
            last: float | None = None
            while True:
                if i >= len(jobs):
                    more = False
                    break
                job_end, nodes, used = jobs[i]
                i += 1
                if usable_set.isdisjoint(nodes):
                    continue
                if first is None:
                    first = job_end + window - (job_end + self.clock_origin_s) % window
                for name in nodes:
                    if name in left:
                        left[name] += used
                last = job_end
                if i >= len(jobs):
                    more = False
                    break
                if jobs[i][0] > first + window:
                    break
            if last is None or first is None:
                break
            following = jobs[i][0] if i < len(jobs) else None
            window *= 2
            while following is not None and following > first + window:
                window *= 2
            chosen = tree.place([n for n in usable if left[n] >= gpus], k)
            if chosen is not None:
                return last, chosen
        return None

    def _slot(self, t: float) -> float:
        """``t`` rounded down to a multiple of ``bf_resolution`` of the wall clock.

        ``_attempt_backfill()`` rounds a hold's start and end so
        (``(start_time / backfill_resolution) * backfill_resolution``): the hold
        begins up to ``bf_resolution`` before the job's expected start.
        """
        res = self.bf_resolution_s
        if res <= 0 or not math.isfinite(t):
            return t
        return math.floor((t + self.clock_origin_s) / res) * res - self.clock_origin_s


class _BackfillMap:
    """The slots held for waiting jobs in one backfill pass, by node, by begin and by end."""

    def __init__(self) -> None:
        #: Per node, the [begin, end) slots held on it.
        self.by_node: dict[str, list[tuple[float, float]]] = {}
        #: Every hold's end, sorted: where TRY_LATER looks again.
        self.ends: list[float] = []
        #: Each hold's (begin, end) and nodes, in the order they were made.
        self.spans: list[tuple[float, float]] = []
        self.nodes: list[list[str]] = []
        #: (begin, hold) and (end, hold), sorted: what enters and leaves a sliding window.
        self.by_begin: list[tuple[float, int]] = []
        self.by_end: list[tuple[float, int]] = []

    def add(self, begin: float, until: float, nodes: list[str]) -> None:
        i = len(self.spans)
        self.spans.append((begin, until))
        self.nodes.append(nodes)
        for name in nodes:
            self.by_node.setdefault(name, []).append((begin, until))
        bisect.insort(self.ends, until)
        bisect.insort(self.by_begin, (begin, i))
        bisect.insort(self.by_end, (until, i))

    def clashes(self, nodes: list[str], begin: float, until: float) -> bool:
        """Whether any of ``nodes`` is held during ``[begin, until)``."""
        return any(e > begin and b < until for n in nodes for b, e in self.by_node.get(n, ()))


def _end_of(run: tuple[float, tuple[str, ...], int]) -> float:
    return run[0]
