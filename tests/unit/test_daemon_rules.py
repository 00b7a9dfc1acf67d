"""One test per rule the daemon must keep under faults, each failing when its rule is broken.

``tests/mutants/`` holds a patch breaking each rule; ``python tests/mutants/run.py``
checks that every one of them makes a test here (or elsewhere) fail.
"""

from __future__ import annotations

import dataclasses
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


# -- smaller rules, each found unguarded by mutation testing (docs/testing.md) ------------------
def test_every_fenced_write_reaches_slurm_with_its_arguments() -> None:
    from slurmopt.daemon.fenced import FencedClient
    from slurmopt.slurm.base import SlurmClient

    fake = FakeSlurm(two_leaves()[0], [held_job(7)])
    assert isinstance(fake, SlurmClient)  # the shared fake is a whole client
    guarded: list[int] = []
    client = FencedClient(fake, lambda: guarded.append(1))
    client.hold(7)
    client.pin(7, ["a0"])
    client.shrink(7, 1)
    client.set_comment(7, "c", admin=False)
    client.release(7)
    client.signal(7, "USR1", batch_only=False)
    client.requeue(7, hold=False)
    client.drain("b1", "bad gpu")
    assert [c[0] for c in fake.calls] == [
        "hold",
        "pin",
        "shrink",
        "comment",
        "release",
        "signal",
        "requeue",
        "drain",
    ]
    assert fake.calls[1] == ("pin", 7, ("a0",)) and fake.calls[5] == ("signal", 7, "USR1", False)
    assert fake.calls[6] == ("requeue", 7, False) and fake.drains() == [("b1", "bad gpu")]
    assert fake.jobs[7].comment == "c" and len(guarded) == 8


def test_a_bug_in_a_cycle_leaves_a_heartbeat_that_lets_the_plugin_fail_open(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()
    assert read_heartbeat(tmp_path / "heartbeat", now=client.clock, max_age_s=30).enforcing

    def bug() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(daemon, "_cycle", bug)
    client.clock += 1
    daemon._tick()
    beat = read_heartbeat(tmp_path / "heartbeat", now=client.clock, max_age_s=30)
    assert beat.fresh and not beat.enforcing
    assert beat.heartbeat is not None and beat.heartbeat.time == int(client.clock)


def test_the_kill_switch_wins_over_a_request_to_say_enforce(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()
    set_switch(store, True, "op@host", client.clock)
    daemon.write_heartbeat(True, client.clock)
    assert not read_heartbeat(tmp_path / "heartbeat", now=client.clock, max_age_s=30).enforcing


def test_standby_says_who_holds_the_lease(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    assert _daemon(tmp_path, store, client, "host:1").cycle().mode is Mode.ENFORCING
    result = _daemon(tmp_path, store, client, "host:2").cycle()
    assert result.mode is Mode.STANDBY and "host:1" in " ".join(result.notes)


def test_switch_turned_off_during_the_starts_stops_the_rest(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7, nodes=4), held_job(8, nodes=4)])
    daemon = _daemon(tmp_path, store, client)
    client.during["pin"] = lambda: set_switch(store, True, "op@host", client.clock)
    result = daemon.cycle()
    assert client.writes_total("pin") == 1 and client.writes_total("release") == 1
    assert result.acted is not None and len(result.acted.skipped) == 1


def test_every_planner_knob_comes_from_the_config(tmp_path: Path) -> None:
    from slurmopt.policy.plan import Policy

    cfg = config(
        tmp_path,
        backfill_depth=3,
        compact_wait_share=0.25,
        reserve_one_leaf=not Policy().reserve_one_leaf,
        align_ends=not Policy().align_ends,
        elastic_starts=not Policy().elastic,
    )
    policy = Daemon.policy_for(cfg)
    assert (policy.backfill_depth, policy.compact_wait_share) == (3, 0.25)
    assert policy.reserve_one_leaf is cfg.reserve_one_leaf
    assert policy.align_ends is cfg.align_ends and policy.elastic is cfg.elastic_starts


def test_advisory_plans_only_pending_managed_gpu_jobs(tmp_path: Path, store: Store) -> None:
    jobs = [
        held_job(7),
        held_job(8, comment="", admin_comment=""),  # someone else's job, not managed
        held_job(9, gpus=0),  # asks for no GPU
    ]
    client = FakeSlurm(two_leaves()[0], jobs)
    result = _daemon(tmp_path, store, client, enforce=False).cycle()
    assert result.plan is not None
    planned = {a.job_id for a in result.plan.actions} | {u.job_id for u in result.plan.unplaced}
    assert planned == {7}


def test_the_status_record_says_the_mode_and_when_the_cycle_ran(
    tmp_path: Path, store: Store
) -> None:
    from slurmopt.daemon.status import decode

    client = FakeSlurm(two_leaves()[0], [])
    _daemon(tmp_path, store, client).cycle()
    beat = store.last_beat("daemon")
    assert beat is not None
    status = decode(beat.detail)
    assert status.mode == "enforcing" and status.cycle_at == client.clock


def test_disabled_during_the_cycle_is_reported_disabled(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    daemon = _daemon(tmp_path, store, client)
    client.during["snapshot"] = lambda: set_switch(store, True, "op@host", client.clock)
    assert daemon.cycle().mode is Mode.DISABLED
    assert client.writes_total() == 0


def test_a_refused_requeue_is_made_on_the_next_cycle_for_the_run_that_acknowledged(
    tmp_path: Path, store: Store
) -> None:
    from tests.fakes.slurm import refused

    client, daemon = _victim_signalled(tmp_path, store)
    client.fail("before:requeue", refused)
    client.clock += 1
    client.ack(5, 40)
    client.clock += 1
    daemon.cycle()
    assert client.writes(5, "requeue") == 0
    failed = {"outcome": "failed"}
    assert daemon.metrics.registry.get_sample_value("slurmopt_preemptions_total", failed) == 1
    client.clock += 1
    daemon.cycle()
    assert client.writes(5, "requeue") == 1


def test_a_requeue_that_keeps_the_submit_time_finishes_under_the_same_record(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _victim_signalled(tmp_path, store)
    submitted = client.jobs[5].submit_time
    client.clock += 1
    client.ack(5, 40)
    client.clock += 1
    daemon.cycle()
    assert client.writes(5, "requeue") == 1
    client.jobs[5] = dataclasses.replace(client.jobs[5], submit_time=submitted)  # an older Slurm
    client.clock += 1
    daemon.cycle()
    record = store.managed_job(5)
    assert record is not None and record.state is S.WAITING and record.reason == "preempted"
    assert [r.outcome for r in _rows(store)] == [REQUEUED]


def test_a_registration_the_store_refuses_is_made_on_the_next_cycle(
    tmp_path: Path, store: Store
) -> None:
    from tests.fakes.slurm import refused

    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    client.attach(store)
    client.fail("before-record:register", refused)
    daemon = _daemon(tmp_path, store, client)
    result = daemon.cycle()
    assert result.reconciled is not None and result.reconciled.registered == []
    assert any("not registered" in line for line in result.reconciled.lines)
    assert store.managed_job(7) is None and client.writes_total() == 0
    client.clock += 1
    daemon.cycle()
    assert client.writes(7, "pin") == 1 and client.writes(7, "release") == 1


def test_a_job_slurm_started_elsewhere_is_recorded_where_it_runs(
    tmp_path: Path, store: Store
) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7, nodes=2)])
    client.occupy(["a0", "a1", "a2", "a3", "b0", "b1", "b2"])
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()  # recorded waiting: no room
    client.release(7)  # an operator releases it; Slurm runs it on b3 and a2
    client.end(102)
    client._set(7, required_nodes=("a2", "b3"))
    client.start(7)
    client.clock += 1
    daemon.cycle()
    record = store.managed_job(7)
    assert record is not None and record.state is S.RUNNING and record.nodes == "a2,b3"


