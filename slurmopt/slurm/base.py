"""The one interface every Slurm adapter implements.

Reads return complete, immutable snapshots or raise a typed
:mod:`slurmopt.errors` exception; they never return half-filled data.
Writes are thin wrappers over single Slurm calls, so the daemon can record
each one before it makes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from slurmopt.model import ACTIVE_JOB_STATES, ClusterSnapshot, JobState


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One job's state as Slurm reports it now, and its exit status once it has ended.

    Enough for a command that submitted a job to wait for it by polling,
    without reading (and parsing) the whole cluster each time.
    """

    job_id: int
    state: JobState
    #: The batch script's exit status (``ExitCode=N:S``: N, or 128+S when a signal killed it);
    #: None while the job has not ended or where Slurm does not say.
    exit_code: int | None = None

    @property
    def ended(self) -> bool:
        """Neither waiting nor holding nodes: the job will not change any more."""
        return self.state not in ACTIVE_JOB_STATES and self.state not in _WAITING


#: States of a job that has not started yet (or is being started again).
_WAITING = frozenset({JobState.PENDING, JobState.REQUEUED, JobState.RESIZING, JobState.UNKNOWN})


@runtime_checkable
class SlurmClient(Protocol):
    """Read Slurm's state; hold, release, pin, signal, requeue, shrink, submit; drain nodes."""

    #: Short name of the implementation ("cli", "rest", "pyslurm", "sim").
    name: str

    def snapshot(self) -> ClusterSnapshot:
        """Nodes, jobs and partitions as Slurm reports them now."""
        ...

    def topology_text(self) -> str | None:
        """``scontrol show topology`` output, or None where Slurm has no topology plugin."""
        ...

    def hold(self, job_id: int) -> None: ...

    def release(self, job_id: int) -> None: ...

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        """Restrict a pending job to exactly these nodes (``scontrol update NodeList=``)."""
        ...

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None: ...

    def requeue(self, job_id: int, hold: bool = True) -> None: ...

    def shrink(self, job_id: int, node_count: int) -> None:
        """Set the job's node count (``NumNodes=``): a running job gives nodes back; a pending
        elastic job is set to the count it will be pinned to."""
        ...

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None: ...

    def submit(
        self, argv: Sequence[str], script: str | None = None, env: Mapping[str, str] | None = None
    ) -> int:
        """Run sbatch with ``argv`` (and the script on stdin if given); return the job id.

        ``env`` is added to sbatch's environment, which sbatch passes on to the job.
        """
        ...

    def cancel(self, job_id: int) -> None:
        """Cancel one job (``scancel ID``), pending or running."""
        ...

    def job_status(self, job_id: int) -> JobStatus | None:
        """One job's state and exit status, or None when Slurm no longer knows the job."""
        ...

    def drain(self, node: str, reason: str) -> None:
        """Drain one node with ``reason`` (``scontrol update NodeName= State=DRAIN Reason=``)."""
        ...
