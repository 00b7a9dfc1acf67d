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

Test hook: :data:`HOOK_ENV` (``SLURMOPT_TEST_HOOK``), read once when the
client is made and inert when unset, lets the integration tests put a fault
at a named point of a real daemon: ``kill@before:pin`` makes the process
SIGKILL itself right before its first pin reaches Slurm (after the lease
check, so after the pin is recorded), ``stop@after:signal`` SIGSTOPs it right
after its first signal, and so on for every write (``hold``, ``release``,
``pin``, ``signal``, ``requeue``, ``shrink``, ``comment``).  It fires once
per process.  Nothing but ``tests/integration`` sets it.
"""

from __future__ import annotations

import os
import signal as signals
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurmopt.model import ClusterSnapshot
from slurmopt.slurm.base import JobStatus, SlurmClient

#: Environment variable of the test hook (see the module docstring).
HOOK_ENV = "SLURMOPT_TEST_HOOK"
_HOOK_SIGNALS = {"kill": signals.SIGKILL, "stop": signals.SIGSTOP}


def _hook_from_env() -> tuple[signals.Signals, str] | None:
    spec = os.environ.get(HOOK_ENV, "").strip()
    action, _, point = spec.partition("@")
    if (
        not spec
        or action not in _HOOK_SIGNALS
        or point.partition(":")[0]
        not in (
            "before",
            "after",
        )
    ):
        return None
    return _HOOK_SIGNALS[action], point


class FencedClient:
    """``client`` with ``guard()`` called before every write; reads are not guarded."""

    def __init__(self, client: SlurmClient, guard: Callable[[], None]) -> None:
        self.inner = client
        self.guard = guard
        self.name = getattr(client, "name", "fenced")
        self._hook = _hook_from_env()

    def _at(self, point: str) -> None:
        """The test hook: signal this process at ``point`` (``before:pin``...), once."""
        if self._hook is not None and self._hook[1] == point:
            sig, self._hook = self._hook[0], None
            os.kill(os.getpid(), sig)

    def __getattr__(self, name: str) -> Any:  # reads and extras (slurm_config, version)
        return getattr(self.inner, name)

    def snapshot(self) -> ClusterSnapshot:
        return self.inner.snapshot()

    def topology_text(self) -> str | None:
        return self.inner.topology_text()

    def job_status(self, job_id: int) -> JobStatus | None:
        return self.inner.job_status(job_id)

    def hold(self, job_id: int) -> None:
        self.guard()
        self._at("before:hold")
        self.inner.hold(job_id)
        self._at("after:hold")

    def release(self, job_id: int) -> None:
        self.guard()
        self._at("before:release")
        self.inner.release(job_id)
        self._at("after:release")

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        self.guard()
        self._at("before:pin")
        self.inner.pin(job_id, nodes)
        self._at("after:pin")

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        self.guard()
        self._at("before:signal")
        self.inner.signal(job_id, signal, batch_only)
        self._at("after:signal")

    def requeue(self, job_id: int, hold: bool = True) -> None:
        self.guard()
        self._at("before:requeue")
        self.inner.requeue(job_id, hold)
        self._at("after:requeue")

    def shrink(self, job_id: int, node_count: int) -> None:
        self.guard()
        self._at("before:shrink")
        self.inner.shrink(job_id, node_count)
        self._at("after:shrink")

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        self.guard()
        self._at("before:comment")
        self.inner.set_comment(job_id, text, admin)
        self._at("after:comment")

    def submit(
        self, argv: Sequence[str], script: str | None = None, env: Mapping[str, str] | None = None
    ) -> int:
        self.guard()
        return self.inner.submit(argv, script, env)

    def cancel(self, job_id: int) -> None:
        self.guard()
        self.inner.cancel(job_id)

    def drain(self, node: str, reason: str) -> None:
        self.guard()
        self._at("before:drain")
        self.inner.drain(node, reason)
        self._at("after:drain")


__all__ = ["HOOK_ENV", "FencedClient"]