def test_an_unwritable_heartbeat_makes_the_daemon_degraded(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    daemon = _daemon(tmp_path, store, client, heartbeat_path=str(tmp_path / "no" / "heartbeat"))
    result = daemon.cycle()
    client.clock += 1
    result = daemon.cycle()
    assert result.mode is Mode.DEGRADED
    assert any("cannot write heartbeat" in reason for reason in daemon.reasons)


def test_every_decision_is_logged_with_its_nodes(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    with caplog.at_level("INFO", logger="slurmopt.daemon.loop"):
        _daemon(tmp_path, store, client).cycle()
    assert "plan (enforcing): job 7: start on a0 [" in caplog.text


def test_the_slurm_release_that_answers_is_logged_once(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    read = client.snapshot
    monkeypatch.setattr(
        client, "snapshot", lambda: dataclasses.replace(read(), slurm_version="24.11.5")
    )
    daemon = _daemon(tmp_path, store, client)
    with caplog.at_level("INFO", logger="slurmopt.daemon.loop"):
        daemon.cycle()
        client.clock += 1
        daemon.cycle()
    assert caplog.text.count("Slurm 24.11.5 answers") == 1


def test_a_refused_hand_back_says_why(tmp_path: Path, store: Store) -> None:
    from tests.fakes.slurm import refused

    client = FakeSlurm(two_leaves()[0], [held_job(7, het_job_id=7)])
    client.fail("before:release", refused, job_id=7)
    result = _daemon(tmp_path, store, client).cycle()
    assert result.acted is not None and "fake refusal" in result.acted.failed[7]
    assert client.writes_total() == 0


def test_only_gpu_jobs_that_are_not_heterogeneous_must_carry_the_plugins_stamp() -> None:
    from slurmopt.daemon.proof import STAMP_GRACE_S, StampWatch
    from slurmopt.model import ClusterSnapshot, Job

    watch = StampWatch()
    watch.wrote(1, 100.0, True)
    submitted = 100.0 + STAMP_GRACE_S + 1

    def verdict(job: Job) -> str | None:
        return watch.check(ClusterSnapshot.build(200.0, [], [job], []), ["gpu"])

    unstamped = held_job(7, admin_comment="", submit_time=submitted)
    assert verdict(unstamped) is not None
    assert verdict(held_job(8, gpus=0, admin_comment="", submit_time=submitted)) is None
    assert verdict(held_job(9, het_job_id=9, admin_comment="", submit_time=submitted)) is None


def test_a_plain_text_status_from_an_older_daemon_keeps_its_mode() -> None:
    from slurmopt.daemon.status import decode

    assert decode("enforcing: 1 starts planned").mode == "enforcing"
    assert decode("what is this").mode == "unknown"


def test_preflight_refuses_a_plugin_that_reads_another_heartbeat(tmp_path: Path) -> None:
    from slurmopt.daemon.proof import preflight
    from slurmopt.errors import ConfigError
    from slurmopt.plugin import read_source, render_plugin

    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=t\n")
    env = {"SLURM_CONF": str(etc / "slurm.conf")}
    heartbeat = str(tmp_path / "run" / "heartbeat")
    (etc / "job_submit.lua").write_text(render_plugin(read_source(), "/elsewhere/hb", 30))
    with pytest.raises(ConfigError, match="reads heartbeat /elsewhere/hb"):
        preflight(heartbeat, None, env=env)
    (etc / "job_submit.lua").write_text(render_plugin(read_source(), heartbeat, 30))
    preflight(heartbeat, None, env=env)
