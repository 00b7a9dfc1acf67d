"""The daemon's Slurm client wrapped for its metrics: each write and adapter error counted."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from slurmopt.errors import SlurmError
from slurmopt.model import ClusterSnapshot
from slurmopt.slurm.base import JobStatus, SlurmClient

if TYPE_CHECKING:
    from slurmopt.metrics import DaemonMetrics

T = TypeVar("T")


class InstrumentedSlurmClient:
    """A Slurm client that counts its successful writes and its adapter errors, then delegates.

    Errors are re-raised unchanged; attributes it does not define (a fake's
    test hooks, say) are the wrapped client's.
    """

    def __init__(self, inner: SlurmClient, metrics: DaemonMetrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self.name = inner.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def _call(self, operation: str, call: Callable[[], T]) -> T:
        try:
            out = call()
        except SlurmError as exc:
            self.metrics.count_slurm_error(exc, operation)
            raise
        self.metrics.count_action(operation)
        return out

    def snapshot(self) -> ClusterSnapshot:
        return self._call("snapshot", self.inner.snapshot)

    def topology_text(self) -> str | None:
        return self._call("topology_text", self.inner.topology_text)

    def hold(self, job_id: int) -> None:
        self._call("hold", lambda: self.inner.hold(job_id))

    def release(self, job_id: int) -> None:
        self._call("release", lambda: self.inner.release(job_id))

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        self._call("pin", lambda: self.inner.pin(job_id, nodes))

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        self._call("signal", lambda: self.inner.signal(job_id, signal, batch_only))

    def requeue(self, job_id: int, hold: bool = True) -> None:
        self._call("requeue", lambda: self.inner.requeue(job_id, hold))

    def shrink(self, job_id: int, node_count: int) -> None:
        self._call("shrink", lambda: self.inner.shrink(job_id, node_count))

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        self._call("set_comment", lambda: self.inner.set_comment(job_id, text, admin))

    def submit(
        self, argv: Sequence[str], script: str | None = None, env: Mapping[str, str] | None = None
    ) -> int:
        return self._call("submit", lambda: self.inner.submit(argv, script, env))

    def cancel(self, job_id: int) -> None:
        self._call("cancel", lambda: self.inner.cancel(job_id))

    def job_status(self, job_id: int) -> JobStatus | None:
        return self._call("job_status", lambda: self.inner.job_status(job_id))

    def drain(self, node: str, reason: str) -> None:
        self._call("drain", lambda: self.inner.drain(node, reason))
