"""The daemon's cycle: modes, lease, back-off, kill switch, heartbeat, priorities and the CLI."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from slurmopt.cli import cli
from slurmopt.daemon.heartbeat import read_heartbeat, write_heartbeat
from slurmopt.daemon.loop import BEAT_NAME, LEASE_NAME, Daemon, Mode
from slurmopt.daemon.managed import is_managed, planning_priorities, plugin_held
from slurmopt.daemon.status import decode
from slurmopt.daemon.switch import read_switch, set_switch
from slurmopt.model import Job, JobState
from slurmopt.store import ManagedJob, Store
from tests.fakes.slurm import NOW, FakeSlurm
from tests.unit.test_daemon_fakes import SUBMIT, TAG, config, held_job, node, two_leaves


def _daemon(
    tmp_path: Path, store: Store, client: FakeSlurm, holder: str = "host:1", **kw: Any
) -> Daemon:
    _, fabric = two_leaves()
    return Daemon(
        config(tmp_path, **kw),
        client,
        store,
        holder=holder,
        clock=lambda: client.clock,
        fabric_loader=lambda _c, _s: fabric,
    )


def _heartbeat(tmp_path: Path, client: FakeSlurm) -> bool:
    status = read_heartbeat(tmp_path / "heartbeat", now=client.clock, max_age_s=30)
    assert status.fresh, status.reason
    return status.enforcing


def test_advisory_mode_plans_and_records_but_changes_nothing(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7), held_job(8, gpus=2)])
    daemon = _daemon(tmp_path, store, client, enforce=False)
    result = daemon.cycle()
    assert result.mode is Mode.ADVISORY
    assert result.plan is not None and {a.job_id for a in result.plan.actions} == {7, 8}
    assert client.calls == []
    assert result.plan_id is not None and len(store.decisions(result.plan_id)) == 2
    assert len(store.fragmentation_history()) == 1
    # An advisory daemon never writes the heartbeat: only the enforcer owns that file.
    assert not (tmp_path / "heartbeat").exists()
    with store.begin() as session:
        assert session.get(ManagedJob, 7) is None  # advisory daemons manage nothing


def test_enforcing_daemon_acts_and_says_so_in_the_heartbeat(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    result = _daemon(tmp_path, store, client).cycle()
    assert result.mode is Mode.ENFORCING
    assert client.writes(7, "pin") == 1 and client.writes(7, "release") == 1
    assert client.writes_total() == 2
    assert _heartbeat(tmp_path, client) is True
    beat = store.last_beat(BEAT_NAME)
    assert beat is not None
    status = decode(beat.detail)
    assert status.mode == "enforcing" and status.reasons == ()
    assert status.summary.startswith("1 starts planned, 1 made")
    assert status.fencing_token == 1 and status.heartbeat_seq is not None


def test_second_daemon_is_standby_until_the_lease_is_free(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    first = _daemon(tmp_path, store, client, holder="host:1")
    second = _daemon(tmp_path, store, client, holder="host:2")
    assert first.cycle().mode is Mode.ENFORCING
    client.jobs[8] = held_job(8)
    assert second.cycle().mode is Mode.STANDBY
    assert client.count("pin", 8) == 0
    first.shutdown(notify_systemd=False)  # a clean stop gives the lease up at once
    assert _heartbeat(tmp_path, client) is False
    assert second.cycle().mode is Mode.ENFORCING
    assert client.count("pin", 8) == 1
    lease = store.lease(LEASE_NAME)
    assert lease is not None and lease.holder == "host:2"


def test_lease_of_a_dead_daemon_is_taken_over_when_it_expires(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    first = _daemon(tmp_path, store, client, holder="host:1")
    second = _daemon(tmp_path, store, client, holder="host:2")
    first.cycle()  # then it dies without releasing the lease
    client.clock += 5
    assert second.cycle().mode is Mode.STANDBY
    client.clock += first.lease_ttl_s
    assert second.cycle().mode is Mode.ENFORCING


def test_unreachable_slurm_acts_on_nothing_backs_off_and_resumes(
    tmp_path: Path, store: Store
) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    daemon = _daemon(tmp_path, store, client, interval_s=2.0)
    client.down = True
    delays = []
    for _ in range(6):
        result = daemon.cycle()
        assert result.mode is Mode.UNAVAILABLE
        delays.append(daemon.retry_at - client.clock)
        assert _heartbeat(tmp_path, client) is False
        if len(delays) < 6:
            client.clock = daemon.retry_at
    assert delays == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    beat = store.last_beat(BEAT_NAME)
    assert beat is not None and "acting on nothing" in beat.detail
    assert client.calls == []
    client.down = False
    client.clock += 1  # still backing off: Slurm is not even asked
    assert daemon.cycle().mode is Mode.UNAVAILABLE
    client.clock = daemon.retry_at
    assert daemon.cycle().mode is Mode.ENFORCING
    assert client.count("release", 7) == 1
    assert daemon.failures == 0


def test_kill_switch_makes_the_daemon_advisory_until_enabled(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    daemon = _daemon(tmp_path, store, client)
    set_switch(store, True, "ops@ctl")
    assert daemon.cycle().mode is Mode.DISABLED
    assert client.calls == [] and _heartbeat(tmp_path, client) is False
    set_switch(store, False, "ops@ctl")
    assert daemon.cycle().mode is Mode.ENFORCING
    assert client.count("release", 7) == 1


def test_held_jobs_keep_submit_order_when_priorities_are_unknown(
    tmp_path: Path, store: Store
) -> None:
    nodes = [node("a0")] + [node(f"x{i}", alloc=8) for i in range(7)]
    early = held_job(9, submit_time=SUBMIT)  # higher id, submitted first
    late = held_job(3, submit_time=SUBMIT + 50)
    client = FakeSlurm(nodes, [late, early])
    _daemon(tmp_path, store, client).cycle()
    assert client.count("pin", 9) == 1 and client.count("pin", 3) == 0


def test_planning_priorities() -> None:
    held = held_job(1)
    free = Job(2, JobState.PENDING, priority=500, comment=TAG)
    assert planning_priorities([free], {}) == {2: 500}
    assert planning_priorities([held, free], {1: 900}) == {1: 900, 2: 500}
    assert planning_priorities([held, free], {}) == {1: 0, 2: 0}


def test_which_jobs_are_managed() -> None:
    plain = Job(1, JobState.PENDING, partition="gpu")
    assert not is_managed(plain)
    assert is_managed(plain, ["gpu"]) and is_managed(plain, ["*"])
    assert is_managed(Job(2, JobState.PENDING, partition="cpu,gpu"), ["gpu"])
    assert is_managed(Job(3, JobState.PENDING, admin_comment="slurmopt:managed | waits: x"))
    assert not is_managed(Job(4, JobState.PENDING, admin_comment="slurmopt:bogus"))
    # The owner's own comment grants nothing, however it is tagged.
    assert not is_managed(Job(7, JobState.PENDING, comment="slurmopt:managed,held"))
    assert not plugin_held(Job(8, JobState.PENDING, comment="slurmopt:managed,held"))
    assert plugin_held(Job(5, JobState.PENDING, admin_comment="slurmopt:managed,held | x"))
    assert not plugin_held(Job(6, JobState.PENDING, admin_comment="slurmopt:managed | held"))


# -- the CLI ---------------------------------------------------------------------------------
def _run(args: list[str], monkeypatch: pytest.MonkeyPatch, client: FakeSlurm) -> Any:
    from click.testing import CliRunner

    import slurmopt.cli.daemon as daemon_cli

    monkeypatch.setattr(daemon_cli, "_connect", lambda _ctx, _cfg: client)
    monkeypatch.delenv("SLURMOPT_CONFIG", raising=False)
    monkeypatch.delenv("SLURMOPT_DB", raising=False)
    # No site files: the fabric must come from the fake client, not a real slurm.conf's directory.
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurmopt-unit-test/slurm.conf")
    return CliRunner().invoke(cli, args)


def _cli_config(tmp_path: Path) -> Path:
    path = tmp_path / "slurmopt.toml"
    path.write_text(f'heartbeat_path = "{tmp_path / "heartbeat"}"\ninterval_s = 1\n')
    return path


def test_disable_releases_only_slurmopt_holds_and_stops_enforcement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [
        held_job(1, comment="slurmopt:managed,held"),
        held_job(2),
        held_job(3, reason="JobHeldUser", admin_comment="slurmopt:managed"),  # owner's hold
        held_job(4, comment=""),  # an operator's hold on an untagged job
        Job(5, JobState.RUNNING, comment=TAG),
        held_job(6, reason="JobHeldUser", comment="slurmopt:managed,held"),
        # An operator's hold on a job whose owner tagged its comment afterwards.
        held_job(7, comment="slurmopt:managed,held", admin_comment=""),
    ]
    busy = [dataclasses.replace(n, gpus_alloc=8) for n in two_leaves()[0]]
    client = FakeSlurm(busy, jobs)
    db = f"sqlite:///{tmp_path / 'd.db'}"
    store = Store.open(db)
    _daemon(tmp_path, store, client).cycle()  # registers what the plugin held; no room to start
    store.close()
    assert client.held_ids() == [1, 2, 4, 6, 7]  # 6: the plugin's hold made an admin hold
    conf = str(_cli_config(tmp_path))
    result = _run(["disable", "--config", conf, "--db", db, "--json"], monkeypatch, client)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["released"] == [1, 2, 6] and out["disabled"] is True
    assert client.held_ids() == [4, 7]
    assert client.jobs[3].reason == "JobHeldUser"
    status = read_heartbeat(tmp_path / "heartbeat", max_age_s=30)
    assert status.fresh and not status.enforcing
    store = Store.open(db)
    assert read_switch(store).disabled
    result = _run(["enable", "--config", conf, "--db", db], monkeypatch, client)
    assert result.exit_code == 0
    assert not read_switch(store).disabled
    store.close()


def test_disable_with_slurm_down_still_flips_the_switch_and_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(1)])
    client.down = True
    db = f"sqlite:///{tmp_path / 'd.db'}"
    Store.open(db).close()  # the daemon made the store earlier
    conf = str(_cli_config(tmp_path))
    with pytest.raises(SystemExit) as exc:
        import slurmopt.cli.daemon as daemon_cli
        from slurmopt.cli import main

        monkeypatch.setattr(daemon_cli, "_connect", lambda _ctx, _cfg: client)
        main(["disable", "--config", conf, "--db", db])
    assert exc.value.code == 69
    store = Store.open(db)
    assert read_switch(store).disabled
    store.close()
    assert not read_heartbeat(tmp_path / "heartbeat", max_age_s=30).enforcing


def test_disable_without_a_store_still_writes_the_heartbeat_and_says_why_it_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from slurmopt.cli import main

    db = tmp_path / "none" / "d.db"
    conf = str(_cli_config(tmp_path))
    write_heartbeat(tmp_path / "heartbeat", True)
    with pytest.raises(SystemExit) as exc:
        main(["disable", "--config", conf, "--db", f"sqlite:///{db}"])
    assert exc.value.code == 74
    assert "no slurmopt store" in capsys.readouterr().err
    assert not db.exists() and not db.parent.exists()  # only the daemon creates the store
    assert not read_heartbeat(tmp_path / "heartbeat", max_age_s=30).enforcing


def test_the_daemon_creates_its_store_private_to_its_group(tmp_path: Path) -> None:
    db = tmp_path / "var" / "d.db"
    Store.open(f"sqlite:///{db}", create=True).close()
    assert oct(db.parent.stat().st_mode & 0o7777) == oct(0o2750)
    assert oct(db.stat().st_mode & 0o777) == oct(0o640)


def test_daemon_once_in_advisory_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(1)])
    client.clock = NOW
    db = f"sqlite:///{tmp_path / 'd.db'}"
    conf = str(_cli_config(tmp_path))
    result = _run(["daemon", "--config", conf, "--db", db, "--once"], monkeypatch, client)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("advisory: 1 starts planned, 0 made")
    assert client.calls == []


def test_daemon_once_with_slurm_down_exits_69(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = FakeSlurm(two_leaves()[0], [])
    client.down = True
    import slurmopt.cli.daemon as daemon_cli
    from slurmopt.cli import main

    monkeypatch.setattr(daemon_cli, "_connect", lambda _ctx, _cfg: client)
    # No site's slurm.conf (and so no installed plugin reading another heartbeat) in sight.
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurmopt-unit-test/slurm.conf")
    db = f"sqlite:///{tmp_path / 'd.db'}"
    with pytest.raises(SystemExit) as exc:
        main(["daemon", "--config", str(_cli_config(tmp_path)), "--db", db, "--once", "--enforce"])
    assert exc.value.code == 69
    assert "unreachable" in capsys.readouterr().err.splitlines()[-1]


def test_cycle_and_shutdown_speak_the_systemd_notify_protocol(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """READY once after the first good cycle, WATCHDOG every cycle, STOPPING on shutdown."""
    import socket

    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    try:
        client = FakeSlurm(two_leaves()[0], [held_job(7)])
        daemon = _daemon(tmp_path, store, client)
        daemon.cycle()
        daemon.cycle()
        daemon.shutdown()
        sock.setblocking(False)
        messages = []
        while True:
            try:
                messages.append(sock.recv(4096).decode())
            except BlockingIOError:
                break
    finally:
        sock.close()
    lines = [line for m in messages for line in m.splitlines()]
    assert lines.count("READY=1") == 1
    assert lines.count("WATCHDOG=1") == 2
    assert "STOPPING=1" in lines
    assert lines.index("READY=1") > lines.index("WATCHDOG=1")  # ready only after a cycle ran


SLOW_STOP = r"""
import logging, sys, time
from pathlib import Path
import slurmopt.daemon.loop as loop
from slurmopt.daemon.loop import Daemon
from slurmopt.store import Store
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_daemon_fakes import config, two_leaves

tmp = Path(sys.argv[1])
nodes, fabric = two_leaves()
logging.basicConfig(level=logging.INFO)
client = FakeSlurm(nodes, [])
client.clock = time.time()
daemon = Daemon(config(tmp), client, Store.open(f"sqlite:///{tmp / 'd.db'}"),
                holder="host:1", fabric_loader=lambda _c, _s: fabric)
real = loop.write_heartbeat
def slow(*args, **kw):
    if daemon.stopping.is_set():
        print("stopping", flush=True)
        time.sleep(1.5)  # the stop is under way: a second signal lands here
    return real(*args, **kw)
loop.write_heartbeat = slow
print("ready", flush=True)
daemon.run_forever()
print("stopped cleanly", flush=True)
"""


def test_a_second_signal_during_the_stop_does_not_kill_it(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_STOP, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline().strip() == "stopping"
    proc.send_signal(signal.SIGTERM)  # inside the stop
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped cleanly" in out
    assert "already stopping" in err
