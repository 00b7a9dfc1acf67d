"""Test helpers for the real Slurm sandbox cluster started by ``scripts/slurm-sandbox up``.

Tests marked ``slurm`` get a :class:`SlurmSandbox`; when no controller
answers they fail (they never skip), because a silent skip would hide that
the integration suite did not run.

``SLURMOPT_SANDBOX_RELEASE`` picks the sandbox (``bookworm``, the host's own
Slurm, by default; ``trixie`` or ``sid``, started with ``slurm-sandbox up
--release R``): its own directory, lock and client commands (the wrappers in
``<dir>/bin`` that run the chroot's commands), and the release every test can
assert the adapter detected.
"""

from __future__ import annotations

import fcntl
import grp
import json
import os
import pwd
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slurmopt.fabric import Fabric
from slurmopt.fabric.topology_conf import load_topology_conf
from slurmopt.model import Job
from slurmopt.slurm.parse import parse_jobs

#: The Debian release whose Slurm the tests target.
RELEASE = os.environ.get("SLURMOPT_SANDBOX_RELEASE") or "bookworm"
#: The Slurm release each Debian release carries (sid's changes; env.sh says which it ran).
SLURM_OF_RELEASE = {"bookworm": "22.05", "trixie": "24.11"}
_RELEASE_DIR = Path(
    "/tmp/slurmopt-sandbox" if RELEASE == "bookworm" else f"/tmp/slurmopt-sandbox-{RELEASE}"
)
DEFAULT_DIR = Path(os.environ.get("SLURMOPT_SANDBOX_DIR") or _RELEASE_DIR)
#: One lock per sandbox directory: a second sandbox of a release (``up --port-base``) is
#: held apart from the first.
LOCK_PATH = Path(f"{DEFAULT_DIR}.lock")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sandbox_conf() -> str | None:
    """The targeted sandbox's config.

    With ``SLURMOPT_SANDBOX_RELEASE`` set, that release's sandbox (never a
    ``SLURM_CONF`` left over from another one); else ``SLURM_CONF``, else the
    default sandbox's config if it exists.
    """
    default = DEFAULT_DIR / "etc" / "slurm.conf"
    if os.environ.get("SLURMOPT_SANDBOX_RELEASE"):
        return str(default) if default.exists() else None
    conf = os.environ.get("SLURM_CONF")
    if conf:
        return conf
    return str(default) if default.exists() else None


def env_file(conf: str) -> dict[str, str]:
    """The exports ``slurm-sandbox up`` wrote to env.sh beside the config's ``etc``."""
    path = Path(conf).parent.parent / "env.sh"
    if not path.exists():
        return {}
    return dict(re.findall(r"^export (\w+)=(\S*)$", path.read_text(), re.MULTILINE))


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
        self.dir = Path(conf).parent.parent
        exported = env_file(conf)
        #: Debian release and Slurm release (``24.11.5``, or a prefix such as ``22.05``)
        #: that this sandbox runs, from env.sh (older env.sh files lack them).
        self.release = exported.get("SLURMOPT_SANDBOX_RELEASE", RELEASE)
        self.slurm_version = exported.get(
            "SLURMOPT_SANDBOX_SLURM_VERSION", SLURM_OF_RELEASE.get(self.release, "")
        )
        #: The chroot a newer release runs in (None: the host's own Slurm); older env.sh files
        #: lack it, so it falls back to where ``up`` puts a release's chroot.
        root = exported.get("SLURMOPT_SANDBOX_ROOT")
        if root is None and self.release != "bookworm":
            chroots = os.environ.get("SLURMOPT_SANDBOX_CHROOTS") or "/srv"
            root = f"{chroots}/slurmopt-{self.release}"
        self.root = Path(root) if root else None
        self.env = {**os.environ, "SLURM_CONF": conf}
        # A chroot release's client commands: the wrappers, first on PATH.
        bindir = self.dir / "bin"
        if (bindir / "sinfo").exists():
            self.env["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
        self.workdir = self.dir / "jobs"
        self.workdir.mkdir(parents=True, exist_ok=True)

    def assert_version(self, detected: str) -> None:
        """``detected`` (what an adapter found) is this sandbox's Slurm, not another one's."""
        want = self.slurm_version
        assert want, f"no known Slurm release for the {self.release} sandbox"
        assert detected == want or detected.startswith(want + "."), (
            f"the adapter detected Slurm {detected!r}; the {self.release} sandbox runs {want}"
        )

    def in_root(self, *argv: str) -> list[str]:
        """``argv`` run where this release's Slurm lives: in its chroot, or on the host."""
        return list(argv) if self.root is None else ["chroot", str(self.root), *argv]

    def as_user(self, user: str, *argv: str) -> list[str]:
        """``argv`` run as ``user``, inside a release's chroot: its wrappers call chroot, which
        only root may."""
        return self.in_root("runuser", "-u", user, "--", *argv)

    def share_user(self, user: str) -> None:
        """Give a chroot release the host's ``user`` (``up`` copies only uids 1000-59999)."""
        if self.root is None:
            return
        entry = pwd.getpwnam(user)
        group = grp.getgrgid(entry.pw_gid)
        lines = {
            "passwd": f"{user}:x:{entry.pw_uid}:{entry.pw_gid}:{entry.pw_gecos}:"
            f"{entry.pw_dir}:{entry.pw_shell}",
            "group": f"{group.gr_name}:x:{group.gr_gid}:{','.join(group.gr_mem)}",
        }
        for name, line in lines.items():
            path = self.root / "etc" / name
            known = {row.split(":", 1)[0] for row in path.read_text().splitlines()}
            if line.split(":", 1)[0] not in known:
                with open(path, "a") as fh:
                    fh.write(line + "\n")

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


def fixture_fabric(slurm: SlurmSandbox, fixture: Path, up_args: str) -> Fabric:
    """The sandbox's own topology.conf, which a test needs to be ``fixture``'s; fails otherwise.

    Tests of one fabric would otherwise misread another sandbox's placements;
    ``up_args`` goes into the message that says how to start the right one.
    """
    conf = Path(slurm.conf).parent / "topology.conf"
    if conf.read_text() != fixture.read_text():
        pytest.fail(
            f"{slurm.dir} does not run {fixture.name}: start it with `scripts/slurm-sandbox up "
            f"{up_args} --topology {fixture} --dir DIR` and set SLURMOPT_SANDBOX_DIR=DIR"
        )
    return load_topology_conf(conf, slurm.node_names())
