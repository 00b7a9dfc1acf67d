"""End to end on the sandbox: an elastic job starts on the one node free and trains.

Plain jobs without a time limit hold 31 of the 32 nodes, so two nodes may
never be free together.  An ``elastic-torchrun`` job asking for 2 nodes,
elastic 1:2, is started by the daemon on the one free node (its node count
set to 1 first); torchrun's rendezvous settles on one node and the tiny
model trains every step on the reference loss curve.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from slurmopt.elastic.tiny_train import reference_losses
from tests.integration.test_daemon import CLI, DaemonRun, _wait, daemon  # noqa: F401
from tests.sandbox import SlurmSandbox, free_port

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

pytest.importorskip("torch")

TRAIN = Path(__file__).resolve().parents[2] / "slurmopt" / "elastic" / "tiny_train.py"
STEPS = 40


def test_elastic_torchrun_job_starts_on_one_node_and_trains(
    slurm: SlurmSandbox, daemon: DaemonRun, tmp_path: Path  # noqa: F811 (the fixture)
) -> None:
    daemon.start()
    daemon.wait_enforcing()
    busy = slurm.sbatch("-N", "31", "-w", "gpu[001-031]", "--gres=gpu:8", wrap="sleep 600")
    slurm.wait_state(busy, "RUNNING")
    work = tmp_path / "job"
    work.mkdir()
    loss_log = work / "loss.jsonl"
    env = {
        **slurm.env,
        "SLURMOPT_RDZV_HOST": "127.0.0.1",
        "SLURMOPT_RDZV_PORT": str(free_port()),
        "SLURMOPT_CKPT_DIR": str(work / "local"),
        "SLURMOPT_CKPT_SHARED": str(work / "shared"),
    }
    hold = [] if daemon.plugin else ["--hold"]
    out = subprocess.run(
        [*CLI, "submit", "--parsable", "--template", "elastic-torchrun", "--elastic", "1:2",
         "-N", "2", "--gres=gpu:8", "-o", str(work / "job.out"), "-D", str(work), "--time=10",
         *hold, str(TRAIN), "--steps", str(STEPS), "--loss-log", str(loss_log)],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    job = int(out.stdout.strip().split(";")[0])
    if not daemon.plugin:
        slurm.run("scontrol", "hold", str(job))
    slurm.wait_state(job, "RUNNING", timeout=60)
    assert slurm.job_field(job, "%N") == "gpu032"
    assert slurm.job_field(job, "%D") == "1"
    start = daemon.decisions(job, "start")[0]
    assert start.reason.value == "ELASTIC_START"
    _wait("the job to finish", lambda: slurm.job_field(job, "%T") == "", timeout=240)
    records = [json.loads(line) for line in loss_log.read_text().splitlines() if line.strip()]
    assert [int(r["step"]) for r in records] == list(range(1, STEPS + 1)), (
        (work / "job.out").read_text()[-2000:]
    )
    expected = reference_losses(STEPS)
    for record in records:
        want = expected[int(record["step"]) - 1]
        assert record["loss"] == pytest.approx(want, rel=1e-4, abs=1e-7)
