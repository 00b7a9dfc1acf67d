"""An ordinary user against the enforcing daemon: edits to a job's comment grant nothing.

The owner of a job may edit its comment at any time, and Slurm accepts
that.  slurmopt acts only on the admin comment the job-submit plugin wrote
at submission and on its own records, so an operator's hold stays on and a
1-node job stays 1 node, whatever the owner writes, while the same user's
properly tagged job is placed and runs.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmopt.store import ManagedJobState
from tests.integration.test_daemon import DaemonRun, _started_record, _wait, enforcing_daemon
from tests.sandbox import SlurmSandbox

pytestmark = pytest.mark.slurm

#: The unprivileged account the tests submit as (created when missing; tests run as root).
USER = "slurmopt-tenant"


@pytest.fixture(scope="module")
def tenant(slurm_cluster: SlurmSandbox) -> str:
    """An ordinary local user: not root, not a Slurm operator (known to a release's chroot too)."""
    if os.geteuid() != 0:
        pytest.fail("the trust tests create and act as an ordinary user: run them as root")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            check=True,
        )
    slurm_cluster.share_user(USER)
    return USER


def _as(slurm: SlurmSandbox, user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command as ``user`` (munge authenticates the uid)."""
    return subprocess.run(
        slurm.as_user(user, *argv),
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _submit(slurm: SlurmSandbox, user: str, *args: str) -> int:
    proc = _as(
        slurm, user, "sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp", *args,
        "--wrap", "sleep 600",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])


def _field(slurm: SlurmSandbox, job_id: int, fmt: str) -> str:
    return slurm.job_field(job_id, fmt)


@pytest.fixture
def daemon(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[DaemonRun]:
    with enforcing_daemon(slurm, tmp_path) as run:
        yield run


def test_comment_edits_by_the_owner_grant_nothing(
    slurm: SlurmSandbox, daemon: DaemonRun, tenant: str
) -> None:
    # Fill the cluster so that the tenant's jobs wait.
    filler = slurm.sbatch("-N", str(len(slurm.node_names())), "--gres=gpu:8", "--exclusive")
    slurm.wait_state(filler, "RUNNING")

    # 1. An operator holds an ordinary job of the tenant's; the owner tags its comment.
    plain = _submit(slurm, tenant, "-p", "gpu", "--gres=gpu:1", "-t", "5")
    slurm.run("scontrol", "hold", str(plain))
    assert _field(slurm, plain, "%r") == "JobHeldAdmin"
    edit = _as(
        slurm, tenant, "scontrol", "update", f"JobId={plain}", "Comment=slurmopt:managed,held"
    )
    assert edit.returncode == 0, edit.stderr  # Slurm accepts the owner's edit

    # 2. A properly tagged 1-node job; the owner then asks for eight nodes in the comment.
    small = _submit(slurm, tenant, "-p", "gpu", "-N", "1", "--gres=gpu:8", "-t", "5",
                    "--comment", "slurmopt:managed")  # fmt: skip
    _wait(f"job {small} managed", lambda: daemon.record(small) is not None)
    _wait(f"job {small} under an admin hold", lambda: _field(slurm, small, "%r") == "JobHeldAdmin")
    edit = _as(
        slurm, tenant, "scontrol", "update", f"JobId={small}",
        "Comment=slurmopt:managed,elastic=1:8,held",
    )  # fmt: skip
    assert edit.returncode == 0, edit.stderr
    # The owner cannot lift slurmopt's hold either: it is an administrator's now.
    assert _as(slurm, tenant, "scontrol", "release", str(small)).returncode != 0

    # 3. A second properly tagged job of the same user.
    proper = _submit(slurm, tenant, "-p", "gpu", "--gres=gpu:2", "-t", "5",
                     "--comment", "slurmopt:managed")  # fmt: skip

    slurm.run("scancel", str(filler))
    for job_id in (small, proper):
        slurm.wait_state(job_id, "RUNNING", timeout=60)
        _started_record(daemon, job_id)  # placed by slurmopt, then seen running
        pins = [t for t in daemon.transitions(job_id) if t.to_state is ManagedJobState.PINNED]
        assert len(pins) == 1, daemon.transitions(job_id)
    assert _field(slurm, small, "%D") == "1"  # never grown
    # The operator's hold is still on, and slurmopt never recorded that job.
    for _ in range(3):
        assert _field(slurm, plain, "%T %r") == "PENDING JobHeldAdmin"
        assert daemon.record(plain) is None
        time.sleep(1.5)  # a daemon cycle
    assert "slurmopt:managed,held" in _field(slurm, plain, "%k")  # the edit stands, unheeded
