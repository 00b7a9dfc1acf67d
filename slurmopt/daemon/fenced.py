"""A Slurm client whose every write first proves this process still holds the lease.

The enforcing daemon wraps its client in :class:`FencedClient`: reads pass
through; each write (hold, release, pin, shrink, signal, requeue, comment)
first calls the guard (:meth:`slurmopt.store.Store.guard`), which checks the
lease's holder, fencing token and expiry in the store and extends it, and
raises :class:`~slurmopt.store.LeaseLost` otherwise.  A daemon that paused
(a slow ``scontrol``, SIGSTOP, a partition from the database) and lost the
lease to another therefore stops at its next write, mid-cycle, without
making it.  Slurm itself cannot check a token, so one window remains: a
pause longer than the lease between the guard and the command; the lease
TTL (at least 10 s, three intervals) bounds how likely that is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from slurmopt.model import ClusterSnapshot
from slurmopt.slurm.base import SlurmClient


class FencedClient:
    """``client`` with ``guard()`` called before every write; reads are not guarded."""

    def __init__(self, client: SlurmClient, guard: Callable[[], None]) -> None:
        self.inner = client
        self.guard = guard
        self.name = getattr(client, "name", "fenced")

    def __getattr__(self, name: str) -> Any:  # reads and extras (slurm_config, version)
        return getattr(self.inner, name)

    def snapshot(self) -> ClusterSnapshot:
        return self.inner.snapshot()

    def topology_text(self) -> str | None:
        return self.inner.topology_text()

    def hold(self, job_id: int) -> None:
        self.guard()
        self.inner.hold(job_id)

    def release(self, job_id: int) -> None:
        self.guard()
        self.inner.release(job_id)

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        self.guard()
        self.inner.pin(job_id, nodes)

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        self.guard()
        self.inner.signal(job_id, signal, batch_only)

    def requeue(self, job_id: int, hold: bool = True) -> None:
        self.guard()
        self.inner.requeue(job_id, hold)

    def shrink(self, job_id: int, node_count: int) -> None:
        self.guard()
        self.inner.shrink(job_id, node_count)

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        self.guard()
        self.inner.set_comment(job_id, text, admin)

    def submit(self, argv: Sequence[str], script: str | None = None) -> int:
        self.guard()
        return self.inner.submit(argv, script)

    def drain(self, node: str, reason: str) -> None:
        self.guard()
        self.inner.drain(node, reason)


__all__ = ["FencedClient"]
