"""The one interface every Slurm adapter implements.

Reads return complete, immutable snapshots or raise a typed
:mod:`slurmopt.errors` exception; they never return half-filled data.
Writes are thin wrappers over single Slurm calls, so the daemon can record
each one before it makes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from slurmopt.model import ClusterSnapshot


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

    def submit(self, argv: Sequence[str], script: str | None = None) -> int:
        """Run sbatch with ``argv`` (and the script on stdin if given); return the job id."""
        ...

    def drain(self, node: str, reason: str) -> None:
        """Drain one node with ``reason`` (``scontrol update NodeName= State=DRAIN Reason=``)."""
        ...
