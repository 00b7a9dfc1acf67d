"""The daemon's preemption state machine against an in-memory fake of Slurm."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from slurmopt.daemon.loop import Daemon
from slurmopt.daemon.preempt import (
    CANCELLED,
    REQUEUE_ANYWAY,
    REQUEUED,
    REQUEUED_WITHOUT_ACK,
    PreemptionSettings,
)
from slurmopt.errors import ConfigError
from slurmopt.model import Job, JobState
from slurmopt.store import ManagedJobState, Preemption, Store
from tests.fakes.slurm import FakeCrash, FakeSlurm
from tests.unit.test_daemon_fakes import config, held_job, two_leaves

PRE = "slurmopt:managed,preemptible"
GRACE = 30.0



def _daemon(
    tmp_path: Path,
    store: Store,
    client: FakeSlurm,
    settings: PreemptionSettings | None = None,
) -> Daemon:
    _, fabric = two_leaves()
    daemon = Daemon(
        config(tmp_path),
        client,
        store,
        holder="host:1",
        clock=lambda: client.clock,
        fabric_loader=lambda _c, _s: fabric,
    )
    daemon.preempter.settings = settings or PreemptionSettings(grace_s=GRACE)
    return daemon


def _plain(job_id: int, nodes: tuple[str, ...], clock: float) -> Job:
    return Job(
        job_id=job_id,
        state=JobState.RUNNING,
        partition="gpu",
        nodes=nodes,
        node_count=len(nodes),
        gpus_per_node=8,
        start_time=clock - 10,
        time_limit_s=3600,
        submit_time=clock - 20,
    )


def _full_cluster_with_victim(tmp_path: Path, store: Store) -> tuple[FakeSlurm, Daemon]:
    """A managed preemptible 2-node job running on a0,a1; every other node busy."""
    nodes, _ = two_leaves()
    client = FakeSlurm(nodes, [held_job(5, nodes=2, comment=PRE)])
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()
    client.start(5)
    others = [n for n in client.nodes if n not in client.jobs[5].nodes]
    for i, name in enumerate(others):
        client.jobs[100 + i] = _plain(100 + i, (name,), client.clock)
        client.nodes[name] = dataclasses.replace(client.nodes[name], gpus_alloc=8)
    client.clock += 1
    daemon.cycle()
    assert _state(store, 5) is ManagedJobState.RUNNING
    client.jobs[9] = held_job(9, nodes=2)  # the higher-priority (not preemptible) job
    return client, daemon


def _state(store: Store, job_id: int) -> ManagedJobState:
    record = store.managed_job(job_id)
    assert record is not None
    return record.state


def _rows(store: Store) -> list[Any]:
    with store.begin() as session:
        rows = session.scalars(select(Preemption).order_by(Preemption.id)).all()
        session.expunge_all()
    return list(rows)


def test_signal_ack_requeue_then_the_preemptor_starts(tmp_path: Path, store: Store) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    client.clock += 1
    result = daemon.cycle()
    assert result.acted is not None and result.acted.signalled == [5]
    assert client.calls[-1] == ("signal", 5, "USR2", True)
    assert _state(store, 5) is ManagedJobState.SIGNALLED
    [row] = _rows(store)
    assert row.for_job_id == 9 and row.outcome is None and row.signal == "USR2"

    client.clock += 1
    daemon.cycle()  # no ack yet: nothing more, and no second signal
    assert client.count("signal", 5) == 1 and client.count("requeue", 5) == 0

    client.clock += 2
    client.ack(5, 120)
    client.clock += 1
    daemon.cycle()
    assert client.count("requeue", 5) == 1
    assert _state(store, 5) is ManagedJobState.CHECKPOINTED
    client.clock += 1
    daemon.cycle()
    assert _state(store, 5) is ManagedJobState.WAITING
    [row] = _rows(store)
    assert row.outcome == REQUEUED and row.checkpoint_step == 120
    assert row.lost_gpu_seconds == pytest.approx(2 * 16)  # idle since the ack
    assert client.count("pin", 9) == 1  # the preemptor got the freed nodes
    assert set(client.jobs[9].required_nodes) == {"a0", "a1"}
    client.clock += 1
    daemon.cycle()
    assert client.count("requeue", 5) == 1 and client.count("signal", 5) == 1
    # The preemption is counted, and the time to its acknowledgement observed.
    registry = daemon.metrics.registry
    assert registry.get_sample_value("slurmopt_preemptions_total", {"outcome": "acknowledged"}) == 1
    assert registry.get_sample_value("slurmopt_checkpoint_ack_seconds_count") == 1


def test_a_restart_after_recording_the_signal_finishes_the_preemption_once(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    client.crash_on = "signal"
    client.clock += 1
    with pytest.raises(FakeCrash):
        daemon.cycle()
    assert _state(store, 5) is ManagedJobState.SIGNALLED  # recorded before the call
    assert client.count("signal", 5) == 0
    client.clock += 11  # the dead daemon's lease runs out
    restarted = _daemon(tmp_path, store, client)
    restarted.cycle()
    assert client.count("signal", 5) == 1  # sent by the new daemon, once
    client.clock += 1
    restarted.cycle()
    assert client.count("signal", 5) == 1
    client.ack(5, 7)
    client.clock += 1
    restarted.cycle()
    client.clock += 1
    again = _daemon(tmp_path, store, client)  # and a second restart after the requeue
    again.preempter._sent.update(r.id for r in _rows(store))
    again.cycle()
    again.cycle()
    assert client.count("requeue", 5) == 1
    assert [r.outcome for r in _rows(store)] == [REQUEUED]


def test_no_ack_keeps_the_victim_running_and_records_cancelled(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    client.clock += 1
    daemon.cycle()
    assert client.count("signal", 5) == 1
    client.clock += GRACE + 1
    result = daemon.cycle()
    assert result.preempted is not None and result.preempted.cancelled == [5]
    assert _state(store, 5) is ManagedJobState.RUNNING
    assert client.jobs[5].state is JobState.RUNNING
    assert client.count("requeue", 5) == 0
    [row] = _rows(store)
    assert row.outcome == CANCELLED
    client.clock += 1
    daemon.cycle()
    assert client.count("signal", 5) == 1  # not chosen again


def test_requeue_anyway_is_opt_in(tmp_path: Path, store: Store) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    daemon.preempter.settings = PreemptionSettings(grace_s=GRACE, on_no_ack=REQUEUE_ANYWAY)
    client.clock += 1
    daemon.cycle()
    client.clock += GRACE + 1
    daemon.cycle()
    client.clock += 1
    daemon.cycle()
    assert client.count("requeue", 5) == 1
    [row] = _rows(store)
    assert row.outcome == REQUEUED_WITHOUT_ACK and row.lost_gpu_seconds > 0


def test_an_ack_from_before_the_signal_does_not_count(tmp_path: Path, store: Store) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    client.ack(5, 3)  # a periodic checkpoint, older than the request
    client.clock += 10
    daemon.cycle()
    client.clock += 1
    daemon.cycle()
    assert _state(store, 5) is ManagedJobState.SIGNALLED
    assert client.count("requeue", 5) == 0


def test_an_ack_dated_in_the_future_does_not_count(tmp_path: Path, store: Store) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    client.clock += 1
    daemon.cycle()  # signalled
    future = int(client.clock + 3600)
    client._set(5, comment=f"{client.jobs[5].comment},ckpt=50@{future}")
    client.clock += 1
    daemon.cycle()
    assert _state(store, 5) is ManagedJobState.SIGNALLED
    assert client.count("requeue", 5) == 0


def test_an_ack_below_an_earlier_acknowledged_step_does_not_count(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    client.clock += 1
    daemon.cycle()  # signalled
    with store.begin() as session:  # an earlier preemption of this job acknowledged step 40
        session.add(
            Preemption(
                victim_job_id=5,
                victim_submit_time=client.jobs[5].submit_time or 0.0,
                for_job_id=1,
                signal="USR2",
                signalled_at=client.clock - 1000,
                ack_at=client.clock - 990,
                checkpoint_step=40,
                outcome="requeued",
                plan_id=None,
            )
        )
    client.clock += 1
    client.ack(5, 7)
    client.clock += 1
    daemon.cycle()
    assert _state(store, 5) is ManagedJobState.SIGNALLED
    client.ack(5, 41)
    client.clock += 1
    daemon.cycle()
    assert _state(store, 5) is not ManagedJobState.SIGNALLED


def test_settings_from_the_environment() -> None:
    s = PreemptionSettings.from_environ(
        {"SLURMOPT_PREEMPT_SIGNAL": "SIGTERM", "SLURMOPT_PREEMPT_GRACE_S": "30"}
    )
    assert s.signal == "TERM" and s.grace_s == 30.0 and s.on_no_ack == "keep-running"
    assert PreemptionSettings.from_environ({}).signal == "USR2"
    assert PreemptionSettings.from_environ({"SLURMOPT_PREEMPT_SIGNAL": "usr1"}).signal == "USR1"
    for bad in (
        {"SLURMOPT_PREEMPT_SIGNAL": "KILL"},
        {"SLURMOPT_PREEMPT_SIGNAL": "9"},
        {"SLURMOPT_PREEMPT_SIGNAL": "SIGSTOP"},
        {"SLURMOPT_PREEMPT_SIGNAL": "HUP"},
        {"SLURMOPT_PREEMPT_GRACE_S": "-1"},
        {"SLURMOPT_PREEMPT_ON_NO_ACK": "kill"},
    ):
        with pytest.raises(ConfigError):
            PreemptionSettings.from_environ(bad)


def test_preemptions_command_lists_lost_work_and_overhead(tmp_path: Path, store: Store) -> None:
    import json

    from click.testing import CliRunner

    from slurmopt.cli import cli

    client, daemon = _full_cluster_with_victim(tmp_path, store)
    client.clock += 1
    daemon.cycle()
    client.ack(5, 42)
    client.clock += 1
    daemon.cycle()
    client.clock += 1
    daemon.cycle()  # requeued seen; job 9 pinned
    client.start(9)
    client.clock += 1
    daemon.cycle()
    db = f"sqlite:///{tmp_path / 'slurmopt.db'}"  # the store fixture's file
    out = CliRunner().invoke(cli, ["preemptions", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    [row] = json.loads(out.output)["preemptions"]
    assert row["victim_job_id"] == 5 and row["for_job_id"] == 9
    assert row["outcome"] == REQUEUED and row["checkpoint_step"] == 42
    assert row["overhead_s"] == pytest.approx(3.0)
    assert row["lost_gpu_seconds"] == pytest.approx(32.0)  # ack to requeue seen, 16 GPUs
    table = CliRunner().invoke(cli, ["preemptions", "--db", db])
    assert table.exit_code == 0 and "requeued" in table.output
    missing = CliRunner().invoke(cli, ["preemptions", "--db", f"sqlite:///{tmp_path / 'no.db'}"])
    assert missing.exit_code != 0


def test_preemption_settings_come_from_the_config_and_the_environment_overrides_them() -> None:
    from slurmopt.config import Config
    from slurmopt.daemon.preempt import PreemptionSettings
    from slurmopt.errors import ConfigError

    config = Config(
        preempt_grace_s=45.0, preempt_on_no_ack="requeue-anyway", preempt_signal="sigterm"
    )
    settings = PreemptionSettings.from_config(config, environ={})
    assert (settings.grace_s, settings.on_no_ack, settings.signal) == (
        45.0,
        "requeue-anyway",
        "TERM",
    )
    env = {"SLURMOPT_PREEMPT_GRACE_S": "30", "SLURMOPT_PREEMPT": "0"}
    overridden = PreemptionSettings.from_config(config, environ=env)
    assert overridden.grace_s == 30.0 and overridden.enabled is False
    assert overridden.on_no_ack == "requeue-anyway"
    with pytest.raises(ConfigError, match="USR2, USR1, TERM"):
        PreemptionSettings.from_config(config, environ={"SLURMOPT_PREEMPT_SIGNAL": "KILL"})


def test_no_preemption_when_the_preemptors_reservation_starts_soon(
    tmp_path: Path, store: Store
) -> None:
    client, daemon = _full_cluster_with_victim(tmp_path, store)
    # The other jobs end in 90 s: job 9's reservation then gains 16 GPUs x (90 - 30 s grace),
    # less than the victim's 16 GPUs x (30 s grace + 120 s restart).
    for job_id, job in list(client.jobs.items()):
        if job_id >= 100:
            client.jobs[job_id] = dataclasses.replace(job, time_limit_s=100)
    client.clock += 1
    result = daemon.cycle()
    assert result.acted is not None and result.acted.signalled == []
    assert client.count("signal", 5) == 0 and not _rows(store)
