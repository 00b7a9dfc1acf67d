"""``slurmopt daemon --enforce`` as an admin first runs it: found config, proven enforcement.

With nothing but ``SLURM_CONF`` set, the daemon finds the sandbox's
``slurmopt.toml`` beside ``slurm.conf`` and packs small GPU jobs onto the
partly used nodes; with the job-submit plugin taken out of the running
slurmctld's configuration, the same command refuses to start (exit 78)
with one line naming the fix, instead of claiming a mode it is not in.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmopt.daemon.heartbeat import read_heartbeat, write_heartbeat
from slurmopt.plugin import baked_settings
from tests.integration.test_daemon import CLI, _wait
from tests.sandbox import SlurmSandbox

pytestmark = pytest.mark.slurm


def _bare_env(slurm: SlurmSandbox) -> dict[str, str]:
    """Only what an admin's shell has after ``export SLURM_CONF=...``: no SLURMOPT_* at all."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    return {**keep, "SLURM_CONF": slurm.conf}


def _heartbeat_path(slurm: SlurmSandbox) -> str:
    settings = baked_settings((Path(slurm.conf).parent / "job_submit.lua").read_text())
    assert settings is not None
    return settings.heartbeat_path


@pytest.fixture
def bare_daemon(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*CLI, "daemon", "--enforce"],
        env=_bare_env(slurm),
        cwd=tmp_path,
        stdout=log,
        stderr=log,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        log.close()
        write_heartbeat(_heartbeat_path(slurm), False)


def test_enforce_with_only_slurm_conf_set_packs_small_gpu_jobs(
    slurm: SlurmSandbox, bare_daemon: subprocess.Popen[bytes]
) -> None:
    # A fragmented layout: four nodes at the end of the list each have 2 GPUs free.
    partly = ["gpu017", "gpu022", "gpu027", "gpu032"]
    for node in partly:
        slurm.wait_state(slurm.sbatch("-w", node, "--gres=gpu:6", "-t", "5"), "RUNNING")
    heartbeat = _heartbeat_path(slurm)
    _wait("the daemon to enforce", lambda: read_heartbeat(heartbeat, max_age_s=10).enforcing)
    small = [
        slurm.sbatch("-p", "gpu", "--gres=gpu:2", "-t", "2", "--comment", "slurmopt:managed")
        for _ in partly
    ]
    placed = []
    for job_id in small:
        slurm.wait_state(job_id, "RUNNING", timeout=60)
        placed.append(slurm.job_field(job_id, "%N"))
    # Plain Slurm fills gpu001 first; slurmopt fills the four 2-GPU holes, stranding nothing.
    assert sorted(placed) == partly
    assert bare_daemon.poll() is None


def test_enforce_exits_78_when_slurmctld_does_not_load_the_plugin(
    slurm: SlurmSandbox, tmp_path: Path
) -> None:
    conf = Path(slurm.conf)
    original = conf.read_text()
    assert "JobSubmitPlugins=lua\n" in original

    def loaded() -> str:
        for line in slurm.run("scontrol", "show", "config").splitlines():
            if line.startswith("JobSubmitPlugins"):
                return line.split("=", 1)[1].strip()
        return ""

    conf.write_text(original.replace("JobSubmitPlugins=lua\n", ""))
    try:
        slurm.run("scontrol", "reconfigure")
        _wait("slurmctld to drop the plugin", lambda: "lua" not in loaded(), 30)
        proc = subprocess.run(
            [*CLI, "daemon", "--enforce"],
            env=_bare_env(slurm),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        conf.write_text(original)
        slurm.run("scontrol", "reconfigure")
        _wait("slurmctld to load the plugin again", lambda: "lua" in loaded(), 30)
        time.sleep(1)
    assert proc.returncode == 78, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("slurmopt: ")]
    assert len(errors) == 1 and "JobSubmitPlugins" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr

