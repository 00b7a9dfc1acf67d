"""Proof that enforcement is real, end to end: the checks behind ``degraded``.

A daemon started with ``--enforce`` only enforces if slurmctld loads the
job-submit plugin, the plugin reads the heartbeat this daemon writes, and
that write succeeds.  None of it can be taken on trust, so:

* at start (:func:`preflight`), a heartbeat directory that cannot be created
  or written, or is writable by others (a FIFO there would block the
  plugin), a live configuration (``scontrol show config``) without the Lua
  job-submit plugin, or an installed plugin that reads another heartbeat
  path, is a configuration error (exit 78) naming the fix;
* every cycle (:class:`StampWatch`), the jobs submitted since this daemon
  began to say ``enforce=1`` must carry the ``hb=SEQ`` the plugin stamps
  into their admin comment, with a sequence this daemon wrote.  The newest
  such job decides: unstamped means the plugin did not see the heartbeat
  (not loaded, another path, another host); a foreign sequence means it
  reads another daemon's file.  Either makes the daemon ``degraded``: it
  says so in its status, metrics and log (once per change), and Slurm
  schedules those jobs as if slurmopt were absent.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections import OrderedDict
from collections.abc import Collection, Mapping
from pathlib import Path

from slurmopt.errors import ConfigError
from slurmopt.model import ClusterSnapshot, Job
from slurmopt.tag import PREFIX, heartbeat_stamp

#: Seconds after the first enforcing heartbeat before a new job must carry a stamp.
STAMP_GRACE_S = 2.0
#: Heartbeat sequences remembered (a day of writes at a 5 s interval is far more than needed).
REMEMBERED_SEQS = 4096


def plugin_configured(config: Mapping[str, str]) -> str | None:
    """Why the live configuration does not load the Lua job-submit plugin, or None if it does."""
    from slurmopt.plugin import loads_lua

    if loads_lua(config):
        return None
    shown = config.get("JobSubmitPlugins") or "(none)"
    return (
        f"slurmctld does not load the job-submit plugin (JobSubmitPlugins={shown}): run "
        "`slurmopt plugin install`, add lua to JobSubmitPlugins in slurm.conf and restart "
        "slurmctld"
    )


def prepare_heartbeat_dir(path: str) -> str | None:
    """Create the heartbeat's directory (mode 0755) and prove it writable; why not, or None.

    A directory others may write is refused: anyone who can put a FIFO at
    the heartbeat path could stall slurmctld's job-submit plugin.
    """
    directory = Path(path).parent
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        return (
            f"cannot create the heartbeat directory {directory}: {exc.strerror or exc}; create "
            "it for the daemon's user or set heartbeat_path"
        )
    try:
        info = directory.stat()
    except OSError as exc:
        return f"cannot read the heartbeat directory {directory}: {exc.strerror or exc}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"the heartbeat directory {directory} is writable by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):o}): chmod go-w {directory}"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".slurmopt-probe."):
            pass
    except OSError as exc:
        return (
            f"cannot write in the heartbeat directory {directory}: {exc.strerror or exc}; give "
            "the daemon's user write access or set heartbeat_path"
        )
    target = Path(path)
    if target.exists() and not target.is_file():
        return f"the heartbeat path {path} exists and is not a regular file: remove it"
    return None


def installed_plugin_problem(
    heartbeat_path: str, env: Mapping[str, str] | None = None
) -> str | None:
    """An installed plugin beside slurm.conf that reads another heartbeat path, or None.

    Only readable on the controller's host; elsewhere the job stamps prove it.
    """
    from slurmopt.plugin import baked_settings, default_dest

    script = default_dest(env) / "job_submit.lua"
    try:
        text = script.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    baked = baked_settings(text)
    if baked is None or os.path.realpath(baked.heartbeat_path) == os.path.realpath(
        heartbeat_path
    ):
        return None
    return (
        f"the job-submit plugin {script} reads heartbeat {baked.heartbeat_path}, but this "
        f"daemon writes {heartbeat_path}: run `slurmopt plugin install`"
    )


def wrong_user(daemon_user: str, uid: int | None = None) -> str | None:
    """Why this process may not run the daemon (it is not ``daemon_user``), or None."""
    import pwd

    if not daemon_user:
        return None
    uid = os.geteuid() if uid is None else uid
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    if name == daemon_user:
        return None
    return (
        f"slurmopt daemon runs as {name}, but daemon_user is {daemon_user}: run it as "
        f"{daemon_user} (systemd User={daemon_user}), so the store stays that user's"
    )


def preflight(
    heartbeat_path: str,
    live_config: Mapping[str, str] | None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Raise :class:`ConfigError` (exit 78) when enforcement cannot work; see the module doc.

    ``live_config`` None means Slurm could not be asked now: the plugin is
    then proven by the job stamps once Slurm answers.
    """
    problem = prepare_heartbeat_dir(heartbeat_path)
    if problem is None and live_config is not None:
        problem = plugin_configured(live_config)
    if problem is None:
        problem = installed_plugin_problem(heartbeat_path, env)
    if problem is not None:
        raise ConfigError(f"cannot enforce: {problem}")


