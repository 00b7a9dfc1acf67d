"""The command-line adapter: Slurm's own ``squeue``/``sinfo``/``scontrol``/``scancel``/``sbatch``.

Reads use the JSON each release offers (``squeue --json``; ``sinfo --json``
on 22.05, ``scontrol show nodes --json`` from 23.02 on, where ``sinfo``
groups nodes) and ``scontrol show partition -o`` where ``scontrol`` has no
``--json``.  Writes are single ``scontrol``/``scancel``/``sbatch`` calls.
One job's state comes from ``scontrol show job -o`` (every release speaks
it), then from ``sacct`` once slurmctld has forgotten the job.

The command runner is injected so tests can replay recorded output; the
default one runs the real binaries with a timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from slurmopt.errors import SlurmCommandError, SlurmResponseError, SlurmUnavailable
from slurmopt.hostlist import fold
from slurmopt.model import ClusterSnapshot, JobState
from slurmopt.slurm import parse
from slurmopt.slurm.base import JobStatus


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one Slurm command printed and returned."""

    returncode: int
    stdout: str
    stderr: str


#: Variables added to the environment a command runs in.
Env = Mapping[str, str] | None


class CommandRunner(Protocol):
    """``runner(argv, stdin, timeout_s[, env]) -> CommandResult``.

    ``env`` (variables added to the command's environment) is passed only
    when a call has one, so a runner that replays recorded output may take
    three arguments.  May raise ``FileNotFoundError`` (missing binary) or
    ``subprocess.TimeoutExpired``; the client maps both to
    :class:`SlurmUnavailable`.
    """

    def __call__(
        self, argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
    ) -> CommandResult: ...


#: Phrases with which Slurm's commands say the controller cannot be reached.
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|Communication connection failure|"
    r"Unable to establish controller machine|Unable to process configuration file",
    re.IGNORECASE,
)

#: Releases from which ``scontrol`` speaks JSON and ``sinfo --json`` is grouped.
SCONTROL_JSON_SINCE = (23, 2)


class SubprocessRunner:
    """Runs the real Slurm binaries, optionally with another ``SLURM_CONF``."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env) if env is not None else None

    def __call__(
        self, argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
    ) -> CommandResult:
        full = {**(self.env if self.env is not None else os.environ), **env} if env else self.env
        proc = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full,
            check=False,
        )
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def version_tuple(release: str) -> tuple[int, int]:
    """``(24, 11)`` from ``24.11.5`` or ``slurm-wlm 24.11.5``, else :class:`SlurmResponseError`."""
    match = re.search(r"(\d+)\.(\d+)", release)
    if not match:
        raise SlurmResponseError(f"cannot tell the Slurm release from {release.strip()[:60]!r}")
    return int(match[1]), int(match[2])


def _status(job_id: int, state: str, exit_code: str | None) -> JobStatus:
    """A :class:`JobStatus` from Slurm's words: ``CANCELLED by 1000``, ``ExitCode=1:0``."""
    word = state.split()[0].rstrip("+") if state.split() else ""
    known = word in JobState.__members__
    status = JobStatus(job_id, JobState(word) if known else JobState.UNKNOWN)
    code, _, sig = (exit_code or "").partition(":")
    if not status.ended or not code.isdigit():
        return status
    killed = int(sig) if sig.isdigit() else 0
    return JobStatus(job_id, status.state, 128 + killed if killed else int(code))


def _first_line(result: CommandResult) -> str:
    """What a one-line error names of a failed command: its first line of stderr, or its exit."""
    return (result.stderr.strip() or f"exit {result.returncode}").splitlines()[0]


