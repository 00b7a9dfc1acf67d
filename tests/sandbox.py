"""Test helpers for the real Slurm sandbox cluster started by ``scripts/slurm-sandbox up``.

Tests marked ``slurm`` get a :class:`SlurmSandbox`; when no controller
answers they fail (they never skip), because a silent skip would hide that
the integration suite did not run.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slurmopt.model import Job
from slurmopt.slurm.parse import parse_jobs

DEFAULT_DIR = Path(os.environ.get("SLURMOPT_SANDBOX_DIR", "/tmp/slurmopt-sandbox"))
LOCK_PATH = Path("/tmp/slurmopt-sandbox.lock")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sandbox_conf() -> str | None:
    """SLURM_CONF from the environment, else the default sandbox's config if it exists."""
    conf = os.environ.get("SLURM_CONF")
    if conf:
        return conf
    default = DEFAULT_DIR / "etc" / "slurm.conf"
    return str(default) if default.exists() else None


@contextmanager
def exclusive_cluster() -> Iterator[None]:
    """Serialise test runs from several processes that share the one sandbox."""
    with open(LOCK_PATH, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class SlurmSandbox:
    """Thin, explicit wrappers over the real Slurm commands, for test set-up and checks."""

    def __init__(self, conf: str) -> None:
        self.conf = conf
        self.env = {**os.environ, "SLURM_CONF": conf}
        self.workdir = Path(conf).parent.parent / "jobs"
        self.workdir.mkdir(parents=True, exist_ok=True)

    def run(self, *argv: str, check: bool = True, input: str | None = None) -> str:
        proc = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, input=input, timeout=60
        )
        if check and proc.returncode != 0:
            cmd = " ".join(argv)
            raise RuntimeError(f"{cmd} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def sbatch(self, *args: str, wrap: str = "sleep 600") -> int:
        """Submit with plain sbatch; returns the job id."""
        out = self.run(
            "sbatch", "--parsable", "-o", "/dev/null", "-D", str(self.workdir),
            *args, "--wrap", wrap,
        )
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> Job:
        """One job as slurmopt's adapter reads it (22.05's ``squeue --json`` ignores ``-j``)."""
        for job in parse_jobs(json.loads(self.run("squeue", "--json"))):
            if job.job_id == job_id:
                return job
        raise AssertionError(f"job {job_id} not in squeue --json")

    def job_field(self, job_id: int, fmt: str) -> str:
        return self.run("squeue", "-h", "-j", str(job_id), "-o", fmt, check=False).strip()

    def wait_state(self, job_id: int, state: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            seen = self.job_field(job_id, "%T")
            if seen == state:
                return
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} not {state} after {timeout}s (last seen {seen!r})")

    def node_names(self) -> list[str]:
        return self.run("sinfo", "-h", "-N", "-o", "%N").split()

    def reset(self) -> None:
        """Cancel every job and return every node to service, then wait until all are idle."""
        ids = self.run("squeue", "-h", "-o", "%A", check=False).split()
        if ids:
            self.run("scancel", *ids, check=False)
        self.run("scontrol", "update", "NodeName=ALL", "State=RESUME", check=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = self.run("squeue", "-h", "-o", "%A", check=False).split()
            busy = self.run(
                "sinfo", "-h", "-N", "-t", "alloc,mix,comp,drain,down", "-o", "%N", check=False
            ).split()
            if not jobs and not busy:
                return
            time.sleep(0.3)
        raise AssertionError("sandbox did not return to idle within 60 s")
