"""PlannerCache: passes that reuse a cache decide exactly what passes without one decide.

A seeded fake cluster runs many consecutive passes (jobs start where the
plan says, end, arrive, are cancelled or change priority, nodes drain and
come back, time limits change, running jobs overrun); every pass is planned
without a cache, with the reused cache and with a fresh cache, and the three
plans must be equal.
"""

from __future__ import annotations

import gc
import random
from dataclasses import replace

import pytest

from slurmopt.fabric import Fabric
from slurmopt.fabric.generators import fat_tree
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.policy.backfill import Timeline
from slurmopt.policy.fragmentation import JobShape, JobSizeDistribution, queue_distribution
from slurmopt.policy.plan import Plan, PlannerCache, PlanRequest, Policy, plan, priority_order
from tests.unit.test_plan_helpers import NOW as HELPER_NOW
from tests.unit.test_plan_helpers import gpu_node, leaf_fabric, pending, running, snapshot

NOW = 1_700_000_000.0
FEATURES = ("", "a100", "ib", "a100&ib", "a100|ib")


class FakeCluster:
    """An in-memory Slurm stand-in: nodes, partitions and jobs that change between passes."""

    def __init__(self, fabric: Fabric, extra_nodes: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = NOW
        self.next_id = 1
        names = sorted(fabric.compute_nodes) + [f"loose{i}" for i in range(extra_nodes)]
        self.nodes: dict[str, Node] = {}
        for i, name in enumerate(names):
            total = 4 if i % 7 == 3 else 8
            feats = frozenset(f for f in ("a100", "ib") if self.rng.random() < 0.6)
            self.nodes[name] = Node(
                name=name,
                state=NodeState.IDLE,
                flags=frozenset({"DRAIN"}) if self.rng.random() < 0.03 else frozenset(),
                gpus_total=total,
                features=feats,
                gpu_type="a100" if "a100" in feats else "v100",
                weight=self.rng.choice((1, 1, 1, 5)),
                cpus=64,
            )
        half = names[: len(names) // 2]
        self.partitions = [
            Partition("gpu", tuple(names), default=True),
            Partition("half", tuple(half), max_nodes=8, max_time_s=7200),
        ]
        self.jobs: dict[int, Job] = {}
        for _ in range(len(names) * 2):
            self.submit()
        for job in list(self.jobs.values())[: len(names)]:
            self.start_anywhere(job)

    # -- changes -----------------------------------------------------------------------------
    def submit(self) -> None:
        rng = self.rng
        job_id = self.next_id
        self.next_id += 1
        nodes = rng.choice((1, 1, 1, 1, 2, 2, 3, 4, 8, 12))
        gpus = 8 if nodes > 1 else rng.choice((1, 2, 3, 4, 8))
        kind = rng.random()
        extra: dict[str, object] = {}
        if kind < 0.08:
            extra["features"] = rng.choice(FEATURES[1:])
        elif kind < 0.12:
            extra["exclusive"] = True
        elif kind < 0.15:
            extra["gpu_type"] = "a100"
        elif kind < 0.18:
            extra["excluded_nodes"] = tuple(rng.sample(sorted(self.nodes), 3))
        elif kind < 0.20:
            extra["required_nodes"] = (rng.choice(sorted(self.nodes)),)
        elif kind < 0.22:
            extra["begin_time"] = self.now + 300
        self.jobs[job_id] = Job(
            job_id=job_id,
            state=JobState.PENDING,
            partition=rng.choice(("gpu", "gpu", "gpu", "half", "half,gpu", "")),
            priority=rng.randint(1, 1000),
            node_count=nodes,
            gpus_per_node=gpus,
            time_limit_s=rng.choice((None, 600, 1800, 3600, 7200)),
            submit_time=self.now - rng.uniform(0, 3600),
            reason="Priority",
            **extra,  # type: ignore[arg-type]
        )

    def start_anywhere(self, job: Job) -> None:
        """Start a pending job on the first nodes with room (the initial load)."""
        need = job.gpus_per_node
        room = [n for n, node in self.nodes.items() if node.gpus_total - node.gpus_alloc >= need]
        if not job.exclusive and len(room) >= job.node_count:
            self.start(job.job_id, tuple(room[: job.node_count]), self.now - 600)

    def start(self, job_id: int, names: tuple[str, ...], at: float) -> None:
        job = self.jobs[job_id]
        for name in names:
            node = self.nodes[name]
            take = node.gpus_total if job.exclusive else job.gpus_per_node
            alloc = node.gpus_alloc + take
            state = NodeState.ALLOCATED if alloc >= node.gpus_total else NodeState.MIXED
            self.nodes[name] = replace(
                node, gpus_alloc=alloc, alloc_cpus=node.alloc_cpus + 4, state=state
            )
        self.jobs[job_id] = replace(job, state=JobState.RUNNING, nodes=names, start_time=at)

    def end(self, job_id: int) -> None:
        job = self.jobs.pop(job_id)
        for name in job.nodes:
            node = self.nodes[name]
            give = node.gpus_total if job.exclusive else job.gpus_per_node
            alloc = max(0, node.gpus_alloc - give)
            state = NodeState.IDLE if alloc == 0 else NodeState.MIXED
            self.nodes[name] = replace(
                node, gpus_alloc=alloc, alloc_cpus=max(0, node.alloc_cpus - 4), state=state
            )

    def step(self, result: Plan) -> None:
        """Carry out the plan's starts, then let time pass and things happen."""
        rng = self.rng
        for action in result.actions:
            self.start(action.job_id, action.nodes, self.now)
        self.now += rng.choice((0.0, 1.0, 30.0, 400.0))
        running = sorted(j.job_id for j in self.jobs.values() if j.is_active)
        for job_id in rng.sample(running, min(len(running), rng.randint(0, 4))):
            self.end(job_id)
        for _ in range(rng.randint(0, 5)):
            self.submit()
        roll = rng.random()
        names = sorted(self.nodes)
        if roll < 0.15:  # drain or resume a node
            name = rng.choice(names)
            node = self.nodes[name]
            flags = frozenset() if node.flags else frozenset({"DRAIN"})
            self.nodes[name] = replace(node, flags=flags)
        elif roll < 0.25:  # a node's weight changes
            name = rng.choice(names)
            self.nodes[name] = replace(self.nodes[name], weight=rng.choice((1, 2, 5)))
        elif roll < 0.35 and any(j in self.jobs for j in running):
            # a running job's limit changes; its nodes do not
            job_id = rng.choice([j for j in running if j in self.jobs])
            job = self.jobs[job_id]
            self.jobs[job_id] = replace(job, time_limit_s=rng.choice((None, 60, 36_000)))
        elif roll < 0.40:  # a pending job's priority changes
            waiting = sorted(j.job_id for j in self.jobs.values() if j.is_pending)
            if waiting:
                job_id = rng.choice(waiting)
                self.jobs[job_id] = replace(self.jobs[job_id], priority=rng.randint(1, 1000))
        elif roll < 0.45:  # a pending job is cancelled
            waiting = sorted(j.job_id for j in self.jobs.values() if j.is_pending)
            if waiting:
                del self.jobs[rng.choice(waiting)]

    def snapshot(self, fresh_objects: bool = False) -> ClusterSnapshot:
        """The cluster now; ``fresh_objects`` rebuilds every object as a new adapter read would."""
        nodes = list(self.nodes.values())
        jobs = list(self.jobs.values())
        if fresh_objects:
            nodes = [replace(n) for n in nodes]
            jobs = [replace(j) for j in jobs]
        return ClusterSnapshot.build(self.now, nodes, jobs, self.partitions)


def _fabrics() -> list[tuple[str, Fabric, int]]:
    leaves = {f"leaf{i}": [f"leaf{i}n{j}" for j in range(6)] for i in range(5)}
    return [
        ("fat-tree", fat_tree(64, 8, 4), 0),
        ("leaves-and-loose-nodes", Fabric.from_leaf_map(leaves), 4),
    ]


POLICIES = [
    Policy(),
    Policy(backfill_depth=3, require_single_leaf=False),
    Policy(partitions=frozenset({"gpu"})),
    Policy(job_sizes=JobSizeDistribution("file", (JobShape(1, 4, 2.0), JobShape(2, 8, 1.0)))),
    Policy(plan_check_every=1),
]


@pytest.mark.parametrize(
    "policy", POLICIES, ids=["default", "shallow", "managed", "sizes", "checked"]
)
@pytest.mark.parametrize("label,fabric,loose", _fabrics(), ids=lambda x: str(x)[:24])
def test_consecutive_passes_with_a_reused_cache_equal_passes_without(
    label: str, fabric: Fabric, loose: int, policy: Policy
) -> None:
    cluster = FakeCluster(fabric, loose, seed=len(label) * 7 + policy.backfill_depth)
    cache = PlannerCache()
    starts = reservations = 0
    for step in range(40):
        snap = cluster.snapshot(fresh_objects=step % 9 == 4)
        plain = plan(PlanRequest(snap, fabric, policy, cluster.now))
        cached = plan(PlanRequest(snap, fabric, policy, cluster.now), cache=cache)
        fresh = plan(PlanRequest(snap, fabric, policy, cluster.now), cache=PlannerCache())
        assert cached.to_json() == plain.to_json(), f"pass {step}"
        assert fresh.to_json() == plain.to_json(), f"pass {step}"
        starts += len(plain.actions)
        reservations += len(plain.reservations)
        cluster.step(plain)
    assert cache.mismatches == 0
    # The run exercised what the cache keeps: starts, reservations, and jobs coming and going.
    assert starts > 20
    assert reservations > 0


def test_the_same_snapshot_twice_gives_the_same_plan() -> None:
    fabric = fat_tree(64, 8, 4)
    snap = FakeCluster(fabric, 0, seed=3).snapshot()
    cache = PlannerCache()
    first = plan(PlanRequest(snap, fabric), cache=cache).to_json()
    assert plan(PlanRequest(snap, fabric), cache=cache).to_json() == first
    assert plan(PlanRequest(snap, fabric)).to_json() == first


def test_a_node_weight_change_between_passes_moves_it_in_the_best_fit_order() -> None:
    # Two idle nodes: the lighter one is taken.  The weights swap between passes; a cached
    # pass must take the other node, as a pass without the cache does.
    fabric = leaf_fabric({"leaf1": ["n1", "n2"]})
    jobs = [pending(1, gpus=1)]
    cache = PlannerCache()
    before = snapshot([gpu_node("n1", weight=1), gpu_node("n2", weight=5)], jobs)
    assert plan(PlanRequest(before, fabric), cache=cache).actions[0].nodes == ("n1",)
    after = snapshot([gpu_node("n1", weight=5), gpu_node("n2", weight=1)], jobs)
    assert plan(PlanRequest(after, fabric), cache=cache).actions[0].nodes == ("n2",)
    assert plan(PlanRequest(after, fabric)).actions[0].nodes == ("n2",)


def test_another_fabric_object_starts_the_cache_over() -> None:
    one, other = fat_tree(64, 8, 4), fat_tree(64, 16, 2)
    snap = FakeCluster(one, 0, seed=5).snapshot()
    cache = PlannerCache()
    plan(PlanRequest(snap, one), cache=cache)
    assert (
        plan(PlanRequest(snap, other), cache=cache).to_json()
        == plan(PlanRequest(snap, other)).to_json()
    )
    assert (
        plan(PlanRequest(snap, one), cache=cache).to_json()
        == plan(PlanRequest(snap, one)).to_json()
    )


def test_queue_shapes_match_queue_distribution_as_jobs_come_and_go() -> None:
    fabric = fat_tree(64, 8, 4)
    cluster = FakeCluster(fabric, 0, seed=11)
    cache = PlannerCache()
    for _ in range(15):
        snap = cluster.snapshot()
        cache.refresh(snap, fabric)
        assert cache.queue_shapes() == queue_distribution(snap).shapes
        cluster.step(plan(PlanRequest(snap, fabric)))


def test_a_failed_refresh_empties_the_cache() -> None:
    fabric = fat_tree(64, 8, 4)
    cluster = FakeCluster(fabric, 0, seed=13)
    cache = PlannerCache()
    plan(PlanRequest(cluster.snapshot(), fabric), cache=cache)
    snap = cluster.snapshot()
    jobs: dict[int, object] = {**snap.jobs, 0: object()}
    broken = ClusterSnapshot(snap.taken_at, snap.nodes, jobs, snap.partitions)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        plan(PlanRequest(broken, fabric), cache=cache)
    assert (
        plan(PlanRequest(snap, fabric), cache=cache).to_json()
        == plan(PlanRequest(snap, fabric)).to_json()
    )


def test_the_kept_planning_order_is_the_priority_order_as_the_queue_changes() -> None:
    # Jobs arrive and leave, priorities and overrides change, jobs become preemptible, and the
    # same job comes back as a new object: only the changed jobs are sorted again.
    rng = random.Random(17)
    tagged = "slurmopt:managed,preemptible"
    jobs = {i: pending(i, priority=rng.randint(1, 50)) for i in range(1, 200)}
    priorities: dict[int, int] = {}
    cache = PlannerCache()
    for step in range(60):
        given = list(jobs.values())
        rng.shuffle(given)
        assert cache.planning_order(given, priorities) == priority_order(
            given, priorities, preemptible_last=True
        ), f"step {step}"
        for _ in range(rng.randint(0, 6)):
            roll, job_id = rng.random(), rng.randint(1, 260)
            job = jobs.get(job_id)
            if job is None:
                jobs[job_id] = pending(job_id, priority=rng.randint(1, 50))
            elif roll < 0.3:
                del jobs[job_id]
            elif roll < 0.5:
                jobs[job_id] = replace(job, priority=rng.randint(1, 50))
            elif roll < 0.7:
                priorities[job_id] = rng.randint(1, 50)
            elif roll < 0.8:
                priorities.pop(job_id, None)
            elif roll < 0.9:
                jobs[job_id] = replace(job, admin_comment=tagged, submit_time=rng.random())
            else:
                jobs[job_id] = replace(job)


def _spoil(cache: PlannerCache) -> None:
    """Make the cache give the last planning order reversed, as a broken refresh might."""
    assert cache._order is not None
    jobs, priorities, order = cache._order
    cache._order = (jobs, priorities, order[::-1])


def test_every_nth_pass_is_checked_against_a_pass_without_the_cache(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fabric = fat_tree(64, 8, 4)
    snap = FakeCluster(fabric, 0, seed=3).snapshot()
    request = PlanRequest(snap, fabric, Policy(plan_check_every=3))
    right = plan(request)
    cache = PlannerCache()
    assert plan(request, cache=cache) == right  # pass 1
    _spoil(cache)
    assert plan(request, cache=cache) != right  # pass 2: not checked, so the spoilt order shows
    assert cache.mismatches == 0 and not caplog.records
    with caplog.at_level("ERROR"):
        assert plan(request, cache=cache) == right  # pass 3: checked; the full pass wins
    assert cache.mismatches == 1
    assert "differs from the same pass made without it" in caplog.text
    assert plan(request, cache=cache) == right  # the cache started over


def test_no_check_when_check_every_is_zero() -> None:
    fabric = fat_tree(64, 8, 4)
    snap = FakeCluster(fabric, 0, seed=3).snapshot()
    request = PlanRequest(snap, fabric, Policy(plan_check_every=0))
    cache = PlannerCache()
    right = plan(request, cache=cache)
    _spoil(cache)
    for _ in range(5):
        assert plan(request, cache=cache) != right
    assert cache.mismatches == 0


@pytest.mark.parametrize("collecting", [True, False])
def test_a_pass_leaves_the_cyclic_collector_as_it_found_it(collecting: bool) -> None:
    # The collector is paused for the pass only, also when the pass fails.
    fabric = fat_tree(64, 8, 4)
    snap = FakeCluster(fabric, 0, seed=13).snapshot()
    broken = ClusterSnapshot(snap.taken_at, snap.nodes, {0: object()}, snap.partitions)  # type: ignore[dict-item]
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        plan(PlanRequest(snap, fabric))
        assert gc.isenabled() is collecting
        with pytest.raises(AttributeError):
            plan(PlanRequest(broken, fabric))
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_shared_timeline_copies_an_event_list_before_changing_it() -> None:
    shared = {"n1": [(NOW + 100, 4)]}
    timeline = Timeline.shared(NOW, {"n1": 4, "n2": 8}, dict(shared))
    timeline.reserve("n1", 8, NOW + 100, NOW + 200)
    timeline.occupy("n2", 8, NOW + 50)
    assert shared == {"n1": [(NOW + 100, 4)]}
    assert timeline.events["n1"] == [(NOW + 100, -8), (NOW + 100, 4), (NOW + 200, 8)]
    assert not timeline.fits_now("n1", 4, NOW + 150)
    assert timeline.available_from("n1", 8) == NOW + 200


def test_a_job_that_overruns_between_passes_frees_its_gpus_from_now() -> None:
    nodes = [gpu_node("n0", alloc=8), gpu_node("n1", alloc=8)]
    jobs = [running(1, ["n0", "n1"], ends_in=100), pending(2, nodes=2)]
    snap = snapshot(nodes, jobs)
    fabric = leaf_fabric({"leaf": ["n0", "n1"]})
    cache = PlannerCache()
    on_time = plan(PlanRequest(snap, fabric, now=HELPER_NOW), cache=cache)
    assert [r.start_time for r in on_time.reservations] == [HELPER_NOW + 100]
    # The same objects a pass later: job 1 is past its limit and still holds its GPUs.
    late = plan(PlanRequest(snap, fabric, now=HELPER_NOW + 300), cache=cache)
    assert [r.start_time for r in late.reservations] == [HELPER_NOW + 300]
    assert late.to_json() == plan(PlanRequest(snap, fabric, now=HELPER_NOW + 300)).to_json()
