"""Choosing preemption victims: pure, no I/O, the planner decides what fits.

When a managed job cannot start, running jobs tagged ``preemptible`` may
be checkpointed and requeued to make room.  The rules:

* whole gangs only: a victim gives back every node it holds;
* a victim must rank below the preemptor: a preemptible job never
  preempts a job that is not preemptible, and preempts another preemptible
  job only with a strictly higher priority;
* the freed nodes must let the planner place the preemptor by its own gang
  rules (the lowest tier, widest links, fewest leaves): each candidate set is checked by running
  :func:`slurmopt.policy.plan.plan` on the snapshot without the victims;
* among the sets that work: least lost work first (GPU-seconds since each
  victim's last acknowledged checkpoint, or since it started), then the
  fewest victims, then the lowest job ids (so the choice is stable);
* it must pay (:func:`worth_preempting`): the GPU-seconds the preemptor
  gains by starting once the victims have checkpointed, instead of at the
  start its reservation promises, must exceed what the victims spend on
  the checkpoint and the restart.  A job whose reservation starts soon
  waits for it; one with no reservation in sight may preempt.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations

from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.policy.cache import PlannerCache
from slurmopt.policy.decisions import (
    HAND_BACK_REASONS,
    Plan,
    PreemptionChoice,
    PreemptReason,
    Victim,
)
from slurmopt.policy.knobs import Policy
from slurmopt.policy.place import place
from slurmopt.policy.request import PlanRequest, PreemptionAsk, PreemptionCost
from slurmopt.tag import checkpoint_of, is_preemptible_comment

#: Most victims one preemption may take.
MAX_VICTIMS = 4
#: Cheapest candidates considered (bounds the search to 2**MAX_CANDIDATES sets at most).
MAX_CANDIDATES = 12


def is_preemptible(job: Job) -> bool:
    """Tagged ``slurmopt:managed,preemptible`` in its admin comment (the owner cannot edit it)."""
    return is_preemptible_comment(job.admin_comment)


def _held_gpus(job: Job, node: str) -> int:
    indices = job.gpu_indices.get(node)
    return len(indices) if indices else job.gpus_per_node


def job_gpus(job: Job) -> int:
    """GPUs a running job holds over all its nodes."""
    if job.gpu_indices:
        return sum(len(v) for v in job.gpu_indices.values())
    return job.gpus_per_node * max(job.node_count, len(job.nodes))


def lost_work(job: Job, now: float) -> tuple[float, int | None]:
    """GPU-seconds since the job's last acknowledged checkpoint (or its start), and that step."""
    began = job.start_time if job.start_time is not None else now
    ack = checkpoint_of(job.comment)
    since = began
    step = None
    # The owner writes the acknowledgement: one dated after now is not believed.
    if ack is not None and began <= ack[1] <= now:
        since, step = ack[1], ack[0]
    return max(0.0, now - since) * job_gpus(job), step


def _outranks(preemptor: Job, victim: Job, priorities: Mapping[int, int]) -> bool:
    """The preemptor ranks above the victim.

    Priorities are compared whenever both are known (above 0): a preemptible
    preemptor must rank strictly higher, a non-preemptible one at least as
    high, so a low-priority job never stops a higher-priority one just for
    lacking the tag.  A preemptor held since submission has no Slurm
    priority yet (0): then only the tier decides (non-preemptible over
    preemptible), as ``docs/preemption.md`` says.
    """
    mine = priorities.get(preemptor.job_id, preemptor.priority)
    theirs = priorities.get(victim.job_id, victim.priority)
    if not is_preemptible(preemptor):
        return mine <= 0 or theirs <= 0 or mine >= theirs
    return mine > theirs


