"""Running ``slurmopt verify``'s benchmark job: choose, render, submit, wait, read, judge.

The command (:mod:`slurmopt.cli.verify`) only parses options and prints;
:class:`VerifyRunner` does the rest through a :class:`SlurmClient`, so a
test drives it with the shared fake Slurm and a fake clock.

It submits with ``sbatch --parsable`` and then *polls* the job's state
through the client (:meth:`SlurmClient.job_status`), backing off from 1 s
to 10 s, rather than blocking in ``sbatch --wait``: the timeout is then a
plain comparison with the injected clock, and the job is cancelled by id
through the same client, exactly once, whether the wait ends by timeout,
Ctrl-C or an error.  A controller that stops answering while the job runs
is polled again until the timeout, as ``sbatch --wait`` would.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from slurmopt.errors import (
    SlurmCommandError,
    SlurmError,
    SlurmResponseError,
    SlurmUnavailable,
    UsageError,
)
from slurmopt.fabric.core import Fabric
from slurmopt.model import ClusterSnapshot, JobState
from slurmopt.slurm.base import JobStatus, SlurmClient
from slurmopt.verify import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MIN_EFFICIENCY,
    DEFAULT_NODES,
    DEFAULT_OUTLIER,
    BenchDocumentError,
    BenchJobFailed,
    PlannedGroup,
    VerifyReport,
    VerifyTimeout,
    check_thresholds,
    choose_nodes,
    evaluate,
    parse_document,
    plan_groups,
    ring_order,
)

#: The template the job is rendered from.
TEMPLATE = "nccl-allreduce-bench"
#: Default wait for the job (pending and running), in seconds.
DEFAULT_TIMEOUT_S = 900
#: Files the job leaves in the work directory: ``<prefix>-<token>.json`` and ``...-<job>.out``.
FILE_PREFIX = "slurmopt-verify"
#: First and longest pause between two looks at the job's state, in seconds.
POLL_FIRST_S = 1.0
POLL_MAX_S = 10.0

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str, option: str) -> int:
    """Bytes from ``1024``, ``64K``, ``256MiB``, ``1G`` (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise UsageError(f"{option}: cannot read {text!r}: give bytes, or a number with K, M or G")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def human_bytes(size: int) -> str:
    """``268435456`` -> ``256 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


# ---------------------------------------------------------------------- the request


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """What to test and how to judge it: the command's options, checked (:meth:`check`)."""

    #: Where the job runs and writes its files (:func:`check_workdir`).
    workdir: Path = Path(".")
    node_count: int = DEFAULT_NODES
    #: ``--nodelist`` expanded: test exactly these nodes (empty: choose ``node_count``).
    nodelist: tuple[str, ...] = ()
    partition: str | None = None
    nproc_per_node: int = 1
    min_bytes: int = 1 << 10
    max_bytes: int = DEFAULT_MAX_BYTES
    iters: int = 5
    timeout_s: float = DEFAULT_TIMEOUT_S
    min_efficiency: float = DEFAULT_MIN_EFFICIENCY
    outlier: float = DEFAULT_OUTLIER
    expect_busbw: float | None = None
    rdzv_port: int | None = None
    sbatch_args: tuple[str, ...] = ()

    def check(self) -> None:
        """Refuse values no run could use, before Slurm is asked anything; each error names
        its option."""
        if self.node_count < 2:
            raise UsageError(f"--nodes must be at least 2, got {self.node_count}")
        if self.nproc_per_node < 1:
            raise UsageError(f"--nproc-per-node must be at least 1, got {self.nproc_per_node}")
        low, high = self.min_bytes, self.max_bytes
        if not 4 <= low <= high:
            raise UsageError(f"--min-bytes must be 4 to --max-bytes ({high}), got {low}")
        if high > DEFAULT_MAX_BYTES:
            raise UsageError(f"--max-bytes is at most {human_bytes(DEFAULT_MAX_BYTES)}")
        if self.iters < 1:
            raise UsageError(f"--iters must be at least 1, got {self.iters}")
        if not self.timeout_s > 0:
            raise UsageError(
                f"--timeout must be a positive number of seconds, got {self.timeout_s:g}"
            )
        check_thresholds(self.min_efficiency, self.outlier, self.expect_busbw)
        port = self.rdzv_port
        if port is not None and not 1 <= port <= 65535:
            raise UsageError(f"--rdzv-port must be 1 to 65535, got {port}")


def check_workdir(given: str | None) -> Path:
    """The work directory (default: the current one), which the job must be able to write."""
    path = Path(given or os.getcwd()).resolve()
    if not path.is_dir():
        raise UsageError(f"--workdir {path}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--workdir {path}: not writable")
    return path


def expand_nodelist(text: str, node_count: int, count_given: bool) -> tuple[str, ...]:
    """``--nodelist`` as node names: at least two, as many as ``--nodes`` when that is given."""
    from slurmopt.hostlist import HostlistError, expand

    try:
        names = expand(text)
    except HostlistError as exc:
        raise UsageError(f"--nodelist: {exc}") from None
    if len(names) < 2:
        raise UsageError(f"--nodelist must name at least 2 nodes, got {text!r}")
    if count_given and node_count != len(names):
        raise UsageError(f"--nodes {node_count} but --nodelist names {len(names)} nodes")
    return tuple(names)


# ---------------------------------------------------------------------- the job


@dataclass(frozen=True, slots=True)
class BenchJob:
    """The benchmark job as it is submitted: sbatch's arguments, the script, its files."""

    name: str
    workdir: Path
    document: Path
    argv: tuple[str, ...]
    script: str
    #: Added to sbatch's environment, which the job inherits.
    env: Mapping[str, str]

    def output(self, job_id: int) -> Path:
        """The job's output file (``--output=<name>-%j.out``)."""
        return self.workdir / f"{self.name}-{job_id}.out"


def render_job(
    request: VerifyRequest,
    snapshot: ClusterSnapshot,
    ring: Sequence[str],
    groups: Sequence[PlannedGroup],
    token: str,
) -> BenchJob:
    """The ``nccl-allreduce-bench`` job over ``ring``, running every planned group too."""
    from slurmopt.hostlist import fold
    from slurmopt.templates import TemplateValues, render

    work = request.workdir
    name = f"{FILE_PREFIX}-{token}"
    document = work / f"{name}.json"
    program_args = ["--out", str(document), "--min-bytes", str(request.min_bytes)]
    program_args += ["--max-bytes", str(request.max_bytes), "--iters", str(request.iters)]
    for group in groups:
        program_args += ["--group", f"{group.name}={fold(group.nodes)}"]
    values = TemplateValues(
        program="slurmopt.elastic.bench",
        program_args=program_args,
        min_nodes=len(ring),
        max_nodes=len(ring),
        nproc_per_node=request.nproc_per_node,
        rdzv_port=request.rdzv_port or TemplateValues.rdzv_port,
    )
    argv = [
        f"--job-name={name}",
        f"--output={work / name}-%j.out",
        f"--chdir={work}",
        f"--nodes={len(ring)}",
        f"--nodelist={fold(ring)}",
        "--exclusive",
        f"--time={math.ceil(request.timeout_s / 60) + 1}",
    ]
    if request.partition is not None:
        argv.append(f"--partition={request.partition}")
    if all(snapshot.nodes[n].gpus_total >= request.nproc_per_node for n in ring):
        argv.append(f"--gpus-per-node={request.nproc_per_node}")
    argv += request.sbatch_args  # last, so that they win
    # The option beats the environment: the job inherits sbatch's.
    env = {} if request.rdzv_port is None else {"SLURMOPT_RDZV_PORT": str(request.rdzv_port)}
    return BenchJob(name, work, document, tuple(argv), render(TEMPLATE, values), env)


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _with_last_line(message: str, output: Path) -> str:
    last = _last_line(output)
    return message + (f" (last line: {last})" if last else "")


def read_document(job: BenchJob, job_id: int) -> Any:
    """The benchmark's JSON document, or why there is none (naming the job's output)."""
    try:
        return json.loads(job.document.read_text(encoding="utf-8"))
    except FileNotFoundError:
        output = job.output(job_id)
        raise BenchDocumentError(
            _with_last_line(
                f"benchmark job {job_id} wrote no report to {job.document}; its output is {output}",
                output,
            )
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchDocumentError(f"cannot read {job.document}: {exc}") from None


def _token() -> str:
    return secrets.token_hex(4)


def _stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


# ---------------------------------------------------------------------- the runner


@dataclass
class VerifyRunner:
    """Runs one verification through ``client``; ``clock`` and ``sleep`` pace the wait.

    ``fabric_for(snapshot)`` gives the fabric to judge against; ``warn``
    receives sbatch's own error text, verbatim, when it refuses the job;
    ``token`` names the job's files.
    """

    client: SlurmClient
    fabric_for: Callable[[ClusterSnapshot], Fabric]
    _: KW_ONLY
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    warn: Callable[[str], None] = _stderr
    token: Callable[[], str] = _token

    def run(self, request: VerifyRequest) -> VerifyReport:
        """Choose the nodes, run the benchmark on them, and judge what it measured."""
        from slurmopt.hostlist import fold

        snapshot = self.client.snapshot()
        partition = request.partition
        if partition is not None and partition not in snapshot.partitions:
            known = ", ".join(sorted(snapshot.partitions)) or "none"
            raise UsageError(f"unknown partition {partition!r} (known: {known})")
        fabric = self.fabric_for(snapshot)
        if request.nodelist:
            unknown = [n for n in request.nodelist if n not in snapshot.nodes]
            if unknown:
                raise UsageError(f"--nodelist: not Slurm nodes: {fold(unknown)}")
            ring = ring_order(request.nodelist, fabric)
        else:
            ring = choose_nodes(snapshot, fabric, request.node_count, partition)
        job = render_job(request, snapshot, ring, plan_groups(ring, fabric), self.token())
        job_id = self.run_job(job, request.timeout_s)
        files = {"output": str(job.output(job_id)), "document": str(job.document)}
        return evaluate(
            parse_document(read_document(job, job_id), str(job.document)),
            fabric,
            ring,
            min_efficiency=request.min_efficiency,
            outlier=request.outlier,
            expect_busbw=request.expect_busbw,
            job={"id": str(job_id), **files},
        )

    def run_job(self, job: BenchJob, timeout_s: float) -> int:
        """Submit ``job``, wait for it to end (cancelling it when the wait does not end well)."""
        deadline = self.clock() + timeout_s
        job_id = self.submit(job)
        try:
            status = self.wait(job_id, deadline, timeout_s)
        except BaseException:
            self.cancel(job_id)
            raise
        if status is not None and (
            status.state is not JobState.COMPLETED or status.exit_code not in (None, 0)
        ):
            how = f"exit {status.exit_code}" if status.exit_code else status.state.value
            output = job.output(job_id)
            raise BenchJobFailed(
                _with_last_line(
                    f"benchmark job {job_id} failed ({how}); its output is {output}", output
                )
            )
        return job_id

    def submit(self, job: BenchJob) -> int:
        """The job's id; a refusal passes sbatch's words through, then fails in one line."""
        try:
            return self.client.submit(job.argv, job.script, job.env or None)
        except SlurmCommandError as exc:
            if exc.stderr:
                self.warn(exc.stderr)
            raise SlurmError(
                f"{exc.argv[0]} did not submit the benchmark job (exit {exc.returncode})"
            ) from None
        except SlurmResponseError as exc:
            raise SlurmError(str(exc)) from None

    def wait(self, job_id: int, deadline: float, timeout_s: float) -> JobStatus | None:
        """The job's final status (None when Slurm forgot it), or :class:`VerifyTimeout`."""
        delay = POLL_FIRST_S
        while True:
            try:
                status = self.client.job_status(job_id)
            except SlurmUnavailable:
                status = JobStatus(job_id, JobState.UNKNOWN)  # ask again, until the deadline
            if status is None or status.ended:
                return status
            left = deadline - self.clock()
            if left <= 0:
                raise VerifyTimeout(
                    f"benchmark job {job_id} did not finish within {timeout_s:g} s "
                    "(pending or running); it was cancelled"
                )
            self.sleep(min(delay, left))
            delay = min(delay * 2, POLL_MAX_S)

    def cancel(self, job_id: int) -> None:
        """Best effort: the error that stopped the wait is the one to report."""
        try:
            self.client.cancel(job_id)
        except SlurmError:
            pass


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FILE_PREFIX",
    "TEMPLATE",
    "BenchJob",
    "VerifyRequest",
    "VerifyRunner",
    "check_workdir",
    "expand_nodelist",
    "human_bytes",
    "parse_size",
    "read_document",
    "render_job",
]
