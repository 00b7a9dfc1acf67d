"""End to end on the sandbox: a checkpointing elastic job is preempted and resumes.

A 2-node ``elastic-torchrun`` job (gloo on CPU; every emulated node is this
host, so the rendezvous is 127.0.0.1) trains the tiny model while plain
sleep jobs fill every other node.  A higher-priority 2-node managed job
arrives; the daemon (enforcing, 1 s interval) signals the victim, the
victim checkpoints and acknowledges in its own comment, the daemon
requeues it held and starts the preemptor on the freed nodes.  When the
preemptor ends, the victim is placed again, resumes from its checkpoint and
finishes with exactly the target number of steps on the same loss curve.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from slurmopt.elastic.tiny_train import reference_losses
from slurmopt.store import ManagedJobState, Preemption
from tests.integration.test_daemon import CLI, CtldLog, DaemonRun, _wait, enforcing_daemon
from tests.sandbox import SlurmSandbox, free_port

pytestmark = [pytest.mark.slurm, pytest.mark.preemption, pytest.mark.torch]

pytest.importorskip("torch")

TRAIN = Path(__file__).resolve().parents[2] / "slurmopt" / "elastic" / "tiny_train.py"
STEPS = 300
GRACE_S = 30


@pytest.fixture
def daemon(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[DaemonRun]:
    slurm.env["SLURMOPT_PREEMPT_GRACE_S"] = str(GRACE_S)
    try:
        with enforcing_daemon(slurm, tmp_path) as run:
            yield run
    finally:
        slurm.env.pop("SLURMOPT_PREEMPT_GRACE_S", None)


def _losses(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _state(slurm: SlurmSandbox, job_id: int) -> str:
    return slurm.job_field(job_id, "%T")


def test_preempted_job_checkpoints_requeues_and_resumes(
    slurm: SlurmSandbox, daemon: DaemonRun, tmp_path: Path
) -> None:
    work = tmp_path / "job"
    work.mkdir()
    loss_log = work / "loss.jsonl"
    # A chroot release's nodes see /tmp and the checkout the sandbox was started from, not
    # necessarily this one: the job runs its own copy of the training script.
    train = Path(shutil.copy(TRAIN, work / TRAIN.name))
    hold = [] if daemon.plugin else ["--hold"]
    env = {
        **slurm.env,
        "SLURMOPT_RDZV_HOST": "127.0.0.1",
        "SLURMOPT_RDZV_PORT": str(free_port()),
        "SLURMOPT_CKPT_DIR": str(work / "local"),
        "SLURMOPT_CKPT_SHARED": str(work / "shared"),
        "SLURMOPT_PREEMPT_GRACE_S": str(GRACE_S),
    }
    out = subprocess.run(
        [
            *CLI,
            "submit",
            "--parsable",
            "--template",
            "elastic-torchrun",
            "--preemptible",
            "--elastic",
            "2:2",
            "-N",
            "2",
            "--gres=gpu:8",
            "-o",
            str(work / "job.out"),
            "-D",
            str(work),
            "--time=10",
            *hold,
            str(train),
            "--steps",
            str(STEPS),
            "--loss-log",
            str(loss_log),
            "--step-sleep",
            "0.1",
            "--checkpoint-every",
            "50",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    victim = int(out.stdout.strip().split(";")[0])
    slurm.wait_state(victim, "RUNNING", timeout=60)
    _wait("the victim to train", lambda: len(_losses(loss_log)) >= 20, timeout=120)

    fillers = [
        slurm.sbatch("-N", "1", "--gres=gpu:8", "--exclusive", "--time=10") for _ in range(30)
    ]
    _wait(
        "the fillers to run",
        lambda: all(_state(slurm, j) == "RUNNING" for j in fillers),
        timeout=120,
    )
    assert not slurm.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").split()

    decided = time.time()
    out = subprocess.run(
        [
            *CLI,
            "submit",
            "--parsable",
            "-N",
            "2",
            "--gres=gpu:8",
            "-o",
            "/dev/null",
            "-D",
            str(slurm.workdir),
            "--time=10",
            *hold,
            "--wrap",
            "sleep 600",
        ],
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    preemptor = int(out.stdout.strip().split(";")[0])
    _wait("the preemptor to run", lambda: _state(slurm, preemptor) == "RUNNING", timeout=150)
    overhead = time.time() - decided
    steps_before = len(_losses(loss_log))
    assert _state(slurm, victim) == "PENDING"

    store = daemon.store()

    def finished_row() -> Preemption | None:
        with store.begin() as session:
            rows = session.scalars(select(Preemption)).all()
            session.expunge_all()
        assert len(rows) == 1, [(r.victim_job_id, r.outcome) for r in rows]
        return rows[0] if rows[0].outcome is not None else None

    row = _wait("the preemption to be recorded as finished", finished_row, timeout=30)
    assert isinstance(row, Preemption)
    assert row.victim_job_id == victim and row.for_job_id == preemptor
    assert row.outcome == "requeued"
    assert row.ack_at is not None and row.ack_at - row.signalled_at <= GRACE_S
    ack_step = row.checkpoint_step
    lost = row.lost_gpu_seconds or 0.0
    assert ack_step == steps_before  # every logged step was in the checkpoint
    # The daemon records the preemptor's start on its next cycle; cancel only after it.
    _wait(
        "the daemon to record the preemptor running",
        lambda: (r := daemon.record(preemptor)) is not None and r.state is ManagedJobState.RUNNING,
        timeout=30,
    )
    slurm.run("scancel", str(preemptor))
    _wait("the victim to finish", lambda: _state(slurm, victim) == "", timeout=180)
    records = _losses(loss_log)
    steps = [int(r["step"]) for r in records]
    assert steps == list(range(1, STEPS + 1)), steps[ack_step - 3 : ack_step + 3]
    assert {int(r["restart"]) for r in records[:ack_step]} == {0}
    assert {int(r["restart"]) for r in records[ack_step:]} == {1}
    expected = reference_losses(STEPS)
    for record in records:
        assert record["loss"] == pytest.approx(
            expected[int(record["step"]) - 1], rel=1e-4, abs=1e-7
        )
    assert records[ack_step]["loss"] < records[0]["loss"]  # continued, not restarted
    listing = subprocess.run(
        [*CLI, "preemptions", "--db", daemon.db, "--json"],
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [listed] = json.loads(listing.stdout)["preemptions"]
    assert listed["outcome"] == "requeued" and listed["overhead_s"] is not None
    print(
        f"\npreemption overhead: {listed['overhead_s']:.1f} s from the decision (signal) to the "
        f"preemptor running ({overhead:.1f} s from its submission); work lost by victim "
        f"{victim}: {lost:.0f} GPU-s (idle from the ack to the requeue; 0 steps redone)"
    )


ACKING_JOB = """#!/bin/bash
# Acknowledges a checkpoint (step 11) on the first request, then waits to be requeued.
ack() {{ {python} -c 'import os; from slurmopt.elastic.runtime import acknowledge; \
acknowledge(int(os.environ["SLURM_JOB_ID"]), 11)'; }}
trap ack USR2
while :; do sleep 1 & wait $!; done
"""


def _fill_all_but(slurm: SlurmSandbox, free: int) -> list[int]:
    """Plain sleep jobs on every idle node but ``free``; returns their ids once running."""
    idle = slurm.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").split()
    fillers = [
        slurm.sbatch("-N", "1", "--gres=gpu:8", "--exclusive", "--time=10")
        for _ in range(len(idle) - free)
    ]
    _wait(
        "the fillers to run",
        lambda: all(_state(slurm, j) == "RUNNING" for j in fillers),
        timeout=120,
    )
    return fillers


def _submit(slurm: SlurmSandbox, daemon: DaemonRun, *args: str, script: str | None = None) -> int:
    hold = [] if daemon.plugin else ["--hold"]
    common = ["--parsable", "-o", "/dev/null", "-D", str(slurm.workdir), "--time=10", *hold]
    if script is not None:
        out = slurm.run(*CLI, "submit", *common, *args, input=script)
    else:
        out = slurm.run(*CLI, "submit", *common, *args)
    return int(out.strip().split(";")[0])


def _rows(daemon: DaemonRun) -> list[Preemption]:
    store = daemon.store()
    with store.begin() as session:
        rows = list(session.scalars(select(Preemption).order_by(Preemption.id)).all())
        session.expunge_all()
    return rows


def test_victim_that_never_acknowledges_keeps_running(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    victim = _submit(
        slurm,
        daemon,
        "--preemptible",
        "-N",
        "2",
        "--gres=gpu:8",
        "--wrap",
        "trap '' USR2; sleep 600",
    )
    slurm.wait_state(victim, "RUNNING", timeout=60)
    _fill_all_but(slurm, 0)
    preemptor = _submit(slurm, daemon, "-N", "2", "--gres=gpu:8", "--wrap", "sleep 600")
    _wait("the signal", lambda: _rows(daemon), timeout=60)
    _wait(
        "the preemption to be given up",
        lambda: [r.outcome for r in _rows(daemon)] == ["cancelled"],
        timeout=GRACE_S + 60,
    )
    assert _state(slurm, victim) == "RUNNING"
    assert _state(slurm, preemptor) == "PENDING"
    [row] = _rows(daemon)
    assert row.victim_job_id == victim and row.ack_at is None
    time.sleep(3)  # a few more cycles: the victim is not signalled again
    assert len(_rows(daemon)) == 1
    assert slurm.job_field(victim, "%T") == "RUNNING"


def test_daemon_killed_after_the_signal_finishes_the_preemption_once(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    """The daemon dies right after its signal reached Slurm, before it noted sending it: the
    restarted daemon finishes the preemption with no second signal and exactly one requeue."""
    import signal as signals
    import sys

    daemon.stop()
    daemon.start(hook="kill@after:signal")
    daemon.wait_enforcing()
    ctld = CtldLog(slurm)
    victim = _submit(
        slurm,
        daemon,
        "--preemptible",
        "-N",
        "2",
        "--gres=gpu:8",
        script=ACKING_JOB.format(python=sys.executable),
    )
    slurm.wait_state(victim, "RUNNING", timeout=60)
    _fill_all_but(slurm, 0)
    preemptor = _submit(slurm, daemon, "-N", "2", "--gres=gpu:8", "--wrap", "sleep 600")
    assert daemon.proc is not None and daemon.proc.wait(timeout=60) == -signals.SIGKILL
    assert ctld.signals(victim) == 1 and "sent USR2" not in daemon.log()
    [row] = _rows(daemon)
    assert row.victim_job_id == victim and row.outcome is None
    # The victim acknowledges before any daemon runs again (the dead one's lease must expire).
    _wait("the ack", lambda: "ckpt=11@" in slurm.job_field(victim, "%k"), timeout=30)
    daemon.start()
    _wait("the preemptor to run", lambda: _state(slurm, preemptor) == "RUNNING", timeout=120)
    _wait(
        "the preemption to finish",
        lambda: [r.outcome for r in _rows(daemon)] == ["requeued"],
        timeout=30,
    )
    [row] = _rows(daemon)
    assert row.victim_job_id == victim and row.checkpoint_step == 11
    time.sleep(3)  # a few more cycles: nothing else happens to the victim
    assert slurm.run("scontrol", "show", "job", str(victim)).count("Restarts=1") == 1
    assert (ctld.signals(victim), ctld.requeues(victim)) == (1, 1)
    assert daemon.log().count(f"job {victim} requeued held") == 1
