"""A crash at every step of a managed job's life changes nothing Slurm ends up doing.

One life, on the shared fake Slurm: a preemptible job (5) is registered, made
an admin hold, pinned and released; Slurm starts it; a second job (9) arrives
with no room left, so 5 is signalled, acknowledges its checkpoint, is requeued
held and waits again, and 9 is pinned to the freed nodes and started.  Each
case injects one fault (the process dying, or Slurm refusing or going away) at
one point of that life, before or after a Slurm call or a store record; a
fresh daemon on the same store then runs until nothing more happens.  The job
must end exactly as without the fault, with each Slurm write made at most once
per decision, and the store must agree with Slurm.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import select

from slurmopt.daemon.loop import Daemon
from slurmopt.daemon.managed import ADMIN_HOLD_REASON
from slurmopt.daemon.preempt import REQUEUED, PreemptionSettings
from slurmopt.errors import SlurmUnavailable
from slurmopt.hostlist import fold
from slurmopt.model import Job
from slurmopt.store import JobTransition, ManagedJob, ManagedJobState, Preemption, Store
from tests.fakes.slurm import (
    WRITES,
    ErrorFactory,
    FakeCrash,
    FakeSlurm,
    crash,
    refused,
    unavailable,
)
from tests.unit.test_daemon_fakes import config, held_job, two_leaves

S = ManagedJobState
VICTIM, PREEMPTOR = 5, 9
PRE = "slurmopt:managed,preemptible"
#: Seconds the clock moves on per cycle (the interval is 1 s; the lease lasts 10 s).
STEP = 5.0
#: Cycles without a Slurm write or a store record that count as quiet: longer than
#: PIN_IN_FLIGHT_S, so a withdrawn pin has had its chance.
QUIET = 12
MAX_CYCLES = 120

#: Every point of the life where a fault goes, and the job it is aimed at.
LIFE: list[tuple[str, int]] = [
    ("before-record:register", VICTIM),
    ("after-record:register", VICTIM),
    ("before:hold", VICTIM),  # the plugin's hold made an admin hold
    ("after:hold", VICTIM),
    ("before-record:pin", VICTIM),
    ("after-record:pin", VICTIM),
    ("before:pin", VICTIM),
    ("after:pin", VICTIM),
    ("before:release", VICTIM),
    ("after:release", VICTIM),
    ("before-record:run", VICTIM),
    ("after-record:run", VICTIM),
    ("before-record:preempt-signal", VICTIM),
    ("after-record:preempt-signal", VICTIM),
    ("before:signal", VICTIM),
    ("after:signal", VICTIM),
    ("before-record:preempt-ack", VICTIM),  # the requeue's record: checkpointed
    ("after-record:preempt-ack", VICTIM),
    ("before:requeue", VICTIM),
    ("after:requeue", VICTIM),
    ("before-record:preemption-closed", VICTIM),  # the requeue finished
    ("after-record:preemption-closed", VICTIM),
    ("before-record:pin", PREEMPTOR),
    ("after-record:pin", PREEMPTOR),
    ("before:pin", PREEMPTOR),
    ("after:pin", PREEMPTOR),
    ("before:release", PREEMPTOR),
    ("after:release", PREEMPTOR),
]

#: Where a fault rightly changes a write count: Slurm refused the admin hold, and the job was
#: placed and released in that same cycle, so no hold was left to make.
CHANGED_WRITES: dict[tuple[str, str, int], dict[tuple[int, str], int]] = {
    ("refused", "before:hold", VICTIM): {(VICTIM, "hold"): 0},
}

ERRORS: dict[str, ErrorFactory] = {"crash": crash, "refused": refused, "down": unavailable}

CASES = [
    pytest.param(point, job_id, kind, id=f"{kind}-{point}-{job_id}")
    for point, job_id in LIFE
    for kind in ERRORS
    # Slurm can refuse or be away only at its own calls; a store record only dies with us.
    if kind == "crash" or not point.split(":")[0].endswith("record")
]


@dataclass
class Life:
    """The fake cluster, the store, and the daemons that ran on it."""

    tmp_path: Path
    client: FakeSlurm
    stores: list[Store] = field(default_factory=list)
    daemons: int = 0
    crashes: int = 0
    acked: bool = False

    def daemon(self) -> Daemon:
        """A new process: its own store connection and holder; the dead one's lease runs out."""
        if self.daemons:
            self.client.clock += 11
        self.daemons += 1
        store = self.client.attach(Store.open(f"sqlite:///{self.tmp_path / 'd.db'}"))
        self.stores.append(store)
        _, fabric = two_leaves()
        daemon = Daemon(
            config(self.tmp_path),
            self.client,
            store,
            holder=f"host:{self.daemons}",
            clock=lambda: self.client.clock,
            fabric_loader=lambda _c, _s: fabric,
        )
        daemon.preempter.settings = PreemptionSettings(grace_s=60.0)
        return daemon

    def world(self) -> None:
        """What Slurm and the jobs do between two cycles."""
        client = self.client
        client.schedule()
        if client.jobs[VICTIM].is_active and PREEMPTOR not in client.jobs:
            client.jobs[PREEMPTOR] = _plugin_held(PREEMPTOR, "slurmopt:managed")
        if client.writes(VICTIM, "signal") and not self.acked:
            client.ack(VICTIM, 120)
            self.acked = True

    def run(self) -> None:
        daemon = self.daemon()
        quiet = 0
        for _ in range(MAX_CYCLES):
            before = (len(self.client.calls), _transitions(self.stores[-1]))
            try:
                daemon.cycle()
            except FakeCrash:
                self.crashes += 1
                daemon = self.daemon()
            self.world()
            self.client.clock += STEP
            after = (len(self.client.calls), _transitions(self.stores[-1]))
            quiet = quiet + 1 if after == before else 0
            if quiet >= QUIET:
                return
        raise AssertionError(f"still acting after {MAX_CYCLES} cycles: {self.client.calls}")

    def close(self) -> None:
        for store in self.stores:
            store.close()


