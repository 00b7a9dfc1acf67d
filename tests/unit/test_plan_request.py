"""One request in, the whole decision out: replayable requests, and preemption inside the plan."""

from __future__ import annotations

import dataclasses
import pickle

from slurmopt.model import Job
from slurmopt.policy.plan import (
    PlanRequest,
    Policy,
    PreemptionAsk,
    PreemptionCost,
    PreemptReason,
    plan,
)
from tests.unit.test_plan_helpers import NOW, gpu_node, leaf_fabric, pending, running, snapshot

PRE = "slurmopt:managed,preemptible"
FABRIC = leaf_fabric({"l1": ["a", "b"]})
#: Free checkpoints and restarts: any preemption that makes room pays.
FREE = PreemptionAsk(cost=PreemptionCost(ack_s=0.0, restart_s=0.0))


def _victim(job_id: int, node: str, ends_in: float = 3000.0) -> Job:
    job = running(job_id, [node], ends_in=ends_in)
    return dataclasses.replace(job, comment=PRE, admin_comment=PRE)


def _gang_waits_behind_a_victim(short_backfill: bool) -> PlanRequest:
    """A 2-node gang (job 1) waits for node ``a``, held by a preemptible job (9) for 3000 s;
    with ``short_backfill``, a 100 s job (2) backfills on the free node ``b`` meanwhile."""
    jobs = [_victim(9, "a"), pending(1, nodes=2, priority=500)]
    if short_backfill:
        jobs.append(pending(2, priority=100, time_limit_s=100))
    snap = snapshot([gpu_node("a", alloc=8), gpu_node("b")], jobs)
    return PlanRequest(snap, FABRIC, Policy(), NOW, preemption=FREE)


def test_a_request_pickles_and_replays_to_the_same_plan() -> None:
    request = _gang_waits_behind_a_victim(short_backfill=True)
    replayed = pickle.loads(pickle.dumps(request))
    assert replayed.snapshot == request.snapshot and replayed.preemption == request.preemption
    assert plan(replayed).to_json() == plan(request).to_json()


def test_the_plan_names_the_preemption_with_its_victims_and_where_the_preemptor_goes() -> None:
    result = plan(_gang_waits_behind_a_victim(short_backfill=False))
    (choice,) = result.preemptions
    assert choice.for_job_id == 1 and choice.reason is PreemptReason.PREEMPT_LEAST_LOST_WORK
    assert [v.job_id for v in choice.victims] == [9] and set(choice.nodes) == {"a", "b"}
    doc = result.to_json()
    assert doc["preemptions"][0]["victims"][0]["job_id"] == 9
    assert doc["preemptions"][0]["kind"] == "preempt"


def test_no_preemption_unless_the_request_asks() -> None:
    request = dataclasses.replace(_gang_waits_behind_a_victim(False), preemption=None)
    assert plan(request).preemptions == ()


def test_only_the_allowed_victims_and_preemptors_take_part() -> None:
    base = _gang_waits_behind_a_victim(short_backfill=False)
    no_victims = dataclasses.replace(
        base, preemption=dataclasses.replace(FREE, victims=frozenset())
    )
    assert plan(no_victims).preemptions == ()
    others = dataclasses.replace(FREE, preemptors=frozenset({77}))
    assert plan(dataclasses.replace(base, preemption=others)).preemptions == ()


def test_the_preemptor_is_never_fitted_on_nodes_the_same_plan_starts_another_job_on() -> None:
    # Job 2 backfills on b now; with the victim gone the gang would still lack b, so stopping
    # the victim now gains nothing.  Judged on the snapshot before the plan's own starts, b
    # would look free and the victim would be stopped for a gang that cannot start.
    result = plan(_gang_waits_behind_a_victim(short_backfill=True))
    assert [a.job_id for a in result.actions] == [2]
    assert result.preemptions == ()


def test_a_pending_snapshot_job_shows_as_started_on_its_nodes() -> None:
    snap = snapshot([gpu_node("a"), gpu_node("b", alloc=2)], [pending(1, gpus=4)])
    after = snap.with_started([(1, ("b",)), (404, ("a",))], NOW)
    job = after.jobs[1]
    assert (job.is_active, job.nodes, job.start_time, job.node_count) == (True, ("b",), NOW, 1)
    assert after.nodes["b"].gpus_alloc == 6 and after.nodes["a"].gpus_alloc == 0
    assert snap.with_started([], NOW) is snap
