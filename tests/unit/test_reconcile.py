"""Reconciliation after restarts and crashes: nothing pinned, released or held twice or forever."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurmopt.daemon.loop import Daemon, Mode
from slurmopt.daemon.reconcile import PIN_IN_FLIGHT_S, PIN_NOT_APPLIED, PIN_TIMEOUT
from slurmopt.model import Job, JobState
from slurmopt.store import ManagedJob, ManagedJobState, Store, history
from tests.fakes.slurm import FakeCrash, FakeSlurm
from tests.unit.test_daemon_fakes import SUBMIT, config, held_job, two_leaves

S = ManagedJobState



def _daemon(tmp_path: Path, store: Store, client: FakeSlurm, holder: str) -> Daemon:
    _, fabric = two_leaves()
    return Daemon(
        config(tmp_path),
        client,
        store,
        holder=holder,
        clock=lambda: client.clock,
        fabric_loader=lambda _c, _s: fabric,
    )


def _restart(tmp_path: Path, store: Store, client: FakeSlurm) -> Daemon:
    """A new process after a crash: a new holder, once the dead one's lease has expired."""
    client.clock += 11
    return _daemon(tmp_path, store, client, holder="host:2")


def _state(store: Store, job_id: int) -> ManagedJobState:
    with store.begin() as session:
        record = session.get(ManagedJob, job_id)
        assert record is not None
        return record.state


def _keys(store: Store, job_id: int) -> list[str]:
    with store.begin() as session:
        return [t.key for t in history(session, job_id)]


def _setup(tmp_path: Path, store: Store, jobs: list[Job]) -> tuple[FakeSlurm, Daemon]:
    nodes, _ = two_leaves()
    client = FakeSlurm(nodes, jobs)
    return client, _daemon(tmp_path, store, client, holder="host:1")


def test_crash_between_pin_record_and_slurm_call_pins_once_after_restart(
    tmp_path: Path, store: Store
) -> None:
    client, first = _setup(tmp_path, store, [held_job(7, nodes=2)])
    client.crash_on = "pin"
    with pytest.raises(FakeCrash):
        first.cycle()
    assert _state(store, 7) is S.PINNED  # recorded before the Slurm call
    assert client.calls == []  # and Slurm never saw it
    assert client.held_ids() == [7]

    second = _restart(tmp_path, store, client)
    assert second.cycle().mode is Mode.ENFORCING
    assert client.calls == []  # the recorded pin might still be in flight: left alone
    client.clock += PIN_IN_FLIGHT_S
    result = second.cycle()
    assert result.mode is Mode.ENFORCING
    assert client.count("pin", 7) == 1 and client.count("release", 7) == 1
    assert client.held_ids() == []
    submit = f"{SUBMIT + 7:.0f}"
    assert _keys(store, 7) == [
        f"7:{submit}:register:0",
        f"7:{submit}:pin:0",
        f"7:{submit}:unpin:0",
        f"7:{submit}:pin:1",
    ]
    with store.begin() as session:
        unpin = history(session, 7)[2]
    assert unpin.reason == PIN_NOT_APPLIED

    client.start(7)
    second.cycle()
    second.cycle()  # nothing more happens on later cycles
    assert _state(store, 7) is S.RUNNING
    assert client.count("pin", 7) == 1 and client.count("release", 7) == 1


def test_crash_between_pin_and_release_releases_exactly_once(tmp_path: Path, store: Store) -> None:
    client, first = _setup(tmp_path, store, [held_job(7)])
    client.crash_on = "release"
    with pytest.raises(FakeCrash):
        first.cycle()
    assert client.count("pin", 7) == 1 and client.held_ids() == [7]

    second = _restart(tmp_path, store, client)
    second.cycle()
    second.cycle()
    assert client.count("release", 7) == 1
    assert client.count("pin", 7) == 1  # Slurm shows the pin: only the release is finished
    assert client.held_ids() == []
    assert _state(store, 7) is S.PINNED


