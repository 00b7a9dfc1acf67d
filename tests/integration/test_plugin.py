"""The job-submit plugin inside the sandbox's real slurmctld: holds, tags, and fails open.

Each test writes the heartbeat the sandbox's plugin reads (the path baked
into ``$ETC/job_submit.lua`` by ``scripts/slurm-sandbox up``), keeps it
fresh from a background thread while the test runs, and removes it at the
end, so other tests see no heartbeat and the plugin passes their jobs through.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmopt.daemon.heartbeat import write_heartbeat
from slurmopt.plugin import baked_settings, conf_enables_plugin
from slurmopt.tag import held_mark
from tests.sandbox import SlurmSandbox

pytestmark = pytest.mark.slurm

# Slurm 22.05 shows a priority-0 hold set by job_submit/lua as a user hold, exactly like
# `sbatch --hold`: only the admin comment's `held` marker tells the two apart (docs/plugin.md).
HELD_BY_PLUGIN = "JobHeldUser"
HELD_BY_USER = "JobHeldUser"
GPU_JOB = ("-p", "gpu", "--gres=gpu:1", "-t", "2")
#: The heartbeat sequence the writer below puts in the file; the plugin stamps it as hb=SEQ.
SEQ = 4242


class HeartbeatWriter:
    """Plays the daemon's part: writes the heartbeat, and refreshes it every second."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.enforce = True
        self.partitions: tuple[str, ...] = ("gpu",)
        self._refresh = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def beat(self, enforce: bool = True, partitions: tuple[str, ...] = ("gpu",)) -> None:
        """Write a fresh heartbeat now and keep it fresh."""
        with self._lock:
            self.enforce, self.partitions, self._refresh = enforce, partitions, True
            self._write()

    def write_raw(self, text: str) -> None:
        """Stop refreshing and put ``text`` in the file as it is."""
        with self._lock:
            self._refresh = False
            self.path.write_text(text)

    def remove(self) -> None:
        with self._lock:
            self._refresh = False
            self.path.unlink(missing_ok=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.remove()

    def _write(self) -> None:
        write_heartbeat(self.path, self.enforce, managed_partitions=self.partitions, seq=SEQ)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if self._refresh:
                    self._write()


@pytest.fixture
def heartbeat(slurm: SlurmSandbox) -> Iterator[HeartbeatWriter]:
    etc = Path(slurm.conf).parent
    assert conf_enables_plugin((etc / "slurm.conf").read_text()), "sandbox without the plugin"
    settings = baked_settings((etc / "job_submit.lua").read_text())
    assert settings is not None and settings.rendered, "sandbox's job_submit.lua not rendered"
    writer = HeartbeatWriter(Path(settings.heartbeat_path))
    try:
        yield writer
    finally:
        writer.stop()


def _job(slurm: SlurmSandbox, job_id: int) -> dict[str, str]:
    """State, reason, the owner's comment and admin comment, as slurmopt's adapter reads them."""
    job = slurm.job(job_id)
    return {
        "state": job.state.value,
        "reason": job.reason,
        "comment": job.comment,
        "admin": job.admin_comment,
    }


def _wait_reason(
    slurm: SlurmSandbox, job_id: int, reason: str, timeout: float = 20
) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        seen = _job(slurm, job_id)
        if seen["reason"] == reason:
            return seen
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} reason not {reason} after {timeout}s: {seen}")


def test_gpu_job_in_managed_partition_is_held_and_tagged(
    slurm: SlurmSandbox, heartbeat: HeartbeatWriter
) -> None:
    heartbeat.beat(partitions=("gpu",))
    job_id = slurm.sbatch(*GPU_JOB, "--comment", "my run")
    job = _wait_reason(slurm, job_id, HELD_BY_PLUGIN)
    assert job["state"] == "PENDING"
    assert job["comment"] == "my run"  # the owner's comment is left as it was
    assert job["admin"] == f"slurmopt:managed,held,hb={SEQ}"
    assert held_mark(job["admin"]) and not held_mark(job["comment"])
    # the default partition (gpu) counts when no -p is given
    default_id = slurm.sbatch("--gpus=2", "-t", "2")
    assert _wait_reason(slurm, default_id, HELD_BY_PLUGIN)["admin"].startswith(
        "slurmopt:managed,held,"
    )