def _plugin_held(job_id: int, comment: str, nodes: int = 2) -> Job:
    """A new job as the job-submit plugin leaves it: ``priority=0`` (JobHeldUser), marked."""
    return held_job(job_id, nodes=nodes, comment=comment, reason="JobHeldUser")


def _cluster() -> FakeSlurm:
    """Eight nodes; six busy with Slurm's own long jobs, so the victim's two are the only room."""
    nodes, _ = two_leaves()
    client = FakeSlurm(nodes, [_plugin_held(VICTIM, PRE)])
    client.occupy(["a2", "a3", "b0", "b1", "b2", "b3"])
    return client


def _transitions(store: Store) -> int:
    with store.begin() as session:
        return len(session.scalars(select(JobTransition.id)).all())


@dataclass(frozen=True)
class Outcome:
    """How the life ended, as Slurm and the store say."""

    slurm: tuple[tuple[int, str, str, str], ...]
    records: tuple[tuple[int, str, str | None], ...]
    preemptions: tuple[str | None, ...]
    writes: tuple[tuple[int, str, int], ...]


def _outcome(life: Life) -> Outcome:
    client, store = life.client, life.stores[-1]
    jobs = tuple(
        (j.job_id, j.state.value, j.reason, ",".join(j.nodes))
        for j in sorted(client.jobs.values(), key=lambda j: j.job_id)
        if j.job_id in (VICTIM, PREEMPTOR)
    )
    with store.begin() as session:
        records = tuple(
            (r.job_id, r.state.value, r.nodes)
            for r in session.scalars(select(ManagedJob).order_by(ManagedJob.job_id))
        )
        rows = tuple(r.outcome for r in session.scalars(select(Preemption).order_by(Preemption.id)))
    writes = tuple(
        (job_id, kind, client.writes(job_id, kind))
        for job_id in (VICTIM, PREEMPTOR)
        for kind in WRITES
        if kind not in ("drain", "resume", "submit") and client.writes(job_id, kind)
    )
    return Outcome(jobs, records, rows, writes)


@pytest.fixture
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    life = Life(tmp_path_factory.mktemp("baseline"), _cluster())
    life.run()
    yield _outcome(life)
    life.close()


