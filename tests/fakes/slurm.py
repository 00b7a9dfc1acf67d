"""The one in-memory fake of Slurm the tests share: ``FakeSlurm``.

It stands for what cannot run in a unit test (slurmctld and its commands),
implements the whole :class:`~slurmopt.slurm.base.SlurmClient` protocol plus
``slurm_config()`` and ``resume()``, and changes its jobs and nodes as Slurm
would.  Tests use it to *count* and to *break*:

* every write is logged in ``calls`` and counted per job (or node) and kind:
  :meth:`FakeSlurm.writes`, :meth:`FakeSlurm.writes_total`; a job submitted
  here stays pending until the test moves it on (:meth:`FakeSlurm.start`,
  :meth:`FakeSlurm.end` with the batch script's exit status);
* a fault can be injected before or after any call (:meth:`FakeSlurm.fail`):
  :class:`~slurmopt.errors.SlurmCommandError`, :class:`~slurmopt.errors.SlurmUnavailable`,
  or :class:`FakeCrash`, a ``BaseException`` standing for the process dying;
* with :meth:`FakeSlurm.attach` it also watches a :class:`~slurmopt.store.Store`, and a
  fault can fire before a transition with a given action is flushed (nothing is
  recorded) or after it is committed (:meth:`FakeSlurm.fail_record`).

Fault points are named ``"before:pin"``, ``"after:release"``,
``"before-record:pin"``, ``"after-record:preempt-signal"`` and so on
(see :data:`CALLS` and :data:`RECORDS`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from slurmopt.errors import SlurmCommandError, SlurmUnavailable
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.slurm import jobstate
from slurmopt.slurm.base import JobStatus
from slurmopt.store import JobTransition, Preemption, Store
from slurmopt.tag import with_checkpoint

#: Slurm calls that change something (each is counted per job or node and kind).
WRITES = (
    "hold",
    "release",
    "pin",
    "signal",
    "requeue",
    "shrink",
    "comment",
    "submit",
    "cancel",
    "drain",
    "resume",
)
#: Reads: counted too (``reads``), and a fault can be injected into them.
READS = ("snapshot", "topology", "config", "status")
CALLS = WRITES + READS
#: Store records a fault can be injected around: the action of a transition's key
#: (``job:submit:ACTION:attempt``), and ``preemption-closed`` (a preemption row's outcome set).
RECORDS = (
    "register",
    "pin",
    "unpin",
    "run",
    "end",
    "requeued",
    "preempt-signal",
    "preempt-ack",
    "preempt-cancel",
    "preempt-requeued",
    "preemption-closed",
)

NOW = 1_000_000.0


class FakeCrash(BaseException):
    """The daemon process dying at this point (not an error anything may catch)."""


ErrorFactory = Callable[[str], BaseException]


def crash(point: str) -> BaseException:
    return FakeCrash(point)


def refused(point: str) -> BaseException:
    return SlurmCommandError(["scontrol", point], 1, f"fake refusal at {point}")


def unavailable(point: str) -> BaseException:
    return SlurmUnavailable(f"{point}: fake controller down")


@dataclass
class Fault:
    """One injected fault at ``point`` (for ``job_id`` if given), ``times`` times (None: always)."""

    point: str
    error: ErrorFactory
    job_id: int | None = None
    times: int | None = 1
    fired: int = 0

    def matches(self, point: str, job_id: int | None) -> bool:
        return self.point == point and (self.job_id is None or self.job_id == job_id)


class FakeSlurm:
    """Slurm as a dict of nodes and jobs; writes change it, are logged and counted, can fail.

    ``crash_on`` names a call that raises :class:`FakeCrash` instead of
    happening, once (shorthand for ``fail("before:" + call)``); ``during``
    runs a hook once when a call of that name (a write, or ``snapshot``,
    ``topology``, ``config``) is entered: a slow or paused call; ``down``
    makes every call raise :class:`SlurmUnavailable`.
    """

    name = "fake"

    def __init__(
        self,
        nodes: Iterable[Node] = (),
        jobs: Iterable[Job] = (),
        partitions: Iterable[Partition] | None = None,
        *,
        clock: float = NOW,
        topology: str | None = None,
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.jobs = {j.job_id: j for j in jobs}
        self.partitions = list(partitions) if partitions is not None else None
        self.calls: list[tuple[Any, ...]] = []
        self.read_calls: Counter[str] = Counter()
        self.faults: list[Fault] = []
        self.during: dict[str, Callable[[], None]] = {}
        #: Called as ``watch(call, job_id)`` when each write to a job is entered.
        self.watchers: list[Callable[[str, int], None]] = []
        self.down = False
        self.clock = clock
        self.topology = topology
        self.live_config: dict[str, str] = {"JobSubmitPlugins": "lua"}
        self.next_job_id = max(self.jobs, default=0) + 1
        #: The batch script's exit status of each job that ended (:meth:`end`).
        self.exit_codes: dict[int, int] = {}
        self._stores: list[Store] = []

    @classmethod
    def from_snapshot(
        cls, snapshot: ClusterSnapshot, read_error: BaseException | None = None, **kw: Any
    ) -> FakeSlurm:
        """A fake whose state is ``snapshot`` (its partitions and clock too); every snapshot
        raises ``read_error`` when one is given (a controller that answers badly or not)."""
        kw.setdefault("clock", snapshot.taken_at)
        fake = cls(
            snapshot.nodes.values(), snapshot.jobs.values(), snapshot.partitions.values(), **kw
        )
        if read_error is not None:
            error = read_error
            fake.fail("before:snapshot", lambda _point: error, times=None)
        return fake

    # -- faults ----------------------------------------------------------------------------
    def fail(
        self,
        point: str,
        error: ErrorFactory = crash,
        job_id: int | None = None,
        times: int | None = 1,
    ) -> Fault:
        """Raise ``error(point)`` at ``point`` (``before:CALL``, ``after:CALL``,
        ``before-record:ACTION``, ``after-record:ACTION``: fires only in stores
        passed to :meth:`attach`)."""
        where, _, what = point.partition(":")
        known = RECORDS if where.endswith("record") else CALLS
        if where not in ("before", "after", "before-record", "after-record") or what not in known:
            raise ValueError(f"unknown fault point {point!r}")
        fault = Fault(point, error, job_id, times)
        self.faults.append(fault)
        return fault

    def fail_record(
        self,
        action: str,
        when: str = "before",
        error: ErrorFactory = crash,
        job_id: int | None = None,
    ) -> Fault:
        return self.fail(f"{when}-record:{action}", error, job_id)

    @property
    def crash_on(self) -> str | None:
        for fault in self.faults:
            if fault.point.startswith("before:") and fault.error is crash:
                return fault.point.partition(":")[2]
        return None

    @crash_on.setter
    def crash_on(self, call: str | None) -> None:
        self.faults = [
            f for f in self.faults if not (f.point.startswith("before:") and f.error is crash)
        ]
        if call is not None:
            self.fail("before:" + call)

    def _fire(self, point: str, job_id: int | None) -> None:
        for fault in self.faults:
            if fault.matches(point, job_id) and (fault.times is None or fault.fired < fault.times):
                fault.fired += 1
                raise fault.error(point)

    def fired(self) -> list[str]:
        return [f.point for f in self.faults if f.fired]

    # -- the store hook --------------------------------------------------------------------
    def attach(self, store: Store) -> Store:
        """Watch ``store``'s sessions so that ``*-record:ACTION`` faults can fire."""
        if store in self._stores:
            return store
        self._stores.append(store)

        def actions(objs: Iterable[object]) -> list[tuple[str, int | None]]:
            found: list[tuple[str, int | None]] = []
            for obj in objs:
                if isinstance(obj, JobTransition):
                    found.append((obj.key.split(":")[2], obj.job_id))
                elif isinstance(obj, Preemption) and obj.outcome is not None:
                    found.append(("preemption-closed", obj.victim_job_id))
            return found

        def before_flush(session: Session, _ctx: Any, _instances: Any) -> None:
            pending = actions(list(session.new) + list(session.dirty))
            for action, job_id in pending:
                self._fire(f"before-record:{action}", job_id)
            session.info.setdefault("fake_records", []).extend(pending)

        def after_commit(session: Session) -> None:
            done = session.info.pop("fake_records", [])
            for action, job_id in done:
                self._fire(f"after-record:{action}", job_id)

        def after_rollback(session: Session) -> None:
            session.info.pop("fake_records", None)

        event.listen(store.sessions, "before_flush", before_flush)
        event.listen(store.sessions, "after_commit", after_commit)
        event.listen(store.sessions, "after_soft_rollback", lambda s, _t: after_rollback(s))
        return store

    # -- counts ----------------------------------------------------------------------------
    def writes(self, target: int | str, kind: str) -> int:
        """Writes of ``kind`` made to one job (or node, for drains): those that happened."""
        if kind not in WRITES:
            raise ValueError(f"not a write: {kind!r}")
        return sum(1 for c in self.calls if c[0] == kind and c[1] == target)

    def writes_total(self, kind: str | None = None) -> int:
        """Every write made (of ``kind`` when given)."""
        return sum(1 for c in self.calls if c[0] in WRITES and (kind is None or c[0] == kind))

    def count(self, call: str, job_id: int) -> int:
        return sum(1 for c in self.calls if c[0] == call and c[1] == job_id)

    def reads(self, kind: str) -> int:
        return self.read_calls[kind]

    # -- reads -----------------------------------------------------------------------------
    def _read(self, kind: str, command: str) -> None:
        self.read_calls[kind] += 1
        if self.down:
            raise SlurmUnavailable(f"{command}: slurmctld unreachable: fake")
        self._fire(f"before:{kind}", None)
        hook = self.during.pop(kind, None)
        if hook is not None:
            hook()

    def snapshot(self) -> ClusterSnapshot:
        self._read("snapshot", "squeue --json")
        parts = self.partitions
        if parts is None:
            parts = [Partition("gpu", tuple(self.nodes), default=True)]
        snap = ClusterSnapshot.build(self.clock, self.nodes.values(), self.jobs.values(), parts)
        self._fire("after:snapshot", None)
        return snap

    def topology_text(self) -> str | None:
        self._read("topology", "scontrol show topology")
        return self.topology

    def slurm_config(self) -> dict[str, str]:
        self._read("config", "scontrol show config")
        return dict(self.live_config)

    def job_status(self, job_id: int) -> JobStatus | None:
        self._read("status", "scontrol show job")
        job = self.jobs.get(job_id)
        if job is None:
            return None
        return JobStatus(job_id, job.state, self.exit_codes.get(job_id))

    # -- writes ----------------------------------------------------------------------------
    def _enter(self, call: str, job_id: int) -> Job:
        if self.down:
            raise SlurmUnavailable(f"scontrol {call}: fake controller down")
        self._fire(f"before:{call}", job_id)
        for watch in self.watchers:
            watch(call, job_id)
        hook = self.during.pop(call, None)
        if hook is not None:
            hook()
        job = self.jobs.get(job_id)
        if job is None:
            raise SlurmCommandError(["scontrol", call], 1, "Invalid job id specified")
        return job

    def _done(self, call: tuple[Any, ...]) -> None:
        self.calls.append(call)
        self._fire(f"after:{call[0]}", call[1] if isinstance(call[1], int) else None)

    def _set(self, job_id: int, **changes: Any) -> None:
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], **changes)

    def hold(self, job_id: int) -> None:
        self.jobs[job_id] = jobstate.held(self._enter("hold", job_id))
        self._done(("hold", job_id))

    def release(self, job_id: int) -> None:
        self.jobs[job_id] = jobstate.released(self._enter("release", job_id))
        self._done(("release", job_id))

    def pin(self, job_id: int, nodes: Sequence[str]) -> None:
        self._enter("pin", job_id)
        self._set(job_id, required_nodes=tuple(nodes))
        self._done(("pin", job_id, tuple(nodes)))

    def set_comment(self, job_id: int, text: str, admin: bool = True) -> None:
        self._enter("comment", job_id)
        self._set(job_id, **{"admin_comment" if admin else "comment": text})
        self._done(("comment", job_id, text))

    def signal(self, job_id: int, signal: str, batch_only: bool = True) -> None:
        self._enter("signal", job_id)
        self._done(("signal", job_id, signal, batch_only))

    def requeue(self, job_id: int, hold: bool = True) -> None:
        """``scontrol requeue[hold]``: pending again, with a new submit time, as Slurm does."""
        job = self._enter("requeue", job_id)
        for name in job.nodes:
            if name in self.nodes:
                self.nodes[name] = dataclasses.replace(
                    self.nodes[name], gpus_alloc=0, state=NodeState.IDLE
                )
        self.jobs[job_id] = jobstate.requeued(job, self.clock, hold)
        self._done(("requeue", job_id, hold))

    def shrink(self, job_id: int, node_count: int) -> None:
        self._enter("shrink", job_id)
        self._set(job_id, node_count=node_count)
        self._done(("shrink", job_id, node_count))

    def submit(
        self, argv: Sequence[str], script: str | None = None, env: Mapping[str, str] | None = None
    ) -> int:
        if self.down:
            raise SlurmUnavailable("sbatch: fake controller down")
        self._fire("before:submit", None)
        job_id = self.next_job_id
        self.next_job_id += 1
        self.jobs[job_id] = Job(
            job_id=job_id, state=JobState.PENDING, partition="gpu", submit_time=self.clock
        )
        self._done(("submit", job_id, tuple(argv), script, dict(env or {})))
        return job_id

    def cancel(self, job_id: int) -> None:
        """``scancel``: the job ends CANCELLED (an ended job stays as it is, as in Slurm)."""
        job = self._enter("cancel", job_id)
        if job.is_active or job.is_pending:
            self.end(job_id, JobState.CANCELLED)
        self._done(("cancel", job_id))

    def _node(self, call: str, name: str) -> Node:
        if self.down:
            raise SlurmUnavailable(f"scontrol {call}: fake controller down")
        self._fire(f"before:{call}", None)
        if name not in self.nodes:
            raise SlurmCommandError(["scontrol", call], 1, "Invalid node name specified")
        return self.nodes[name]

    def drain(self, node: str, reason: str) -> None:
        """Drain a node; the reason is stamped with the whole second, as slurmctld does."""
        old = self._node("drain", node)
        self.nodes[node] = dataclasses.replace(
            old,
            flags=old.flags | {"DRAIN"},
            reason=reason,
            reason_time=float(math.floor(self.clock)),
        )
        self.calls.append(("drain", node, reason))
        self._fire("after:drain", None)

    def resume(self, node: str) -> None:
        old = self._node("resume", node)
        self.nodes[node] = dataclasses.replace(
            old, flags=old.flags - {"DRAIN", "DRAINING", "DRAINED"}, reason="", reason_time=None
        )
        self.calls.append(("resume", node))
        self._fire("after:resume", None)

    # -- what Slurm itself (or a job) would do ----------------------------------------------
    def start(self, job_id: int) -> None:
        """Slurm starts a released job on its pinned nodes."""
        job = self.jobs[job_id]
        nodes = job.required_nodes or (next(iter(self.nodes)),)
        self._set(job_id, state=JobState.RUNNING, nodes=nodes, start_time=self.clock)
        for name in nodes:
            node = self.nodes[name]
            self.nodes[name] = dataclasses.replace(
                node, gpus_alloc=node.gpus_total, state=NodeState.ALLOCATED
            )

    def end(
        self, job_id: int, state: JobState = JobState.COMPLETED, exit_code: int | None = None
    ) -> None:
        """The job ends in ``state``; its exit status is ``exit_code``, else 0 when it
        COMPLETED and 1 otherwise."""
        job = self.jobs[job_id]
        self.exit_codes[job_id] = (
            exit_code if exit_code is not None else int(state is not JobState.COMPLETED)
        )
        for name in job.nodes:
            if name in self.nodes and job.is_active:
                self.nodes[name] = dataclasses.replace(
                    self.nodes[name], gpus_alloc=0, state=NodeState.IDLE
                )
        self._set(job_id, state=state)

    def ack(self, job_id: int, step: int) -> None:
        """The job writes its checkpoint acknowledgement (``ckpt=STEP@T``) into its comment."""
        job = self.jobs[job_id]
        self._set(job_id, comment=with_checkpoint(job.comment, step, self.clock))

    def occupy(self, names: Iterable[str], first_id: int = 100) -> list[int]:
        """Slurm's own long jobs (not slurmopt's), one on each of these nodes, all its GPUs."""
        ids = []
        for name in names:
            job_id = max([first_id - 1, *self.jobs]) + 1
            self.jobs[job_id] = Job(
                job_id=job_id,
                state=JobState.RUNNING,
                partition="gpu",
                nodes=(name,),
                node_count=1,
                gpus_per_node=self.nodes[name].gpus_total,
                start_time=self.clock - 10,
                time_limit_s=86_400,
                submit_time=self.clock - 20,
            )
            self.nodes[name] = dataclasses.replace(
                self.nodes[name], gpus_alloc=self.nodes[name].gpus_total, state=NodeState.ALLOCATED
            )
            ids.append(job_id)
        return ids

    def schedule(self) -> list[int]:
        """Slurm's scheduler, as far as the daemon tests need it: start every released,
        pinned job whose nodes are all free; returns the ids started."""
        started = []
        for job in sorted(self.jobs.values(), key=lambda j: j.job_id):
            if not job.is_pending or job.held or not job.required_nodes:
                continue
            if all(self.nodes[n].gpus_alloc == 0 for n in job.required_nodes):
                self.start(job.job_id)
                started.append(job.job_id)
        return started

    def drains(self) -> list[tuple[str, str]]:
        """The drains made, in order: (node, reason)."""
        return [(c[1], c[2]) for c in self.calls if c[0] == "drain"]

    def resumes(self) -> list[str]:
        """The nodes resumed, in order."""
        return [c[1] for c in self.calls if c[0] == "resume"]

    def held_ids(self) -> list[int]:
        return sorted(j.job_id for j in self.jobs.values() if j.reason == "JobHeldAdmin")


__all__ = [
    "CALLS",
    "NOW",
    "READS",
    "RECORDS",
    "WRITES",
    "Fault",
    "FakeCrash",
    "FakeSlurm",
    "crash",
    "refused",
    "unavailable",
]
