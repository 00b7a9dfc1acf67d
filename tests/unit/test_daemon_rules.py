"""One test per rule the daemon must keep under faults, each failing when its rule is broken.

``tests/mutants/`` holds a patch breaking each rule; ``python tests/mutants/run.py``
checks that every one of them makes a test here (or elsewhere) fail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmopt.daemon.heartbeat import read_heartbeat
from slurmopt.daemon.loop import Daemon, Mode
from slurmopt.daemon.preempt import REQUEUED, VICTIM_ENDED, PreemptionSettings
from slurmopt.daemon.switch import set_switch
from slurmopt.model import JobState
from slurmopt.store import ManagedJobState, Preemption, Store
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_daemon_fakes import config, held_job, two_leaves

S = ManagedJobState
PRE = "slurmopt:managed,preemptible"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(f"sqlite:///{tmp_path / 'd.db'}")
    yield store
    store.close()


def _daemon(
    tmp_path: Path, store: Store, client: FakeSlurm, holder: str = "host:1", **kw: Any
) -> Daemon:
    _, fabric = two_leaves()
    lag = kw.pop("lag", None)
    daemon = Daemon(
        config(tmp_path, **kw),
        client,
        store,
        holder=holder,
        clock=(lambda: client.clock + lag[0]) if lag is not None else (lambda: client.clock),
        fabric_loader=lambda _c, _s: fabric,
    )
    daemon.preempter.settings = PreemptionSettings(grace_s=60.0)
    return daemon


def _victim_signalled(tmp_path: Path, store: Store) -> tuple[FakeSlurm, Daemon]:
    """Preemptible job 5 runs on the only free nodes; job 9 arrives; 5 is signalled for it."""
    nodes, _ = two_leaves()
    client = FakeSlurm(nodes, [held_job(5, nodes=2, comment=PRE)])
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()
    client.schedule()
    client.occupy(n for n in client.nodes if client.nodes[n].gpus_alloc == 0)
    client.clock += 1
    daemon.cycle()
    client.jobs[9] = held_job(9, nodes=2)
    client.clock += 1
    daemon.cycle()
    assert client.writes(5, "signal") == 1
    return client, daemon


def _rows(store: Store) -> list[Preemption]:
    from sqlalchemy import select

    with store.begin() as session:
        rows = list(session.scalars(select(Preemption).order_by(Preemption.id)))
        session.expunge_all()
    return rows


# -- (a) the lease is checked before acting ----------------------------------------------------
def test_a_leader_that_lost_the_lease_mid_cycle_writes_nothing_over_the_new_one(
    tmp_path: Path,
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    first = _daemon(tmp_path, Store.open(f"sqlite:///{tmp_path / 'd.db'}"), client, "host:1")
    second = _daemon(tmp_path, Store.open(f"sqlite:///{tmp_path / 'd.db'}"), client, "host:2")
    assert first.cycle().mode is Mode.ENFORCING

    def paused() -> None:
        # The first daemon's squeue takes longer than its lease; the second takes over.
        client.clock += first.lease_ttl_s + 1
        assert second.cycle().mode is Mode.ENFORCING

    client.during["snapshot"] = paused
    result = first.cycle()
    assert result.mode is Mode.STANDBY and first.fence is None
    beat = read_heartbeat(tmp_path / "heartbeat", now=client.clock, max_age_s=30)
    assert beat.enforcing and beat.heartbeat is not None and beat.heartbeat.holder == "host:2"
    status = second.store.last_beat("daemon")
    assert status is not None and status.holder == "host:2"
    assert client.writes_total() == 0
    first.store.close()
    second.store.close()


# -- (b) one preemption at a time --------------------------------------------------------------
def test_no_second_preemption_starts_while_one_is_in_flight(tmp_path: Path, store: Store) -> None:
    nodes, _ = two_leaves()
    client = FakeSlurm(
        nodes, [held_job(5, nodes=2, comment=PRE), held_job(6, nodes=2, comment=PRE)]
    )
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()
    assert sorted(client.schedule()) == [5, 6]
    client.occupy([n for n in client.nodes if client.nodes[n].gpus_alloc == 0])
    client.clock += 1
    daemon.cycle()
    client.jobs[9] = held_job(9, nodes=2)
    client.jobs[10] = held_job(10, nodes=2)
    for _ in range(3):  # no acknowledgement comes: the first preemption stays in flight
        client.clock += 1
        daemon.cycle()
    assert client.writes_total("signal") == 1
    assert [r.outcome for r in _rows(store)] == [None]


# -- (c) only the run that acknowledged is requeued --------------------------------------------
def test_a_run_started_after_the_requeue_is_never_requeued(tmp_path: Path, store: Store) -> None:
    client, daemon = _victim_signalled(tmp_path, store)
    client.clock += 1
    client.ack(5, 40)
    client.clock += 1
    daemon.cycle()
    assert client.writes(5, "requeue") == 1
    # Slurm requeued it and, keeping its submit time, already started it again elsewhere.
    victim = client.jobs[5]
    client.jobs[5] = dataclasses.replace(
        victim,
        state=JobState.RUNNING,
        held=False,
        reason="",
        nodes=("a0", "a1"),
        start_time=client.clock + 5,
        submit_time=held_job(5).submit_time,
    )
    client.clock += 10
    daemon.cycle()
    client.clock += 1
    daemon.cycle()
    assert client.writes(5, "requeue") == 1


# -- (d) a hold is slurmopt's only for the submission it recorded -------------------------------
def test_disable_never_lifts_an_operators_hold_on_a_job_that_reuses_a_recorded_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.test_daemon import _cli_config, _run

    busy = [dataclasses.replace(n, gpus_alloc=8) for n in two_leaves()[0]]
    client = FakeSlurm(busy, [held_job(1)])
    db = f"sqlite:///{tmp_path / 'd.db'}"
    store = Store.open(db)
    _daemon(tmp_path, store, client).cycle()  # job 1 recorded waiting; no room to start
    store.close()
    # Job 1 is gone; a new job got its id, and an operator holds it.
    client.jobs[1] = held_job(1, submit_time=client.clock + 50)
    result = _run(
        ["disable", "--config", str(_cli_config(tmp_path)), "--db", db, "--json"],
        monkeypatch,
        client,
    )
    assert result.exit_code == 0, result.output
    assert client.writes(1, "release") == 0 and client.held_ids() == [1]


# -- (e) no acting on a stale snapshot ---------------------------------------------------------
def test_a_snapshot_older_than_two_intervals_is_not_acted_on(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    lag = [30.0]  # squeue answered 30 s before planning ended
    daemon = _daemon(tmp_path, store, client, lag=lag)
    result = daemon.cycle()
    assert any("old" in note for note in result.notes)
    assert client.writes_total() == 0
    lag[0] = 0.0
    client.clock += 31
    daemon.cycle()
    assert client.writes(7, "pin") == 1 and client.writes(7, "release") == 1
    assert client.writes_total() == 2


# -- (f) a hold after a pin time-out is made only while still allowed --------------------------
def test_no_hold_after_a_pin_timeout_once_the_switch_is_off(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()
    assert client.writes(7, "release") == 1  # released; Slurm never starts it
    client.clock += daemon.config.pin_timeout_s + 5
    # `slurmopt disable` lands while the daemon reads Slurm.
    client.during["snapshot"] = lambda: set_switch(store, True, "op@host", client.clock)
    daemon.cycle()
    assert client.writes(7, "hold") == 0
    record = store.managed_job(7)
    assert record is not None and record.state is S.PINNED


# -- (g) a requeue is the preemption's only when it came after the signal ------------------------
def test_a_requeue_from_before_the_signal_does_not_finish_the_preemption(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _victim_signalled(tmp_path, store)
    [row] = _rows(store)
    # Slurm had requeued the victim on its own (a node failure) 3 s before the signal.
    victim = client.jobs[5]
    client.jobs[5] = dataclasses.replace(
        victim,
        state=JobState.PENDING,
        nodes=(),
        restarts=victim.restarts + 1,
        start_time=None,
        submit_time=row.signalled_at - 3,
    )
    client.clock += 1
    daemon.cycle()
    [row] = _rows(store)
    assert row.outcome == VICTIM_ENDED != REQUEUED