class StampWatch:
    """The heartbeat sequences this daemon wrote, and what the plugin's stamps say of them."""

    def __init__(self) -> None:
        self._seqs: OrderedDict[int, float] = OrderedDict()
        self.enforcing_since: float | None = None
        self.last_seq = 0
        #: The newest sequence found stamped into a job (None: none yet).
        self.seen: int | None = None

    def next_seq(self, now: float) -> int:
        """A sequence larger than any written before, also across restarts (milliseconds)."""
        self.last_seq = max(int(now * 1000), self.last_seq + 1)
        return self.last_seq

    def wrote(self, seq: int, now: float, enforce: bool) -> None:
        """Record a heartbeat written; ``enforce=0`` ends the current enforcing streak."""
        if not enforce:
            self.enforcing_since = None
            return
        if self.enforcing_since is None:
            self.enforcing_since = now
        self._seqs[seq] = now
        while len(self._seqs) > REMEMBERED_SEQS:
            self._seqs.popitem(last=False)

    def interrupted(self) -> None:
        """This daemon lost the lease: another may write the heartbeat, so its streak ends."""
        self.enforcing_since = None

    @staticmethod
    def _must_be_stamped(job: Job, managed_partitions: Collection[str]) -> bool:
        if job.gpus_per_node <= 0 or job.het_job_id:
            return False
        if job.comment.startswith(PREFIX) or "*" in managed_partitions:
            return True
        return any(p in managed_partitions for p in job.partition.split(",") if p)

    def check(self, snapshot: ClusterSnapshot, managed_partitions: Collection[str]) -> str | None:
        """Why the plugin is not proven to enforce, from the newest job it should have stamped."""
        since = self.enforcing_since
        if since is None:
            return None
        newest: Job | None = None
        for job in snapshot.jobs.values():
            if job.submit_time is None or job.submit_time < since + STAMP_GRACE_S:
                continue
            if not self._must_be_stamped(job, managed_partitions):
                continue
            stamp = heartbeat_stamp(job.admin_comment)
            if stamp is not None and stamp in self._seqs:
                self.seen = max(self.seen or 0, stamp)
            if newest is None or (job.submit_time, job.job_id) > (
                newest.submit_time or 0.0,
                newest.job_id,
            ):
                newest = job
        if newest is None:
            return None
        stamp = heartbeat_stamp(newest.admin_comment)
        if stamp is None:
            return (
                f"job {newest.job_id}, submitted while this daemon enforced, was not tagged by "
                "the job-submit plugin: is JobSubmitPlugins=lua set on slurmctld and the plugin "
                "installed for this heartbeat path?"
            )
        if stamp not in self._seqs:
            return (
                f"the job-submit plugin stamped job {newest.job_id} with heartbeat {stamp}, "
                "which this daemon did not write: does it read another heartbeat path?"
            )
        return None


__all__ = [
    "STAMP_GRACE_S",
    "StampWatch",
    "installed_plugin_problem",
    "plugin_configured",
    "preflight",
    "wrong_user",
    "prepare_heartbeat_dir",
]
