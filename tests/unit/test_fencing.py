"""Fencing: a daemon that lost the lease mid-cycle acts on nothing more, and the store agrees.

The lease and fencing tests run on a SQLite file and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from slurmopt.daemon.heartbeat import read_heartbeat
from slurmopt.daemon.loop import LEASE_NAME, Daemon, Mode
from slurmopt.daemon.proof import StampWatch, preflight, prepare_heartbeat_dir
from slurmopt.errors import ConfigError
from slurmopt.model import ClusterSnapshot
from slurmopt.store import LeaseLost, ManagedJobState, Store, history
from tests.fakes.slurm import NOW, FakeSlurm
from tests.unit.test_daemon import _daemon as daemon_on
from tests.unit.test_daemon_fakes import held_job, two_leaves


def _daemon(
    tmp_path: Path, client: FakeSlurm, holder: str, url: str | None = None, **kw: Any
) -> Daemon:
    """A daemon with its own connection to the one database, as two processes would have."""
    store = Store.open(url or f"sqlite:///{tmp_path / 'd.db'}")
    return daemon_on(tmp_path, store, client, holder, **kw)


def test_a_leader_paused_in_a_slow_scontrol_stops_at_its_next_write(
    tmp_path: Path, store_url: str
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    first = _daemon(tmp_path, client, "host:1", store_url)
    second = _daemon(tmp_path, client, "host:2", store_url)
    assert first.cycle().mode is Mode.ENFORCING
    client.jobs[7] = held_job(7)
    client.jobs[8] = held_job(8)

    def paused() -> None:
        # The first daemon's pin of job 7 takes longer than its lease; the second takes over.
        client.clock += first.lease_ttl_s + 1
        assert second.cycle().mode is Mode.ENFORCING

    client.during["pin"] = paused
    result = first.cycle()
    assert result.mode is Mode.STANDBY and result.error and "no longer held" in result.error
    # The old leader's pin of job 7 landed late; the new leader finishes that decision.
    client.clock += 1
    second.cycle()
    for job_id in (7, 8):
        assert client.count("pin", job_id) == 1, client.calls
        assert client.count("release", job_id) == 1, client.calls
    # The store agrees with Slurm: each job pinned once, recorded once, by the new leader.
    for job_id in (7, 8):
        with second.store.begin() as session:
            pins = [t for t in history(session, job_id) if t.to_state is ManagedJobState.PINNED]
        assert len(pins) == 1
    lease = second.store.lease(LEASE_NAME)
    assert lease is not None and lease.holder == "host:2" and lease.token == 2
    # The old leader never writes the heartbeat again, not even when it stops.
    first.shutdown(notify_systemd=False)
    assert read_heartbeat(tmp_path / "heartbeat", now=client.clock, max_age_s=30).enforcing


@pytest.mark.parametrize("pause_in", ["snapshot", "register"])
def test_a_leader_paused_where_it_writes_nothing_to_slurm_still_stops(
    tmp_path: Path, store_url: str, pause_in: str
) -> None:
    """Paused after its snapshot, or before registering a new job: it plans and writes nothing."""
    client = FakeSlurm(two_leaves()[0], [])
    first = _daemon(tmp_path, client, "host:1", store_url)
    second = _daemon(tmp_path, client, "host:2", store_url)
    assert first.cycle().mode is Mode.ENFORCING
    if pause_in == "register":  # a new job under the plugin's hold, seen by the first only
        client.jobs[7] = held_job(7, reason="JobHeldUser")
    read = client.snapshot
    seen: dict[str, Any] = {}

    def paused() -> ClusterSnapshot:
        snapshot = read()
        client.snapshot = read  # type: ignore[method-assign]
        client.clock += first.lease_ttl_s + 1
        hidden = client.jobs.pop(7, None)
        assert second.cycle().mode is Mode.ENFORCING
        if hidden is not None:
            client.jobs[7] = hidden
        seen["heartbeat"] = (tmp_path / "heartbeat").read_text()
        seen["status"] = second.store.last_beat("daemon")
        seen["plan"] = second.store.latest_plan()
        return snapshot

    client.snapshot = paused  # type: ignore[method-assign]
    result = first.cycle()
    assert result.mode is Mode.STANDBY and result.error and "no longer held" in result.error
    assert first.fence is None
    # The new leader's heartbeat, status record and last plan are the last ones written.
    assert (tmp_path / "heartbeat").read_text() == seen["heartbeat"]
    status = second.store.last_beat("daemon")
    assert status is not None and status.holder == seen["status"].holder == "host:2"
    plan = second.store.latest_plan()
    assert plan is not None and plan.id == seen["plan"].id
    assert client.count("hold", 7) == 0 and second.store.managed_job(7) is None


def test_a_leader_back_after_another_held_the_lease_is_not_degraded_by_its_stamps(
    tmp_path: Path,
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    first = _daemon(tmp_path, client, "host:1", managed_partitions=("gpu",))
    second = _daemon(tmp_path, client, "host:2", managed_partitions=("gpu",))
    assert first.cycle().mode is Mode.ENFORCING
    client.clock += first.lease_ttl_s + 1  # the first pauses past its lease
    assert second.cycle().mode is Mode.ENFORCING
    assert first.cycle().mode is Mode.STANDBY
    # A job the plugin stamps with the second daemon's heartbeat, which then stops.
    client.clock += 5
    seq = second.stamps.last_seq
    client.jobs[9] = held_job(
        9, admin_comment=f"slurmopt:managed,held,hb={seq}", submit_time=client.clock
    )
    client.clock += 1
    assert second.cycle().mode is Mode.ENFORCING
    second.shutdown(notify_systemd=False)
    client.clock += 1
    assert first.cycle().mode is Mode.ENFORCING, first.reasons


def test_a_transition_under_a_stale_token_is_refused(tmp_path: Path, store_url: str) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    first = _daemon(tmp_path, client, "host:1", store_url)
    first.cycle()
    # The guard extends the lease it checks.
    client.clock += first.lease_ttl_s - 1
    first.store.guard()
    lease = first.store.lease(LEASE_NAME)
    assert lease is not None and lease.expires_at == client.clock + first.lease_ttl_s
    client.clock += first.lease_ttl_s + 1
    assert first.store.acquire_token(LEASE_NAME, "host:2", 30, client.clock) == 2
    with pytest.raises(LeaseLost):
        first.store.guard()
    from slurmopt.daemon.reconcile import live_records, move

    record = live_records(first.store)[0]
    with pytest.raises(LeaseLost):
        move(first.store, record, ManagedJobState.DONE, "end", "x", "", client.clock)


def test_standby_and_advisory_daemons_never_touch_the_heartbeat(
    tmp_path: Path, store_url: str
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    leader = _daemon(tmp_path, client, "host:1", store_url)
    standby = _daemon(tmp_path, client, "host:2", store_url)
    advisory = _daemon(tmp_path, client, "host:3", store_url, enforce=False)
    leader.cycle()
    before = (tmp_path / "heartbeat").read_text()
    assert standby.cycle().mode is Mode.STANDBY
    assert advisory.cycle().mode is Mode.ADVISORY
    standby.shutdown(notify_systemd=False)
    advisory.shutdown(notify_systemd=False)
    assert (tmp_path / "heartbeat").read_text() == before


def test_a_lost_plugin_makes_the_daemon_degraded_and_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    daemon = _daemon(tmp_path, client, "host:1", managed_partitions=("gpu",))
    assert daemon.cycle().mode is Mode.ENFORCING
    client.clock += 10
    # A GPU job in a managed partition arrives untouched by the plugin.
    client.jobs[9] = held_job(9, admin_comment="", reason="Resources", submit_time=client.clock)
    for _ in range(3):
        client.clock += 1
        assert daemon.cycle().mode is Mode.DEGRADED
    assert "job 9" in daemon.reasons[0]
    assert sum("degraded:" in r.message for r in caplog.records) == 1
    # The plugin works again: the newest job carries this daemon's stamp.
    seq = daemon.stamps.last_seq
    client.jobs[10] = held_job(
        10, admin_comment=f"slurmopt:managed,held,hb={seq}", submit_time=client.clock + 1
    )
    client.clock += 2
    assert daemon.cycle().mode is Mode.ENFORCING
    assert daemon.stamps.seen == seq


def test_live_configuration_without_the_plugin_is_degraded(tmp_path: Path) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    client.live_config = {"JobSubmitPlugins": "(null)"}
    daemon = _daemon(tmp_path, client, "host:1")
    assert daemon.cycle().mode is Mode.DEGRADED
    assert "JobSubmitPlugins=(null)" in daemon.reasons[0]
    with pytest.raises(ConfigError, match="does not load the job-submit plugin"):
        daemon.preflight()


def test_stamp_watch_tells_ours_from_foreign_and_missing() -> None:
    watch = StampWatch()
    seq = watch.next_seq(NOW)
    watch.wrote(seq, NOW, True)

    def snap(admin: str, comment: str = "slurmopt:managed") -> ClusterSnapshot:
        job = held_job(1, comment=comment, admin_comment=admin, submit_time=NOW + 5)
        return ClusterSnapshot.build(NOW + 6, [], [job], [])

    assert watch.check(snap(f"slurmopt:managed,held,hb={seq}"), ["gpu"]) is None
    assert watch.seen == seq
    assert "did not write" in (watch.check(snap("slurmopt:managed,held,hb=5"), ["gpu"]) or "")
    assert "not tagged" in (watch.check(snap(""), ["gpu"]) or "")
    assert watch.check(snap("", comment=""), []) is None  # not a job the plugin had to take
    watch.wrote(watch.next_seq(NOW + 7), NOW + 7, False)
    assert watch.check(snap(""), ["gpu"]) is None  # not enforcing: nothing to prove


def test_preflight_refuses_a_heartbeat_directory_others_can_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match="writable by group or others"):
        preflight(str(shared / "heartbeat"), {"JobSubmitPlugins": "lua"}, env={})
    made = tmp_path / "new" / "dir"
    assert prepare_heartbeat_dir(str(made / "heartbeat")) is None
    assert stat.S_IMODE(made.stat().st_mode) == 0o755
    os.mkfifo(made / "heartbeat")
    assert "not a regular file" in (prepare_heartbeat_dir(str(made / "heartbeat")) or "")


def test_the_test_hook_is_inert_unless_set_and_fires_once_at_its_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import signal

    import slurmopt.daemon.fenced as fenced

    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    fake = FakeSlurm(two_leaves()[0], [held_job(7)])
    monkeypatch.delenv(fenced.HOOK_ENV, raising=False)
    fenced.FencedClient(fake, lambda: None).pin(7, ["a0"])
    for bad in ("kill", "kill@", "boom@before:pin", "kill@during:pin"):
        monkeypatch.setenv(fenced.HOOK_ENV, bad)
        fenced.FencedClient(fake, lambda: None).pin(7, ["a0"])
    assert sent == []
    monkeypatch.setenv(fenced.HOOK_ENV, "stop@after:pin")
    client = fenced.FencedClient(fake, lambda: None)
    client.release(7)
    assert sent == []
    client.pin(7, ["a1"])
    assert sent == [(os.getpid(), signal.SIGSTOP)] and fake.writes(7, "pin") == 6
    client.pin(7, ["a2"])  # once per process
    assert len(sent) == 1


def test_the_daemon_refuses_to_run_as_another_user_than_daemon_user(tmp_path: Path) -> None:
    import pwd

    from slurmopt.daemon.proof import wrong_user

    me = pwd.getpwuid(os.geteuid()).pw_name
    assert wrong_user("") is None and wrong_user(me) is None
    assert "daemon_user is slurm-nobody-here" in (wrong_user("slurm-nobody-here") or "")


def test_the_reconciler_reads_the_lease_once_per_hold(tmp_path: Path) -> None:
    """The fenced write checks the lease; the reconciler's own check must not read it again."""
    client = FakeSlurm(two_leaves()[0], [])
    daemon = _daemon(tmp_path, client, "host:1")
    assert daemon.cycle().mode is Mode.ENFORCING
    for job_id in (7, 8, 9):  # under the plugin's hold, to be made admin holds
        client.jobs[job_id] = held_job(job_id, nodes=3, reason="JobHeldUser")
    events: list[str] = []
    guard = daemon.store.guard
    hold = client.hold

    def counted_guard() -> None:
        events.append("guard")
        guard()

    def counted_hold(job_id: int) -> None:
        events.append("hold")
        hold(job_id)

    daemon.store.guard = counted_guard  # type: ignore[method-assign]
    daemon.client.guard = counted_guard  # type: ignore[attr-defined]
    client.hold = counted_hold  # type: ignore[method-assign]
    daemon.cycle()
    assert events.count("hold") == 3, client.calls
    # Each hold is preceded by exactly one lease read since the one before it.
    between = "".join("g" if e == "guard" else "|" for e in events).split("|")
    assert between[1:3] == ["g", "g"], events
