"""Managed-job states: legal moves are recorded, illegal ones refused, repeats harmless."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from slurmopt.store import (
    FINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    JobIdReused,
    JobTransition,
    KeyConflict,
    ManagedJob,
    ManagedJobState,
    Store,
    UnknownJob,
    history,
    idempotency_key,
    next_attempt,
    record_transition,
    register_job,
    transition,
)

S = ManagedJobState
SUBMIT = 1_700_000_000.0
JOB = 4242



def _register(store: Store, job_id: int = JOB, submit: float = SUBMIT) -> None:
    with store.begin() as s:
        register_job(
            s,
            job_id,
            submit,
            key=idempotency_key(job_id, submit, "register"),
            priority_before_hold=9000,
            preemptible=True,
            elastic_min_nodes=2,
            elastic_max_nodes=8,
            now=10.0,
        )


def _move(
    store: Store,
    to: ManagedJobState,
    action: str,
    attempt: int = 0,
    nodes: list[str] | None = None,
    now: float | None = None,
) -> None:
    key = idempotency_key(JOB, SUBMIT, action, attempt)
    with store.begin() as s:
        transition(s, JOB, to, action, "", key, nodes=nodes, now=now)


def _count(store: Store) -> int:
    with store.begin() as s:
        return int(s.scalar(select(func.count()).select_from(JobTransition)) or 0)


def _job(store: Store, job_id: int = JOB) -> ManagedJob:
    with store.begin() as s:
        job = s.get(ManagedJob, job_id)
        assert job is not None
        return job


def test_the_table_covers_every_state_and_finals_have_no_exit() -> None:
    assert set(TRANSITIONS) == set(S)
    assert FINAL_STATES == {S.DONE, S.FAILED, S.CANCELLED}
    for state in FINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
    for state in set(S) - FINAL_STATES:
        assert FINAL_STATES <= TRANSITIONS[state], f"{state} must be able to end"
        assert state not in TRANSITIONS[state]


def test_the_documented_cycle_is_legal_and_recorded_in_order(store: Store) -> None:
    _register(store)
    job = _job(store)
    assert (job.state, job.priority_before_hold, job.preemptible) == (S.WAITING, 9000, True)
    assert (job.elastic_min_nodes, job.elastic_max_nodes) == (2, 8)
    _move(store, S.PINNED, "pin", nodes=["gpu003", "gpu001", "gpu002"], now=20.0)
    assert _job(store).nodes == "gpu[001-003]"
    _move(store, S.RUNNING, "started")
    _move(store, S.SIGNALLED, "preempt")
    _move(store, S.CHECKPOINTED, "ack")
    _move(store, S.WAITING, "requeuehold")
    assert _job(store).nodes is None  # back to waiting: the old pin is gone
    _move(store, S.PINNED, "pin", attempt=1, nodes=["gpu007"])
    _move(store, S.RUNNING, "started", attempt=1)
    _move(store, S.DONE, "completed")
    with store.begin() as s:
        rows = history(s, JOB)
    assert [(r.from_state, r.to_state) for r in rows] == [
        (None, S.WAITING),
        (S.WAITING, S.PINNED),
        (S.PINNED, S.RUNNING),
        (S.RUNNING, S.SIGNALLED),
        (S.SIGNALLED, S.CHECKPOINTED),
        (S.CHECKPOINTED, S.WAITING),
        (S.WAITING, S.PINNED),
        (S.PINNED, S.RUNNING),
        (S.RUNNING, S.DONE),
    ]
    assert rows[1].at == 20.0 and rows[1].reason == "pin"
    assert all(r.slurm_submit_time == SUBMIT for r in rows)
    final = _job(store)
    assert final.state is S.DONE and final.reason == "completed"
    assert final.created_at == 10.0 and final.updated_at >= 20.0


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], S.CHECKPOINTED),  # waiting cannot be checkpointed
        ([], S.SIGNALLED),  # only a running job is signalled
        ([S.PINNED], S.SIGNALLED),
        ([S.PINNED, S.RUNNING], S.PINNED),
        ([S.PINNED, S.RUNNING, S.SIGNALLED], S.WAITING),  # must checkpoint first
        ([S.CANCELLED], S.WAITING),  # final
        ([S.PINNED, S.RUNNING, S.FAILED], S.RUNNING),
    ],
)
def test_an_illegal_transition_is_refused_and_writes_nothing(
    store: Store, path: list[ManagedJobState], illegal: ManagedJobState
) -> None:
    _register(store)
    for step, state in enumerate(path):
        _move(store, state, f"step{step}")
    before = _count(store)
    state_before = _job(store).state
    with pytest.raises(IllegalTransition) as err, store.begin() as s:
        transition(s, JOB, illegal, "bad", "", idempotency_key(JOB, SUBMIT, "bad"))
    assert err.value.from_state is state_before and err.value.to_state is illegal
    assert err.value.exit_code == 70
    assert _count(store) == before
    assert _job(store).state is state_before


def test_a_repeated_key_returns_the_first_record_and_writes_nothing(store: Store) -> None:
    _register(store)
    key = idempotency_key(JOB, SUBMIT, "pin")
    with store.begin() as s:
        first = transition(s, JOB, S.PINNED, "pin", "first", key, nodes=["gpu001"], now=50.0)
        first_id = first.id
    _move(store, S.RUNNING, "started")
    count = _count(store)
    # A restarted daemon retries the pin it had recorded; the job has since moved on.
    with store.begin() as s:
        again = transition(s, JOB, S.PINNED, "pin", "retry", key, nodes=["gpu009"], now=99.0)
        assert (again.id, again.detail, again.at) == (first_id, "first", 50.0)
    assert _count(store) == count
    job = _job(store)
    assert job.state is S.RUNNING and job.nodes == "gpu001"


def test_a_repeated_registration_is_idempotent(store: Store) -> None:
    _register(store)
    _register(store)
    assert _count(store) == 1


def test_a_key_reused_for_another_move_is_a_conflict(store: Store) -> None:
    _register(store)
    key = idempotency_key(JOB, SUBMIT, "pin")
    with store.begin() as s:
        transition(s, JOB, S.PINNED, "pin", "", key)
    with pytest.raises(KeyConflict), store.begin() as s:
        transition(s, JOB, S.RUNNING, "started", "", key)


def test_a_job_without_a_record_is_unknown(store: Store) -> None:
    with pytest.raises(UnknownJob), store.begin() as s:
        transition(s, 1, S.PINNED, "pin", "", "1:0:pin:0")


def test_the_key_tells_incarnations_and_attempts_apart() -> None:
    assert idempotency_key(7, SUBMIT, "pin") == "7:1700000000:pin:0"
    assert idempotency_key(7, SUBMIT, "pin", 1) != idempotency_key(7, SUBMIT, "pin")
    assert idempotency_key(7, SUBMIT + 60, "pin") != idempotency_key(7, SUBMIT, "pin")


def test_a_recorded_decision_takes_the_next_attempt_of_its_action(store: Store) -> None:
    _register(store)
    keys = []
    for to in (S.PINNED, S.WAITING, S.PINNED):
        with store.begin() as s:
            action = "pin" if to is S.PINNED else "unpin"
            nodes = ["a0", "a1"] if to is S.PINNED else None
            record = record_transition(s, JOB, SUBMIT, to, action, "r", "d", 20.0, nodes=nodes)
            keys.append(record.key)
    assert keys == [
        f"{JOB}:1700000000:pin:0",
        f"{JOB}:1700000000:unpin:0",
        f"{JOB}:1700000000:pin:1",
    ]
    assert _job(store).nodes == "a[0-1]"
    with store.begin() as s:
        assert next_attempt(s, JOB, SUBMIT, "pin") == 2
        assert next_attempt(s, JOB, SUBMIT + 60, "pin") == 0


def test_a_reused_job_id_replaces_an_ended_record_but_not_a_live_one(store: Store) -> None:
    _register(store)
    later = SUBMIT + 86_400
    with pytest.raises(JobIdReused):
        _register(store, JOB, later)
    _move(store, S.CANCELLED, "vanished")
    _register(store, JOB, later)
    job = _job(store)
    assert (job.state, job.slurm_submit_time) == (S.WAITING, later)
    with store.begin() as s:
        rows = history(s, JOB)
    assert [(r.slurm_submit_time, r.to_state) for r in rows] == [
        (SUBMIT, S.WAITING),
        (SUBMIT, S.CANCELLED),
        (later, S.WAITING),
    ]


def test_a_committed_transition_survives_a_restart_and_its_retry_is_a_no_op(
    tmp_path: Path,
) -> None:
    """Write before act: the pin is committed, the daemon dies before calling Slurm."""
    url = f"sqlite:///{tmp_path / 'slurmopt.db'}"
    first = Store.open(url)
    _register(first)
    key = idempotency_key(JOB, SUBMIT, "pin")
    with first.begin() as s:
        transition(s, JOB, S.PINNED, "pin", "", key, nodes=["gpu001"])
    first.close()  # crash before `scontrol update`

    restarted = Store.open(url)
    try:
        assert _job(restarted).state is S.PINNED  # the reconciler sees what was intended
        with restarted.begin() as s:
            transition(s, JOB, S.PINNED, "pin", "", key, nodes=["gpu001"])
        assert _count(restarted) == 2  # registration and one pin, never two
    finally:
        restarted.close()


def test_an_error_inside_the_transaction_records_nothing(store: Store) -> None:
    _register(store)
    with pytest.raises(RuntimeError), store.begin() as s:
        transition(s, JOB, S.PINNED, "pin", "", idempotency_key(JOB, SUBMIT, "pin"))
        raise RuntimeError("failed before commit")
    assert _job(store).state is S.WAITING
    assert _count(store) == 1


def test_savepoints_work_on_sqlite(store: Store) -> None:
    """A refused transition inside a savepoint leaves the outer transaction usable."""
    _register(store)
    with store.begin() as s:
        with pytest.raises(IllegalTransition), s.begin_nested():
            transition(s, JOB, S.CHECKPOINTED, "x", "", "k1")
        transition(s, JOB, S.PINNED, "pin", "", "k2")
    assert _job(store).state is S.PINNED