def without(snapshot: ClusterSnapshot, victims: Sequence[Job]) -> ClusterSnapshot:
    """The snapshot as it would be once ``victims`` gave their nodes back."""
    nodes = dict(snapshot.nodes)
    for job in victims:
        for name in job.nodes:
            node = nodes.get(name)
            if node is None:
                continue
            indices = job.gpu_indices.get(name)
            gpus = len(indices) if indices else job.gpus_per_node
            freed = node.alloc_gpu_indices
            if freed is not None and indices:
                freed = freed - frozenset(indices)
            nodes[name] = dataclasses.replace(
                node, gpus_alloc=max(0, node.gpus_alloc - gpus), alloc_gpu_indices=freed
            )
    gone = {j.job_id for j in victims}
    jobs = [j for j in snapshot.jobs.values() if j.job_id not in gone]
    return ClusterSnapshot.build(
        snapshot.taken_at,
        nodes.values(),
        jobs,
        snapshot.partitions.values(),
        snapshot.slurm_version,
        snapshot.source,
    )


def placement_after(
    snapshot: ClusterSnapshot,
    fabric: Fabric,
    preemptor: Job,
    victims: Sequence[Job],
    now: float,
    priorities: Mapping[int, int] | None = None,
    cache: PlannerCache | None = None,
) -> tuple[str, ...] | None:
    """Where the planner would start ``preemptor`` once ``victims`` are gone, or None.

    ``cache``: one :class:`PlannerCache` for the candidate sets of one search,
    whose snapshots differ only by the victims' jobs and nodes.
    """
    request = PlanRequest(
        without(snapshot, victims),
        fabric,
        Policy(backfill_depth=0),
        now,
        managed=frozenset({preemptor.job_id}),
        priorities=priorities or {},
    )
    result = place(request, cache)
    for action in result.actions:
        if action.job_id == preemptor.job_id:
            return action.nodes
    return None


def choose_victims(
    snapshot: ClusterSnapshot,
    fabric: Fabric,
    preemptor_id: int,
    now: float,
    priorities: Mapping[int, int] | None = None,
    *,
    exclude: frozenset[int] = frozenset(),
    max_victims: int = MAX_VICTIMS,
    cache: PlannerCache | None = None,
) -> PreemptionChoice:
    """The cheapest set of whole preemptible gangs whose nodes let ``preemptor_id`` start.

    ``cache`` may be shared by searches on the same snapshot (see :func:`placement_after`).
    """
    prio = dict(priorities or {})
    preemptor = snapshot.jobs.get(preemptor_id)
    if preemptor is None or not preemptor.is_pending or preemptor.gpus_per_node <= 0:
        return PreemptionChoice(
            preemptor_id, (), PreemptReason.NOT_A_CANDIDATE, "not a pending GPU job"
        )
    running = [
        j
        for j in snapshot.jobs.values()
        if j.is_active
        and j.nodes
        and j.job_id not in exclude
        and j.job_id != preemptor_id
        and is_preemptible(j)
        and _outranks(preemptor, j, prio)
    ]
    if not running:
        return PreemptionChoice(
            preemptor_id,
            (),
            PreemptReason.NO_PREEMPTIBLE_JOBS,
            "no running preemptible job ranks below it",
        )
    costs = {j.job_id: lost_work(j, now) for j in running}
    running.sort(key=lambda j: (costs[j.job_id][0], j.job_id))
    running = running[:MAX_CANDIDATES]
    sets: list[tuple[float, int, tuple[int, ...], tuple[Job, ...]]] = []
    for size in range(1, min(max_victims, len(running)) + 1):
        for combo in combinations(running, size):
            lost = sum(costs[j.job_id][0] for j in combo)
            sets.append((lost, size, tuple(sorted(j.job_id for j in combo)), combo))
    sets.sort(key=lambda s: (s[0], s[1], s[2]))
    free_gpus = sum(n.gpus_free for n in snapshot.nodes.values() if n.available)
    needed = preemptor.gpus_per_node * max(1, preemptor.node_count)
    per_node, count = preemptor.gpus_per_node, max(1, preemptor.node_count)
    cache = cache if cache is not None else PlannerCache()
    fitting = sum(1 for n in snapshot.nodes.values() if n.available and n.gpus_free >= per_node)
    for lost, size, _, combo in sets:
        if free_gpus + sum(job_gpus(j) for j in combo) < needed:
            continue  # cannot be enough: skip the planner
        if fitting + _nodes_made_fit(snapshot, combo, per_node) < count:
            continue  # too few nodes would have room for one of its tasks
        nodes = placement_after(snapshot, fabric, preemptor, combo, now, prio, cache)
        if nodes is None:
            continue
        victims = tuple(
            Victim(
                j.job_id,
                tuple(j.nodes),
                job_gpus(j),
                costs[j.job_id][0],
                costs[j.job_id][1],
            )
            for j in sorted(combo, key=lambda j: j.job_id)
        )
        return PreemptionChoice(
            preemptor_id,
            victims,
            PreemptReason.PREEMPT_LEAST_LOST_WORK,
            f"{size} victim(s), {lost:.0f} GPU-s of work lost, of {len(sets)} candidate set(s)",
            nodes,
        )
    return PreemptionChoice(
        preemptor_id,
        (),
        PreemptReason.NOT_ENOUGH_EVEN_IF_PREEMPTED,
        f"no set of up to {max_victims} of {len(running)} preemptible job(s) frees a placement",
    )