def test_crash_after_release_repeats_nothing(tmp_path: Path, store: Store) -> None:
    client, first = _setup(tmp_path, store, [held_job(7)])
    first.cycle()
    assert client.count("release", 7) == 1
    second = _restart(tmp_path, store, client)  # the first died without a clean stop
    second.cycle()
    client.start(7)
    second.cycle()
    assert client.count("pin", 7) == 1 and client.count("release", 7) == 1
    assert _state(store, 7) is S.RUNNING
    client.end(7)
    second.cycle()
    assert _state(store, 7) is S.DONE


def test_pinned_job_not_started_in_time_is_held_again_and_replanned(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _setup(tmp_path, store, [held_job(7)])
    daemon.cycle()
    assert _state(store, 7) is S.PINNED
    client.clock += 31  # pin_timeout_s = 30: Slurm started something else there
    daemon.cycle()
    assert client.count("hold", 7) == 1
    assert _state(store, 7) is S.WAITING
    with store.begin() as session:
        assert history(session, 7)[-1].reason == PIN_TIMEOUT
    daemon.cycle()  # planned again from a fresh snapshot
    assert _state(store, 7) is S.PINNED
    assert client.count("pin", 7) == 2 and client.count("release", 7) == 2
    assert client.count("hold", 7) == 1
    assert client.held_ids() == []


def test_crash_between_rehold_record_and_hold_holds_once_on_restart(
    tmp_path: Path, store: Store
) -> None:
    client, first = _setup(tmp_path, store, [held_job(7)])
    first.cycle()
    client.clock += 31
    client.crash_on = "hold"
    with pytest.raises(FakeCrash):
        first.cycle()
    assert _state(store, 7) is S.WAITING and client.count("hold", 7) == 0

    second = _restart(tmp_path, store, client)
    second.cycle()
    assert client.count("hold", 7) == 1
    second.cycle()
    assert client.count("hold", 7) == 1
    assert _state(store, 7) is S.PINNED and client.held_ids() == []


def test_waiting_job_that_slurm_runs_follows_slurm(tmp_path: Path, store: Store) -> None:
    client, daemon = _setup(tmp_path, store, [held_job(7), held_job(8, gpus=4)])
    client.crash_on = "pin"  # stop after registering, before anything reaches Slurm
    with pytest.raises(FakeCrash):
        daemon.cycle()
    client.calls.clear()
    client.release(8)  # an operator releases job 8 by hand; Slurm starts it
    client.start(8)
    daemon = _restart(tmp_path, store, client)
    daemon.cycle()
    assert _state(store, 8) is S.RUNNING
    assert client.count("pin", 8) == 0 and client.count("hold", 8) == 0


def test_waiting_job_released_by_someone_else_is_left_to_slurm(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _setup(tmp_path, store, [held_job(7)])
    client.crash_on = "pin"
    with pytest.raises(FakeCrash):
        daemon.cycle()
    store_state = _state(store, 7)
    assert store_state is S.PINNED
    client.release(7)  # released by hand while the daemon was down
    client.calls.clear()
    daemon = _restart(tmp_path, store, client)
    for _ in range(3):
        daemon.cycle()
    assert [c for c in client.calls if c[0] != "comment"] == []
    assert _state(store, 7) is S.PINNED


def test_user_hold_is_never_registered_nor_released(tmp_path: Path, store: Store) -> None:
    user = held_job(7, reason="JobHeldUser", admin_comment="slurmopt:managed")
    client, daemon = _setup(tmp_path, store, [user])
    daemon.cycle()
    assert client.calls == []
    with store.begin() as session:
        assert session.get(ManagedJob, 7) is None


def test_plugin_hold_shown_as_user_hold_is_slurmopts(tmp_path: Path, store: Store) -> None:
    # The plugin's priority=0 shows as JobHeldUser on 22.05; its "held" tag field marks it.
    plugin = held_job(7, reason="JobHeldUser", comment="slurmopt:managed,held | mine")
    client, daemon = _setup(tmp_path, store, [plugin])
    daemon.cycle()
    assert client.count("pin", 7) == 1 and client.count("release", 7) == 1
    assert _state(store, 7) is S.PINNED


def test_untagged_admin_hold_outside_managed_partitions_is_left_alone(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _setup(tmp_path, store, [held_job(7, comment="")])
    daemon.cycle()
    assert client.calls == []


@pytest.mark.parametrize(
    ("slurm_state", "expected"),
    [
        (JobState.COMPLETED, S.DONE),
        (JobState.CANCELLED, S.CANCELLED),
        (JobState.TIMEOUT, S.FAILED),
        (JobState.NODE_FAIL, S.FAILED),
    ],
)
def test_ended_jobs_close_their_record(
    tmp_path: Path, store: Store, slurm_state: JobState, expected: ManagedJobState
) -> None:
    client, daemon = _setup(tmp_path, store, [held_job(7)])
    daemon.cycle()
    client.start(7)
    client.end(7, slurm_state)
    daemon.cycle()
    assert _state(store, 7) is expected


def test_vanished_and_reused_ids(tmp_path: Path, store: Store) -> None:
    client, daemon = _setup(tmp_path, store, [held_job(7), held_job(8)])
    client.crash_on = "pin"
    with pytest.raises(FakeCrash):
        daemon.cycle()
    del client.jobs[7]  # purged from Slurm
    client.jobs[8] = held_job(8, submit_time=SUBMIT + 5000)  # a new job with the same id
    daemon = _restart(tmp_path, store, client)
    daemon.cycle()
    assert _state(store, 7) is S.CANCELLED
    with store.begin() as session:
        record = session.get(ManagedJob, 8)
        assert record is not None and record.slurm_submit_time == SUBMIT + 5000
        assert record.state is S.PINNED
        old = [t for t in history(session, 8) if t.slurm_submit_time == SUBMIT + 8]
    assert old[-1].to_state is S.CANCELLED


def test_requeued_running_job_waits_again(tmp_path: Path, store: Store) -> None:
    client, daemon = _setup(tmp_path, store, [held_job(7)])
    daemon.cycle()
    client.start(7)
    daemon.cycle()
    assert _state(store, 7) is S.RUNNING
    client.jobs[7] = held_job(7)  # requeued held by Slurm (requeuehold)
    daemon.cycle()
    assert _state(store, 7) is S.WAITING
    daemon.cycle()
    assert _state(store, 7) is S.PINNED  # planned again on the next fresh snapshot
    assert client.count("release", 7) == 2


def test_a_pin_finished_after_a_takeover_keeps_its_nodes_from_the_next_job(
    tmp_path: Path, store: Store
) -> None:
    """The new leader releases the old one's pin and plans the rest around its nodes."""
    nodes, _ = two_leaves()
    client = FakeSlurm(nodes[:1], [held_job(7), held_job(8)])
    first = _daemon(tmp_path, store, client, holder="host:1")
    client.crash_on = "release"  # the leader stops right after its pin of job 7 reached Slurm
    with pytest.raises(FakeCrash):
        first.cycle()
    assert client.count("pin", 7) == 1 and client.count("pin", 8) == 0
    second = _restart(tmp_path, store, client)
    for _ in range(2):  # the takeover cycle finishes job 7's pin; job 7 has not started yet
        result = second.cycle()
        assert result.plan is not None and 8 not in {a.job_id for a in result.plan.actions}
        client.clock += 1
    assert client.count("release", 7) == 1 and client.count("pin", 7) == 1
    assert client.count("pin", 8) == 0, client.calls  # the one node is job 7's
    client.start(7)
    client.end(7)
    client.nodes["a0"] = dataclasses.replace(client.nodes["a0"], gpus_alloc=0)
    second.cycle()
    second.cycle()
    assert client.count("pin", 8) == 1 and client.count("release", 8) == 1
