"""What a training loop calls each step: is a checkpoint requested, and the acknowledgement.

The batch shell turns the checkpoint signal into ``$SLURMOPT_CKPT_DIR/preempt-requested``
(one stat per step is all a rank pays).  Only ranks on the batch node can see
that file, so the ranks agree through an all-reduce (max) of the flag: every
rank stops at the same step.  Rank 0 then saves, waits for the copy to
shared storage, and acknowledges by adding ``ckpt=STEP@UNIX`` to the job's
own comment (``scontrol update JobId=$SLURM_JOB_ID Comment=...``: Slurm lets
only the job's owner or root do that).  The file ``preempted`` tells the
batch shell to stay up until the daemon requeues the job.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmopt.tag import with_checkpoint

REQUEST_FILE = "preempt-requested"
PREEMPTED_FILE = "preempted"

#: ``run(argv) -> stdout``; raises ``subprocess.CalledProcessError`` on failure.
Runner = Callable[[Sequence[str]], str]


def run_command(argv: Sequence[str]) -> str:
    """Run a Slurm command with a timeout; its stdout."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout


@dataclass(frozen=True)
class JobEnv:
    """The job's identity and directories, from the environment the template sets."""

    job_id: int | None
    ckpt_dir: Path
    shared_dir: Path
    collective_timeout_s: float

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> JobEnv:
        env = os.environ if environ is None else environ
        job = env.get("SLURM_JOB_ID")
        ckpt = Path(env.get("SLURMOPT_CKPT_DIR") or "checkpoints-local")
        shared = Path(env.get("SLURMOPT_CKPT_SHARED") or "checkpoints")
        minutes = float(env.get("SLURMOPT_COLLECTIVE_TIMEOUT_MIN") or 5)
        return cls(int(job) if job and job.isdigit() else None, ckpt, shared, minutes * 60)


def checkpoint_requested(ckpt_dir: Path) -> bool:
    """Whether the batch shell has passed on a checkpoint request (one stat)."""
    return (ckpt_dir / REQUEST_FILE).exists()


def agree(local_flag: bool, all_reduce_max: Callable[[int], int] | None = None) -> bool:
    """True on every rank when any rank saw the request (``all_reduce_max`` spans the world)."""
    value = 1 if local_flag else 0
    return bool(all_reduce_max(value) if all_reduce_max is not None else value)


def torch_all_reduce_max(value: int) -> int:
    """The max of ``value`` over the default torch.distributed group."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return value
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def read_comment(job_id: int, run: Runner = run_command) -> str:
    """The job's comment as Slurm has it now."""
    return run(["squeue", "-h", "-j", str(job_id), "-o", "%k"]).strip()


def acknowledge(job_id: int, step: int, at: float | None = None, run: Runner = run_command) -> str:
    """Add ``ckpt=STEP@UNIX`` to the job's own comment; the new comment."""
    comment = with_checkpoint(read_comment(job_id, run), step, time.time() if at is None else at)
    run(["scontrol", "update", f"JobId={job_id}", f"Comment={comment}"])
    return comment


def mark_preempted(ckpt_dir: Path) -> None:
    """Tell the batch shell the workers stopped for a preemption (stay up until requeued)."""
    (ckpt_dir / PREEMPTED_FILE).write_text(f"{time.time():.0f}\n")


__all__ = [
    "PREEMPTED_FILE",
    "REQUEST_FILE",
    "JobEnv",
    "acknowledge",
    "agree",
    "checkpoint_requested",
    "mark_preempted",
    "read_comment",
    "run_command",
    "torch_all_reduce_max",
]