def _nodes_made_fit(snapshot: ClusterSnapshot, victims: Sequence[Job], per_node: int) -> int:
    """Nodes that have fewer than ``per_node`` free GPUs now and would once ``victims`` stop."""
    freed: dict[str, int] = {}
    for job in victims:
        for name in job.nodes:
            freed[name] = freed.get(name, 0) + _held_gpus(job, name)
    made = 0
    for name, gpus in freed.items():
        node = snapshot.nodes.get(name)
        if node is not None and node.available and node.gpus_free < per_node:
            made += node.gpus_free + gpus >= per_node
    return made


def worth_preempting(
    choice: PreemptionChoice,
    preemptor_gpus: int,
    expected_start: float | None,
    now: float,
    cost: PreemptionCost,
) -> bool:
    """Whether the preemptor gains more GPU-seconds than the victims spend on it.

    ``expected_start`` is when the plan would start the preemptor anyway
    (its reservation); None means no start in sight, which any cost is worth.
    """
    if not choice.victims:
        return False
    victim_gpus = sum(v.gpus for v in choice.victims)
    return _gain(preemptor_gpus, expected_start, now, cost) > _loss(victim_gpus, cost)


def may_pay(
    preemptor_gpus: int,
    expected_start: float | None,
    now: float,
    cost: PreemptionCost,
    smallest_victim_gpus: int,
) -> bool:
    """Whether any set of victims could pass :func:`worth_preempting`: a bound that spares
    the search when even the smallest victim would cost more than the preemptor gains."""
    return _gain(preemptor_gpus, expected_start, now, cost) > _loss(smallest_victim_gpus, cost)


def _gain(
    preemptor_gpus: int, expected_start: float | None, now: float, cost: PreemptionCost
) -> float:
    """GPU-seconds the preemptor runs earlier: from the victims' checkpoint to its reservation."""
    if expected_start is None:
        return math.inf
    return preemptor_gpus * max(0.0, expected_start - (now + cost.ack_s))


def _loss(victim_gpus: int, cost: PreemptionCost) -> float:
    return victim_gpus * (cost.ack_s + cost.restart_s)


def smallest_victim_gpus(snapshot: ClusterSnapshot) -> int | None:
    """GPUs of the smallest running preemptible job (None: nothing could be preempted)."""
    return min(
        (
            job_gpus(j)
            for j in snapshot.jobs.values()
            if j.is_active and j.nodes and is_preemptible(j)
        ),
        default=None,
    )


#: Waiting jobs tried as preemptors in one pass, highest priority first: bounds the searches.
MAX_PREEMPTORS = 10