def test_gpu_job_in_unmanaged_partition_runs_untouched(
    slurm: SlurmSandbox, heartbeat: HeartbeatWriter
) -> None:
    heartbeat.beat(partitions=("cpu", "a100"))
    job_id = slurm.sbatch(*GPU_JOB, "--comment", "mine")
    slurm.wait_state(job_id, "RUNNING", timeout=30)
    job = _job(slurm, job_id)
    assert (job["comment"], job["admin"]) == ("mine", "")


def test_tagged_job_is_held_in_any_partition_and_its_tag_copied_capped(
    slurm: SlurmSandbox, heartbeat: HeartbeatWriter
) -> None:
    heartbeat.beat(partitions=("a100",))
    tag = "slurmopt:managed,preemptible,elastic=1:8,held,ckpt=9@1 | ckpt"
    job_id = slurm.sbatch(*GPU_JOB, "-N", "2", "--comment", tag)
    job = _wait_reason(slurm, job_id, HELD_BY_PLUGIN)
    assert job["comment"] == tag
    # Known fields only, elastic capped at the 2 nodes asked for, held and hb the plugin's own.
    assert job["admin"] == f"slurmopt:managed,preemptible,elastic=1:2,held,hb={SEQ}"


def test_job_without_gpus_runs(slurm: SlurmSandbox, heartbeat: HeartbeatWriter) -> None:
    heartbeat.beat(partitions=("gpu",))
    job_id = slurm.sbatch("-p", "gpu", "-c", "2", "-t", "2", "--comment", "slurmopt:managed")
    slurm.wait_state(job_id, "RUNNING", timeout=30)
    job = _job(slurm, job_id)
    assert (job["comment"], job["admin"]) == ("slurmopt:managed", "")


def test_user_hold_stays_a_user_hold(slurm: SlurmSandbox, heartbeat: HeartbeatWriter) -> None:
    heartbeat.beat(partitions=("gpu",))
    job_id = slurm.sbatch(*GPU_JOB, "--hold")
    job = _wait_reason(slurm, job_id, HELD_BY_USER)
    assert job["admin"] == f"slurmopt:managed,hb={SEQ}" and not held_mark(job["admin"])
    slurm.run("scontrol", "release", str(job_id))
    slurm.wait_state(job_id, "RUNNING", timeout=30)


def test_heterogeneous_job_is_not_touched(slurm: SlurmSandbox, heartbeat: HeartbeatWriter) -> None:
    heartbeat.beat(partitions=("gpu",))
    out = slurm.run(
        "sbatch",
        "--parsable",
        "-o",
        "/dev/null",
        "-D",
        str(slurm.workdir),
        *GPU_JOB,
        ":",
        *GPU_JOB,
        input="#!/bin/sh\nsleep 600\n",
    )
    job_id = int(out.strip().split(";")[0])
    deadline = time.monotonic() + 30
    while _job(slurm, job_id)["state"] != "RUNNING":  # the first component's line
        assert time.monotonic() < deadline, f"het job {job_id} not RUNNING after 30s"
        time.sleep(0.3)
    shown = slurm.run("scontrol", "show", "job", str(job_id))
    assert "slurmopt:" not in shown and "Priority=0 " not in shown


@pytest.mark.parametrize("case", ["observing", "stale", "missing", "garbage"])
def test_plugin_fails_open(slurm: SlurmSandbox, heartbeat: HeartbeatWriter, case: str) -> None:
    if case == "observing":
        heartbeat.beat(enforce=False, partitions=("gpu",))
    elif case == "stale":
        heartbeat.remove()
        write_heartbeat(heartbeat.path, True, now=time.time() - 60, managed_partitions=("gpu",))
    elif case == "missing":
        heartbeat.remove()
    else:
        heartbeat.write_raw("enforce=1\npartitions=gpu\n\x00\x01 not a heartbeat\n")
    job_id = slurm.sbatch(*GPU_JOB, "--comment", "slurmopt:managed")
    slurm.wait_state(job_id, "RUNNING", timeout=30)
    job = _job(slurm, job_id)
    # Not held; the submit-time tag is still copied, so the job keeps what it was granted.
    assert (job["comment"], job["admin"]) == ("slurmopt:managed", "slurmopt:managed")