class CliSlurmClient:
    """:class:`~slurmopt.slurm.base.SlurmClient` over Slurm's command-line tools."""

    name = "cli"

    def __init__(
        self,
        runner: CommandRunner | None = None,
        timeout: float = 30.0,
        slurm_conf: str | None = None,
    ) -> None:
        if runner is None:
            env = {**os.environ, "SLURM_CONF": slurm_conf} if slurm_conf else None
            runner = SubprocessRunner(env)
        self.runner = runner
        self.timeout = timeout
        self._release: str | None = None

    # ------------------------------------------------------------------ plumbing

    def _call(
        self, argv: Sequence[str], stdin: str | None = None, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        try:
            if env:
                return self.runner(argv, stdin, self.timeout, env)
            return self.runner(argv, stdin, self.timeout)
        except FileNotFoundError:
            raise SlurmUnavailable(f"{argv[0]}: command not found (is Slurm installed?)") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(
                f"{' '.join(argv[:3])}: no answer within {self.timeout:g} s"
            ) from None
        except OSError as exc:
            raise SlurmUnavailable(f"{argv[0]}: cannot run: {exc}") from None

    def _controller_down(self) -> str | None:
        """Why slurmctld is unreachable, or None when ``scontrol ping`` says it is UP."""
        try:
            ping = self._call(["scontrol", "ping"])
        except SlurmUnavailable as exc:
            return str(exc)
        text = (ping.stdout + ping.stderr).strip()
        if re.search(r"\bUP\b", text):
            return None
        return text.splitlines()[0] if text else f"scontrol ping exit {ping.returncode}"

    def _read(self, argv: Sequence[str]) -> str:
        """Run a read; a failure is the controller's (unavailable) or the answer's (response)."""
        result = self._call(argv)
        what = " ".join(argv)
        if result.returncode != 0 or _UNREACHABLE.search(result.stderr):
            first = _first_line(result)
            if _UNREACHABLE.search(result.stderr):
                # 22.05 reports it inside squeue's JSON (below); later releases on stderr.
                raise SlurmUnavailable(f"{what}: slurmctld unreachable: {first}")
            down = self._controller_down()
            if down is not None:
                raise SlurmUnavailable(f"{what}: slurmctld unreachable: {down}")
            raise SlurmResponseError(f"{what}: {first}")
        return result.stdout

    def output(self, argv: Sequence[str], what: str) -> str:
        """A helper command's stdout (``scontrol token``), or SlurmUnavailable naming ``what``.

        Not a read of the cluster's state, so a failure is not put down to the
        controller (no ``scontrol ping``): its own first line of stderr says why.
        """
        result = self._call(argv)
        if result.returncode != 0:
            raise SlurmUnavailable(f"{what} failed: {_first_line(result)}")
        return result.stdout

    def _read_json(self, argv: Sequence[str]) -> dict[str, object]:
        text = self._read(argv)
        what = " ".join(argv)
        try:
            return parse.load_json(text, what)
        except SlurmResponseError:
            # 22.05 reports an unreachable controller inside the JSON, with exit 0.
            down = self._controller_down()
            if down is not None:
                raise SlurmUnavailable(f"{what}: slurmctld unreachable: {down}") from None
            raise

    def _write(
        self, argv: Sequence[str], stdin: str | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        result = self._call(argv, stdin, env)
        if result.returncode != 0:
            raise SlurmCommandError(list(argv), result.returncode, result.stderr)
        return result.stdout

    # ------------------------------------------------------------------ reads

    def slurm_release(self) -> str:
        """Slurm's release as ``sinfo --version`` reports it (``22.05.8``), read once.

        The client runs whatever ``sinfo`` its ``PATH`` finds (the host's, or a
        chroot's through the sandbox's wrappers), so this is the release of the
        commands it talks through, and every read picks its commands by it.
        """
        if self._release is None:
            text = self._read(["sinfo", "--version"])
            version_tuple(text)
            self._release = text.split()[-1] if text.split() else text.strip()
        return self._release

    @property
    def slurm_version(self) -> str:
        """The detected release (``24.11.5``); same as :meth:`slurm_release`."""
        return self.slurm_release()

    def snapshot(self) -> ClusterSnapshot:
        """All of jobs, nodes and partitions, or an error; never part of them."""
        taken_at = time.time()
        modern = version_tuple(self.slurm_release()) >= SCONTROL_JSON_SINCE
        jobs_argv = ["squeue", "--json"]
        jobs_doc = self._read_json(jobs_argv)
        if modern:
            nodes_argv = ["scontrol", "show", "nodes", "--json"]
            parts_argv = ["scontrol", "show", "partitions", "--json"]
            nodes_doc = self._read_json(nodes_argv)
            parts_doc = self._read_json(parts_argv)
            partitions = parse.parse_partitions_json(parts_doc, " ".join(parts_argv))
            if not parse.partitions_mark_default(parts_doc):
                partitions = parse.with_defaults(partitions, self.default_partitions())
        else:
            nodes_argv = ["sinfo", "--json"]
            parts_argv = ["scontrol", "show", "partition", "-o"]
            nodes_doc = self._read_json(nodes_argv)
            partitions = parse.parse_partitions_text(self._read(parts_argv), " ".join(parts_argv))
        return parse.build_snapshot(
            jobs_doc,
            nodes_doc,
            partitions,
            taken_at=taken_at,
            source=self.name,
            jobs_source=" ".join(jobs_argv),
            nodes_source=" ".join(nodes_argv),
            slurm_version=self.slurm_release(),
        )

    def default_partitions(self) -> set[str]:
        """The default partition's name (a set: none or one), from ``scontrol show partition -o``.

        Every release prints ``Default=YES`` there; 24.11's JSON does not say.
        """
        argv = ["scontrol", "show", "partition", "-o"]
        parts = parse.parse_partitions_text(self._read(argv), " ".join(argv))
        return {part.name for part in parts if part.default}

    def slurm_config(self) -> dict[str, str]:
        """The running slurmctld's configuration (``scontrol show config``), key to value."""
        return parse.parse_config_text(self._read(["scontrol", "show", "config"]))

    def topology_text(self) -> str | None:
        text = self._read(["scontrol", "show", "topology"])
        # 22.05 prints load errors on stdout with exit 0.
        if _UNREACHABLE.search(text):
            raise SlurmUnavailable(f"scontrol show topology: {text.strip().splitlines()[0]}")
        if "SwitchName=" not in text:
            return None
        return text

    def job_status(self, job_id: int) -> JobStatus | None:
        argv = ["scontrol", "show", "job", "-o", str(job_id)]
        try:
            text = self._read(argv)
        except SlurmResponseError as exc:
            if "invalid job id" not in str(exc).lower():
                raise
            return self._accounted_status(job_id)
        state = re.search(r"(?:^|\s)JobState=(\S+)", text)
        if state is None:
            raise SlurmResponseError(f"{' '.join(argv)}: no JobState in {text.strip()[:60]!r}")
        code = re.search(r"(?:^|\s)ExitCode=(\S+)", text)
        return _status(job_id, state[1], code[1] if code else None)

    def _accounted_status(self, job_id: int) -> JobStatus | None:
        """A job slurmctld has forgotten (after ``MinJobAge``), from accounting where it runs."""
        result = self._call(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State,ExitCode"])
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            return None
        state, _, code = lines[0].partition("|")
        return _status(job_id, state, code)

    # ------------------------------------------------------------------ writes

    def hold(self, job_id: int) -> None:
        self._write(["scontrol", "hold", str(job_id)])

    def release(self, job_id: int) -> None:
        self._write(["scontrol", "release", str(job_id)])

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        self._write(["scontrol", "update", f"JobId={job_id}", f"NodeList={fold(nodes)}"])

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        scope = "--batch" if batch_only else "--full"
        self._write(["scancel", f"--signal={signal}", scope, str(job_id)])

    def requeue(self, job_id: int, hold: bool = True) -> None:
        self._write(["scontrol", "requeuehold" if hold else "requeue", str(job_id)])

    def shrink(self, job_id: int, node_count: int) -> None:
        self._write(["scontrol", "update", f"JobId={job_id}", f"NumNodes={node_count}"])

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        key = "AdminComment" if admin else "Comment"
        self._write(["scontrol", "update", f"JobId={job_id}", f"{key}={text}"])

    def submit(
        self, argv: Sequence[str], script: str | None = None, env: Mapping[str, str] | None = None
    ) -> int:
        full = ["sbatch", "--parsable", *argv]
        out = self._write(full, script, env)
        job = out.strip().split(";")[0]
        if not job.isdigit():
            raise SlurmResponseError(
                f"sbatch --parsable printed {out.strip()[:60]!r}, not a job id"
            )
        return int(job)

    def cancel(self, job_id: int) -> None:
        self._write(["scancel", str(job_id)])

    def drain(self, node: str, reason: str) -> None:
        self._write(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        """Return a drained node to service (the node agent undoing its own drain)."""
        self._write(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


class ScontrolWrites:
    """Writes (and topology, and one job's status) through a :class:`CliSlurmClient`.

    slurmrestd v0.0.38 cannot pin nodes and has no topology endpoint; pyslurm
    lacks some updates.  Adapters that read another way inherit this and
    override only the writes they can do natively.
    """

    cli: CliSlurmClient

    def topology_text(self) -> str | None:
        return self.cli.topology_text()

    def slurm_config(self) -> dict[str, str]:
        return self.cli.slurm_config()

    def hold(self, job_id: int) -> None:
        self.cli.hold(job_id)

    def release(self, job_id: int) -> None:
        self.cli.release(job_id)

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        self.cli.pin(job_id, nodes)

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        self.cli.signal(job_id, signal, batch_only)

    def requeue(self, job_id: int, hold: bool = True) -> None:
        self.cli.requeue(job_id, hold)

    def shrink(self, job_id: int, node_count: int) -> None:
        self.cli.shrink(job_id, node_count)

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        self.cli.set_comment(job_id, text, admin)

    def submit(
        self, argv: Sequence[str], script: str | None = None, env: Mapping[str, str] | None = None
    ) -> int:
        return self.cli.submit(argv, script, env)

    def cancel(self, job_id: int) -> None:
        self.cli.cancel(job_id)

    def job_status(self, job_id: int) -> JobStatus | None:
        return self.cli.job_status(job_id)

    def drain(self, node: str, reason: str) -> None:
        self.cli.drain(node, reason)

    def resume(self, node: str) -> None:
        self.cli.resume(node)