def first_worth_preempting(
    snapshot: ClusterSnapshot,
    fabric: Fabric,
    waiting: Iterable[tuple[int, float | None]],
    now: float,
    cost: PreemptionCost,
    priorities: Mapping[int, int] | None = None,
    *,
    exclude: frozenset[int] = frozenset(),
    cache: PlannerCache | None = None,
    declined: list[tuple[int, PreemptionChoice]] | None = None,
) -> PreemptionChoice | None:
    """The preemption to start now: for the first waiting job that victims make room for at a gain.

    ``waiting`` is (job id, the start its reservation promises) in the order
    to try, highest priority first; only the first :data:`MAX_PREEMPTORS`
    pending ones are tried.  The daemon and the simulator both decide here,
    so a replay preempts as the daemon would.  Choices that make room but do
    not pay go to ``declined``, for the caller's log.
    """
    smallest = smallest_victim_gpus(snapshot)
    if smallest is None:
        return None
    tried = 0
    for job_id, expected_start in waiting:
        job = snapshot.jobs.get(job_id)
        if job is None or not job.is_pending:
            continue
        if tried == MAX_PREEMPTORS:
            break
        tried += 1
        gpus = job.gpus_per_node * max(1, job.node_count)
        if not may_pay(gpus, expected_start, now, cost, smallest):
            continue  # even the smallest victim would cost more: no search
        choice = choose_victims(
            snapshot, fabric, job_id, now, priorities, exclude=exclude, cache=cache
        )
        if not choice.victims:
            continue
        if worth_preempting(choice, gpus, expected_start, now, cost):
            return choice
        if declined is not None:
            declined.append((job_id, choice))
    return None


def waiting_for_room(result: Plan) -> dict[int, float | None]:
    """The jobs a plan leaves waiting for room, each with the start its reservation promises.

    Not the jobs it starts or hands back to Slurm; None where no
    reservation gives a start.  These are the jobs a preemption may serve.
    """
    starting = {a.job_id for a in result.actions}
    out: dict[int, float | None] = {
        u.job_id: u.expected_start for u in result.unplaced if u.reason not in HAND_BACK_REASONS
    }
    out.update((r.job_id, r.start_time) for r in result.reservations)
    return {job_id: at for job_id, at in out.items() if job_id not in starting}


def preemption_for(request: PlanRequest, placed: Plan) -> PreemptionChoice | None:
    """The preemption ``request`` asks for, given the placement ``placed`` made for it.

    Judged on the cluster as it will be once ``placed``'s starts are made
    (:meth:`ClusterSnapshot.with_started`), so the preemptor is never fitted
    onto nodes this plan gives to another job.  Tried for the jobs left
    waiting for room, highest priority first (ties: lowest id), among the
    request's preemptors; victims only among its allowed victims.  None when
    nothing is asked, needed or worth it.
    """
    ask = request.preemption
    if ask is None:
        return None
    now = request.at
    snapshot = request.snapshot.with_started(((a.job_id, a.nodes) for a in placed.actions), now)
    prio = request.priorities
    jobs = request.snapshot.jobs
    expected = waiting_for_room(placed)
    order = sorted(expected, key=lambda j: (-prio.get(j, jobs[j].priority), j))
    waiting = [(j, expected[j]) for j in order if ask.preemptors is None or j in ask.preemptors]
    exclude = frozenset(
        () if ask.victims is None else (j for j in snapshot.jobs if j not in ask.victims)
    )
    return first_worth_preempting(
        snapshot, request.fabric, waiting, now, ask.cost, prio, exclude=exclude
    )


__all__ = [
    "MAX_CANDIDATES",
    "MAX_PREEMPTORS",
    "MAX_VICTIMS",
    "PreemptReason",
    "PreemptionAsk",
    "PreemptionChoice",
    "PreemptionCost",
    "Victim",
    "choose_victims",
    "first_worth_preempting",
    "is_preemptible",
    "job_gpus",
    "lost_work",
    "may_pay",
    "placement_after",
    "preemption_for",
    "smallest_victim_gpus",
    "waiting_for_room",
    "without",
    "worth_preempting",
]