def test_the_life_without_faults(baseline: Outcome) -> None:
    """The reference every fault case is held to: what a clean run does, exactly."""
    assert baseline.slurm == (
        (VICTIM, "PENDING", ADMIN_HOLD_REASON, ""),
        (PREEMPTOR, "RUNNING", "", "a0,a1"),
    )
    assert baseline.records == ((VICTIM, "waiting", None), (PREEMPTOR, "running", "a[0-1]"))
    assert baseline.preemptions == (REQUEUED,)
    writes = {(job, kind): n for job, kind, n in baseline.writes}
    assert writes.pop((VICTIM, "hold")) == 1  # the plugin's hold made an admin hold, once
    assert writes.pop((VICTIM, "pin")) == 1
    assert writes.pop((VICTIM, "release")) == 1
    assert writes.pop((VICTIM, "signal")) == 1
    assert writes.pop((VICTIM, "requeue")) == 1
    assert writes.pop((PREEMPTOR, "hold")) == 1
    assert writes.pop((PREEMPTOR, "pin")) == 1
    assert writes.pop((PREEMPTOR, "release")) == 1
    # Only status comments remain: at most one per change of a waiting job's status.
    assert {kind for _job, kind in writes} <= {"comment"}


def _pins_per_key(life: Life) -> None:
    """No pin call without its own recorded decision; one release per start."""
    store, client = life.stores[-1], life.client
    with store.begin() as session:
        rows = session.scalars(select(JobTransition).order_by(JobTransition.id)).all()
    for job_id in (VICTIM, PREEMPTOR):
        keys = [t.key for t in rows if t.job_id == job_id and t.key.split(":")[2] == "pin"]
        assert len(keys) == len(set(keys))
        assert client.writes(job_id, "pin") <= len(keys), (job_id, keys, client.calls)
        starts = [t for t in rows if t.job_id == job_id and t.to_state is S.RUNNING]
        assert client.writes(job_id, "release") == len(starts), (job_id, client.calls)


def _store_agrees_with_slurm(life: Life) -> None:
    client, store = life.client, life.stores[-1]
    for job_id in (VICTIM, PREEMPTOR):
        record = store.managed_job(job_id)
        job = client.jobs[job_id]
        assert record is not None
        assert abs(record.slurm_submit_time - (job.submit_time or 0)) < 1
        if job.is_active:
            assert record.state is S.RUNNING and record.nodes == fold(job.nodes)
        else:
            assert record.state is S.WAITING and job.reason == ADMIN_HOLD_REASON


@pytest.mark.parametrize(("point", "job_id", "kind"), CASES)
def test_a_fault_anywhere_in_a_job_life_changes_nothing_slurm_does(
    tmp_path: Path, baseline: Outcome, point: str, job_id: int, kind: str
) -> None:
    life = Life(tmp_path, _cluster())
    fault = life.client.fail(point, ERRORS[kind], job_id=job_id)
    try:
        life.run()
        assert fault.fired == 1, f"{point} was never reached"
        assert life.crashes == (1 if kind == "crash" else 0)
        outcome = _outcome(life)
        assert outcome.slurm == baseline.slurm
        assert outcome.records == baseline.records
        assert outcome.preemptions == baseline.preemptions
        expected = {(j, k): n for j, k, n in _no_status_writes(baseline.writes)}
        expected.update(CHANGED_WRITES.get((kind, point, job_id), {}))
        made = {(j, k): n for j, k, n in _no_status_writes(outcome.writes)}
        assert made == {key: n for key, n in expected.items() if n}
        _pins_per_key(life)
        _store_agrees_with_slurm(life)
    finally:
        life.close()


def _no_status_writes(writes: tuple[tuple[int, str, int], ...]) -> tuple[tuple[int, str, int], ...]:
    return tuple(w for w in writes if w[1] != "comment")


def test_slurm_down_for_a_while_changes_nothing_either(tmp_path: Path, baseline: Outcome) -> None:
    life = Life(tmp_path, _cluster())
    life.client.fail("before:snapshot", lambda p: SlurmUnavailable(p), times=3)
    try:
        life.run()
        outcome = _outcome(life)
        assert (outcome.slurm, outcome.records) == (baseline.slurm, baseline.records)
        assert _no_status_writes(outcome.writes) == _no_status_writes(baseline.writes)
    finally:
        life.close()
