"""The tiny training job under real torchrun (gloo on CPU): preempt, checkpoint, resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from slurmopt.elastic.checkpoint import CheckpointManager  # noqa: E402
from slurmopt.elastic.runtime import PREEMPTED_FILE, REQUEST_FILE  # noqa: E402

TRAIN = Path(__file__).resolve().parents[2] / "slurmopt" / "elastic" / "tiny_train.py"
STEPS = 120

pytestmark = pytest.mark.torch


def _torchrun(tmp: Path, log: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    env["SLURMOPT_CKPT_DIR"] = str(tmp / "local")
    env["SLURMOPT_CKPT_SHARED"] = str(tmp / "shared")
    argv = [torchrun, "--standalone", "--nproc-per-node=2", str(TRAIN)]
    argv += ["--steps", str(STEPS), "--loss-log", str(log), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)


def _losses(log: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_preempted_run_resumes_on_the_same_loss_curve(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    reference.mkdir()
    done = _torchrun(reference, reference / "loss.jsonl")
    assert done.returncode == 0, done.stderr[-2000:]
    expected = {int(r["step"]): r["loss"] for r in _losses(reference / "loss.jsonl")}
    assert sorted(expected) == list(range(1, STEPS + 1))

    run = tmp_path / "run"
    (run / "local").mkdir(parents=True)
    log = run / "loss.jsonl"
    log.touch()

    def request_after_some_steps() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(log.read_text().splitlines()) < 30:
            time.sleep(0.05)
        (run / "local" / REQUEST_FILE).touch()

    asker = threading.Thread(target=request_after_some_steps)
    asker.start()
    first = _torchrun(run, log, "--step-sleep", "0.05", "--checkpoint-every", "10")
    asker.join()
    assert first.returncode == 0, first.stderr[-2000:]
    assert (run / "local" / PREEMPTED_FILE).is_file()
    stopped_at = len(log.read_text().splitlines())
    assert 30 <= stopped_at < STEPS
    saved = CheckpointManager(run / "local", run / "shared").resume()
    assert saved is not None and saved.step == stopped_at  # every step's work is saved
    assert (run / "shared" / "latest").read_text().strip() == f"step-{stopped_at:08d}"

    # A newer but corrupt checkpoint must be skipped on resume.
    bogus = run / "shared" / f"step-{stopped_at + 5:08d}"
    shutil.copytree(saved.path, bogus)
    (bogus / "state.pt").write_bytes(b"garbage")
    (run / "local" / REQUEST_FILE).unlink()  # the batch shell clears it on restart

    second = _torchrun(run, log)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"resumed from step {stopped_at}" in second.stderr
    records = _losses(log)
    steps = [int(r["step"]) for r in records]
    assert steps == list(range(1, STEPS + 1))  # no step repeated, none lost
    for record in records:
        assert record["loss"] == pytest.approx(expected[int(record["step"])], rel=1e-4, abs=1e-7)


def test_allreduce_bench_prints_bandwidth_json() -> None:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    argv = [torchrun, "--standalone", "--nproc-per-node=2", "-m", "slurmopt.elastic.bench"]
    argv += ["--min-bytes", "1024", "--max-bytes", "65536", "--iters", "2"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["backend"] == "gloo" and doc["world_size"] == 2
    assert [r["bytes"] for r in doc["results"]] == [1024 * 2**i for i in range(7)]
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"]) for r in doc["results"])
