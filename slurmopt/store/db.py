"""The store: engine and sessions, schema migration, job transitions, leases and history.

Write before act: the daemon records every transition of a managed job and
commits it *before* the Slurm call that causes it.  A crash between the two
leaves a record of an action that may not have happened; on restart the
daemon compares the record with Slurm and repeats the call only if Slurm
does not show it, under the same idempotency key, so nothing is done twice
and nothing is lost.

SQLite (the default) is opened in WAL mode with a busy timeout and
``synchronous=FULL``, so a committed transition survives a power cut, and
every transaction starts with ``BEGIN IMMEDIATE``: a transaction that reads
and then writes takes the write lock up front instead of failing when a
second process wrote in between.  Any other SQLAlchemy URL (PostgreSQL)
works unchanged; the lease and transition writes are single conditional
statements or guarded by unique keys, so they stay atomic there too.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from slurmopt.errors import SlurmoptError
from slurmopt.hostlist import fold
from slurmopt.policy.fragmentation import FragmentationReport
from slurmopt.policy.plan import Plan
from slurmopt.store.models import (
    Decision,
    FragmentationSample,
    Heartbeat,
    JobTransition,
    Lease,
    ManagedJob,
    ManagedJobState,
    PlanRecord,
)
from slurmopt.store.retention import GONE, PruneCounts, Retention
from slurmopt.store.retention import prune as prune_history

#: The database when neither ``--db`` nor ``SLURMOPT_DB`` names one.
DEFAULT_URL = "sqlite:////var/lib/slurmopt/slurmopt.db"

#: Environment variable that names the database URL.
URL_ENV = "SLURMOPT_DB"

#: Seconds between two writes of a waiting job's changed lines (see ``Store.record_plan``).
WAITING_REWRITE_S = 600.0

#: How long a SQLite connection waits for another writer's lock, in milliseconds.
SQLITE_BUSY_TIMEOUT_MS = 10_000

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


# -- errors --------------------------------------------------------------------------------------
class StoreError(SlurmoptError):
    """The database cannot be opened, migrated or written."""

    exit_code = 74  # EX_IOERR


class UnknownJob(SlurmoptError):
    """A transition for a job the store has no record of."""

    exit_code = 70  # EX_SOFTWARE


class IllegalTransition(SlurmoptError):
    """A state change that :data:`~slurmopt.store.models.TRANSITIONS` does not allow."""

    exit_code = 70  # EX_SOFTWARE

    def __init__(self, job_id: int, from_state: ManagedJobState, to_state: ManagedJobState) -> None:
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(f"job {job_id}: illegal transition {from_state} -> {to_state}")


class KeyConflict(SlurmoptError):
    """An idempotency key already recorded for a different job or target state."""

    exit_code = 70  # EX_SOFTWARE


class JobIdReused(SlurmoptError):
    """Slurm reused a job id whose previous job slurmopt still records as live."""

    exit_code = 70  # EX_SOFTWARE


class LeaseLost(SlurmoptError):
    """This process no longer holds the lease its fencing token names: it must not act."""

    exit_code = 75  # EX_TEMPFAIL


# -- fencing -------------------------------------------------------------------------------------
#: Key of :attr:`Session.info` that carries the fence every transition in the session checks.
FENCE_INFO = "slurmopt.fence"


class Fence:
    """Proof that this process still holds lease ``name`` under fencing ``token``.

    The daemon makes one when it acquires the lease and sets it on the store
    (:attr:`Store.fence`); from then on every managed-job transition checks
    it inside its own transaction (a compare on holder, token and expiry),
    and :meth:`Store.guard` checks and extends it right before each Slurm
    write.  A holder that paused past its lease, and whose lease another
    daemon took, fails both checks and acts on nothing.
    """

    __slots__ = ("clock", "holder", "name", "token", "ttl_s")

    def __init__(
        self, name: str, holder: str, token: int, ttl_s: float, clock: Callable[[], float]
    ) -> None:
        self.name = name
        self.holder = holder
        self.token = token
        self.ttl_s = ttl_s
        self.clock = clock

    def check(self, session: Session, extend: bool = False) -> None:
        """Raise :class:`LeaseLost` unless the lease is still ours, unexpired, same token.

        One conditional UPDATE: on PostgreSQL it also locks the lease row
        until the transaction ends, so a takeover cannot commit in between.
        """
        now = self.clock()
        values: dict[str, Any] = {"token": self.token}
        if extend:
            values["expires_at"] = now + self.ttl_s
        held = session.execute(
            update(Lease)
            .where(
                Lease.name == self.name,
                Lease.holder == self.holder,
                Lease.token == self.token,
                Lease.expires_at > now,
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if held.rowcount != 1:  # type: ignore[attr-defined]
            raise LeaseLost(
                f"lease {self.name!r} is no longer held by {self.holder} under token "
                f"{self.token}: acting on nothing"
            )


def check_fence(session: Session) -> None:
    """Check the fence the session carries, if any (a no-op for unfenced writers)."""
    fence = session.info.get(FENCE_INFO)
    if fence is not None:
        fence.check(session)


# -- URLs ----------------------------------------------------------------------------------------
def resolve_url(option: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The database URL: ``--db`` if given, else ``$SLURMOPT_DB``, else :data:`DEFAULT_URL`."""
    if option:
        return option
    env = os.environ if environ is None else environ
    return env.get(URL_ENV) or DEFAULT_URL


def idempotency_key(job_id: int, slurm_submit_time: float, action: str, attempt: int = 0) -> str:
    """The key of one action on one job incarnation: ``job:submit:action:attempt``.

    ``attempt`` counts repeats of the same action on the same job (the
    second pin after a re-plan is attempt 1), so a retried call reuses its
    key and a new decision gets a new one.
    """
    return f"{job_id}:{slurm_submit_time:.0f}:{action}:{attempt}"


# -- transitions ---------------------------------------------------------------------------------
def _existing(session: Session, key: str) -> JobTransition | None:
    return session.scalars(select(JobTransition).where(JobTransition.key == key)).one_or_none()


def _same_key(
    found: JobTransition, job_id: int, to_state: ManagedJobState, key: str
) -> JobTransition:
    if found.job_id != job_id or found.to_state != to_state:
        raise KeyConflict(
            f"key {key!r} already records job {found.job_id} -> {found.to_state}, "
            f"not job {job_id} -> {to_state}"
        )
    return found


def register_job(
    session: Session,
    job_id: int,
    slurm_submit_time: float,
    *,
    key: str,
    reason: str = "held",
    detail: str = "",
    priority_before_hold: int | None = None,
    preemptible: bool = False,
    elastic_min_nodes: int | None = None,
    elastic_max_nodes: int | None = None,
    now: float | None = None,
) -> JobTransition:
    """Start managing a job: a record in ``waiting`` and its first transition (from none).

    Idempotent for a repeated ``key``.  A record left by an earlier job with
    the same id (told apart by ``slurm_submit_time``) is replaced if that job
    ended; if it is still live the caller must first close it (it vanished
    from Slurm), else :class:`JobIdReused` is raised.
    """
    found = _existing(session, key)
    if found is not None:
        return _same_key(found, job_id, ManagedJobState.WAITING, key)
    check_fence(session)
    at = time.time() if now is None else now
    job = session.get(ManagedJob, job_id, with_for_update=True)
    if job is not None:
        if job.slurm_submit_time == slurm_submit_time:
            raise IllegalTransition(job_id, job.state, ManagedJobState.WAITING)
        if not job.state.is_final:
            raise JobIdReused(
                f"job {job_id} submitted at {slurm_submit_time:.0f} reuses the id of a job "
                f"submitted at {job.slurm_submit_time:.0f} that is still {job.state}"
            )
        session.delete(job)
        session.flush()
    session.add(
        ManagedJob(
            job_id=job_id,
            slurm_submit_time=slurm_submit_time,
            state=ManagedJobState.WAITING,
            nodes=None,
            reason=reason,
            detail=detail,
            expected_start=None,
            priority_before_hold=priority_before_hold,
            preemptible=preemptible,
            elastic_min_nodes=elastic_min_nodes,
            elastic_max_nodes=elastic_max_nodes,
            created_at=at,
            updated_at=at,
        )
    )
    record = JobTransition(
        job_id=job_id,
        slurm_submit_time=slurm_submit_time,
        from_state=None,
        to_state=ManagedJobState.WAITING,
        reason=reason,
        detail=detail,
        at=at,
        key=key,
    )
    session.add(record)
    session.flush()
    return record


def transition(
    session: Session,
    job_id: int,
    to_state: ManagedJobState,
    reason: str,
    detail: str,
    key: str,
    *,
    nodes: Sequence[str] | None = None,
    expected_start: float | None = None,
    now: float | None = None,
) -> JobTransition:
    """Move a managed job to ``to_state`` and append the transition; returns the record.

    A ``key`` already recorded returns that record and writes nothing, even
    if the job has moved on since, so a retried action is harmless; the same
    key for another job or target state is a :class:`KeyConflict`.  A move
    :data:`~slurmopt.store.models.TRANSITIONS` forbids raises
    :class:`IllegalTransition` and writes nothing.  ``nodes`` records the
    planned nodes (entering ``waiting`` clears them).  The row is flushed;
    the caller commits before it calls Slurm.
    """
    found = _existing(session, key)
    if found is not None:
        return _same_key(found, job_id, to_state, key)
    check_fence(session)
    job = session.get(ManagedJob, job_id, with_for_update=True)
    if job is None:
        raise UnknownJob(f"job {job_id} is not a managed job")
    if not job.state.can_become(to_state):
        raise IllegalTransition(job_id, job.state, to_state)
    at = time.time() if now is None else now
    record = JobTransition(
        job_id=job_id,
        slurm_submit_time=job.slurm_submit_time,
        from_state=job.state,
        to_state=to_state,
        reason=reason,
        detail=detail,
        at=at,
        key=key,
    )
    job.state = to_state
    job.reason = reason
    job.detail = detail
    job.updated_at = at
    if to_state is ManagedJobState.WAITING:
        job.nodes = None
    if nodes is not None:
        job.nodes = fold(nodes) or None
    if expected_start is not None:
        job.expected_start = expected_start
    session.add(record)
    session.flush()
    return record


def next_attempt(session: Session, job_id: int, submit_time: float, action: str) -> int:
    """How many times ``action`` was already recorded for this job incarnation."""
    prefix = idempotency_key(job_id, submit_time, action, 0).rsplit(":", 1)[0] + ":"
    count = session.scalar(
        select(func.count()).select_from(JobTransition).where(JobTransition.key.like(prefix + "%"))
    )
    return int(count or 0)


def record_transition(
    session: Session,
    job_id: int,
    slurm_submit_time: float,
    to_state: ManagedJobState,
    action: str,
    reason: str,
    detail: str,
    now: float,
    *,
    nodes: Collection[str] | None = None,
) -> JobTransition:
    """:func:`transition` under the key of ``action``'s next attempt on this job incarnation.

    The one way the daemon records a decision: a new decision gets a new
    key, so it is never mistaken for a retry of an earlier one.  The fence
    is checked inside :func:`transition`, as for every transition.
    """
    attempt = next_attempt(session, job_id, slurm_submit_time, action)
    key = idempotency_key(job_id, slurm_submit_time, action, attempt)
    planned = list(nodes) if nodes is not None else None
    return transition(session, job_id, to_state, reason, detail, key, nodes=planned, now=now)


def history(session: Session, job_id: int) -> list[JobTransition]:
    """Every recorded transition of a job id (all its incarnations), oldest first."""
    stmt = select(JobTransition).where(JobTransition.job_id == job_id).order_by(JobTransition.id)
    return list(session.scalars(stmt))


# -- engine --------------------------------------------------------------------------------------
def _sqlite_setup(engine: Engine) -> None:
    """WAL, busy timeout, durable commits, foreign keys, and BEGIN IMMEDIATE transactions."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from the sqlite3 module, so BEGIN is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = FULL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


#: PostgreSQL ends a session left idle inside a transaction this long (seconds), rolling it
#: back: a daemon stopped (SIGSTOP, a hung host) mid-transaction must not keep the lease row
#: locked past the lease, or the standby's takeover would wait on it for ever.  Shorter than
#: the shortest lease (10 s); no transaction of slurmopt's waits on anything but the database.
PG_IDLE_IN_TRANSACTION_S = 5.0


def _postgresql_setup(engine: Engine) -> None:
    """Each connection: ``idle_in_transaction_session_timeout`` (see above)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        ms = int(PG_IDLE_IN_TRANSACTION_S * 1000)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"SET idle_in_transaction_session_timeout = {ms}")
        finally:
            cursor.close()
        dbapi_connection.commit()


#: Modes of a store the daemon creates: the daemon's user writes, its group (the readers of
#: ``explain``, ``status``, ``preemptions``) reads, nobody else sees the plans.
STORE_DIR_MODE = 0o2750  # setgid: the database and its -wal/-shm files keep the group
STORE_FILE_MODE = 0o640


def _prepare_sqlite_file(url: URL, create: bool) -> None:
    """Check (or, for the daemon, create) a SQLite file database and its directory.

    Only the daemon creates the store (``create``), with :data:`STORE_DIR_MODE`
    and :data:`STORE_FILE_MODE`; SQLite gives its -wal and -shm files the
    database file's mode.  Any other command finding no file says so instead
    of creating one with its caller's umask.
    """
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if path.exists():
        return
    if not create:
        raise StoreError(
            f"no slurmopt store at {database}: the daemon creates it on its first start "
            "(or pass --db)"
        )
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=STORE_DIR_MODE, parents=True)
            os.chmod(path.parent, STORE_DIR_MODE)  # mkdir's mode is cut by the umask
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, STORE_FILE_MODE)
        os.fchmod(fd, STORE_FILE_MODE)
        os.close(fd)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(f"cannot create the store {database}: {exc.strerror or exc}") from exc


class Store:
    """One database: an engine, a session factory, and the helpers the daemon writes with.

    ``Store(url)`` connects only; :meth:`open` also migrates the schema to
    the newest revision.  Sessions do not expire objects on commit, so rows
    returned by the helpers stay readable after their session closes.
    """

    def __init__(self, url: str, *, echo: bool = False, create: bool = True) -> None:
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise StoreError(f"bad database URL {url!r}: {exc}") from exc
        self.url = parsed
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            _prepare_sqlite_file(parsed, create)
        try:
            self.engine = create_engine(parsed, echo=echo)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database URL {url!r}: {exc}") from exc
        if self.is_sqlite:
            _sqlite_setup(self.engine)
        elif parsed.get_backend_name() == "postgresql":
            _postgresql_setup(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        #: Set by the acting daemon: every transition then checks it (see :class:`Fence`).
        self.fence: Fence | None = None
        #: Write only the plan lines that changed (False: every line, as before 0003).
        self.change_only = True
        #: The last plan this store wrote and its lines by job, to diff the next one against.
        self._plan_lines: tuple[int, dict[int, list[dict[str, Any]]]] | None = None
        #: When each job's current lines were written (this process's writes only), so a
        #: job that keeps waiting is written again only after :data:`WAITING_REWRITE_S`.
        self._stored_at: dict[int, float] = {}

    @classmethod
    def open(cls, url: str | None = None, *, echo: bool = False, create: bool = True) -> Store:
        """Connect to ``url`` (default: :func:`resolve_url`) and migrate it to the newest schema.

        ``create``: make a missing SQLite file with the store's modes; every
        command but the daemon passes False, so none creates it by accident.
        """
        store = cls(url or resolve_url(), echo=echo, create=create)
        store.upgrade()
        return store

    def alembic_config(self) -> Config:
        """The alembic configuration, built in code: no ``alembic.ini`` is needed."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        # configparser interpolates '%': escape the URL's (a %-encoded password, socket path).
        url = self.url.render_as_string(hide_password=False).replace("%", "%%")
        config.set_main_option("sqlalchemy.url", url)
        return config

    def upgrade(self, revision: str = "head") -> None:
        """Create the schema on a new database or migrate an old one to ``revision``."""
        config = self.alembic_config()
        try:
            with self.engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
        except DatabaseError as exc:  # also a file that is not a database at all
            raise StoreError(f"cannot migrate {self.describe()}: {exc.orig}") from exc

    def describe(self) -> str:
        """The URL with any password masked, for messages."""
        return self.url.render_as_string(hide_password=True)

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def begin(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        with self.sessions.begin() as session:
            if self.fence is not None:
                session.info[FENCE_INFO] = self.fence
            yield session

    def guard(self) -> None:
        """Right before a Slurm write: raise :class:`LeaseLost` unless the fence still holds.

        Also extends the lease, so a long run of writes keeps it.  A no-op
        when no fence is set (advisory tools, ``slurmopt disable``).
        """
        fence = self.fence
        if fence is None:
            return
        with self.sessions.begin() as session:
            fence.check(session, extend=True)

    # -- leases ----------------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl_s: float, now: float) -> bool:
        """Take lease ``name`` for ``holder`` until ``now + ttl_s``; False if another holds it."""
        return self.acquire_token(name, holder, ttl_s, now) is not None

    def acquire_token(self, name: str, holder: str, ttl_s: float, now: float) -> int | None:
        """Take lease ``name`` for ``holder``; its fencing token, or None if another holds it.

        Succeeds when the lease is free, expired, or already ``holder``'s
        (which extends it and keeps the token).  Passing to a new holder, or
        back to the same one after it expired, raises the token by one.  One
        conditional UPDATE, else one INSERT guarded by the primary key: two
        daemons racing for it cannot both win.
        """
        with self.begin() as session:
            kept = session.execute(
                update(Lease)
                .where(Lease.name == name, Lease.holder == holder, Lease.expires_at > now)
                .values(expires_at=now + ttl_s)
                .execution_options(synchronize_session=False)
            )
            if kept.rowcount == 1:  # type: ignore[attr-defined]
                return session.scalar(select(Lease.token).where(Lease.name == name))
            taken = session.execute(
                update(Lease)
                .where(Lease.name == name, Lease.expires_at <= now)
                .values(
                    holder=holder,
                    acquired_at=now,
                    expires_at=now + ttl_s,
                    token=Lease.token + 1,
                )
                .execution_options(synchronize_session=False)
            )
            if taken.rowcount == 1:  # type: ignore[attr-defined]
                return session.scalar(select(Lease.token).where(Lease.name == name))
            if session.get(Lease, name) is not None:
                return None
        try:
            with self.begin() as session:
                session.add(
                    Lease(
                        name=name,
                        holder=holder,
                        acquired_at=now,
                        expires_at=now + ttl_s,
                        token=1,
                    )
                )
        except IntegrityError:
            return None
        return 1

    def renew_lease(self, name: str, holder: str, ttl_s: float, now: float) -> bool:
        """Extend ``holder``'s unexpired lease to ``now + ttl_s``; False if it is lost.

        A holder whose lease expired must stop acting and acquire again,
        because another daemon may have taken it and acted in between.
        """
        with self.begin() as session:
            renewed = session.execute(
                update(Lease)
                .where(Lease.name == name, Lease.holder == holder, Lease.expires_at > now)
                .values(expires_at=now + ttl_s)
                .execution_options(synchronize_session=False)
            )
            return bool(renewed.rowcount == 1)  # type: ignore[attr-defined]

    def release_lease(self, name: str, holder: str) -> bool:
        """Give up ``holder``'s lease now; False if ``holder`` did not hold it."""
        with self.begin() as session:
            released = session.execute(
                delete(Lease)
                .where(Lease.name == name, Lease.holder == holder)
                .execution_options(synchronize_session=False)
            )
            return bool(released.rowcount == 1)  # type: ignore[attr-defined]

    def lease(self, name: str) -> Lease | None:
        """The lease row (holder and expiry), or None if it was never taken."""
        with self.begin() as session:
            return session.get(Lease, name)

    # -- heartbeat -------------------------------------------------------------------------
    def beat(self, name: str, holder: str, now: float, detail: str = "") -> None:
        """Record that ``holder`` running component ``name`` was alive at ``now`` (fenced)."""
        with self.begin() as session:
            check_fence(session)
            row = session.get(Heartbeat, name)
            if row is None:
                session.add(Heartbeat(name=name, holder=holder, at=now, detail=detail))
            else:
                row.holder, row.at, row.detail = holder, now, detail

    def last_beat(self, name: str) -> Heartbeat | None:
        """The last heartbeat of component ``name``, or None."""
        with self.begin() as session:
            return session.get(Heartbeat, name)

    # -- history ---------------------------------------------------------------------------
    def record_plan(self, plan: Plan, snapshot_taken_at: float, duration_s: float) -> int:
        """Store one plan, writing only the lines that changed since the previous plan.

        A job whose lines equal those it had in the previous stored plan gets
        no new row (its rows stay current); a job that left the plan gets one
        ``gone`` row.  A busy cluster's plan mostly repeats itself between two
        cycles, so this is what keeps the store small.  With
        :attr:`change_only` off every line is written (the old behaviour,
        kept for the benchmark's baseline).  Returns the plan id.  Fenced, as transitions.
        """
        lines = _plan_lines(plan)
        with self.begin() as session:
            check_fence(session)
            previous_id = session.scalar(select(func.max(PlanRecord.id)))
            cached = self._plan_lines
            if previous_id is None:
                before: dict[int, list[dict[str, Any]]] = {}
            elif cached is not None and cached[0] == previous_id:
                before = cached[1]
            else:
                before = _current_lines(session, previous_id)
            record = PlanRecord(
                taken_at=snapshot_taken_at,
                planned_at=plan.now,
                duration_s=duration_s,
                starts=len(plan.actions),
                reservations=len(plan.reservations),
                unplaced=len(plan.unplaced),
                schema_version=plan.schema_version,
            )
            session.add(record)
            session.flush()
            rows: list[dict[str, Any]] = []
            stored: dict[int, list[dict[str, Any]]] = {}
            for job_id, job_lines in lines.items():
                old = before.get(job_id)
                if (
                    self.change_only
                    and old is not None
                    and (
                        _same_lines(old, job_lines)
                        or self._still_waiting(job_id, old, job_lines, plan.now)
                    )
                ):
                    stored[job_id] = old
                    continue
                rows.extend({**line, "plan_id": record.id, "at": plan.now} for line in job_lines)
                stored[job_id] = job_lines
                self._stored_at[job_id] = plan.now
            for job_id in before.keys() - lines.keys():
                gone = {**before[job_id][-1], "kind": GONE, "detail": "", "nodes": None}
                rows.append({**gone, "start_time": None, "plan_id": record.id, "at": plan.now})
            record.stored_lines = len(rows)
            if rows:
                session.execute(insert(Decision), rows)
            plan_id = record.id
        self._plan_lines = (plan_id, stored)
        for job_id in self._stored_at.keys() - stored.keys():
            del self._stored_at[job_id]
        return plan_id

    def _still_waiting(
        self, job_id: int, old: list[dict[str, Any]], new: list[dict[str, Any]], now: float
    ) -> bool:
        """The job waits the same way as when last written, and that was recently.

        Thousands of queued jobs flip between reasons as single nodes fill and
        free, and reservations shift every cycle: such a job is written again
        only every :data:`WAITING_REWRITE_S`.  A start, or a job that gains or
        loses a reservation (other kinds of line), is written at once.
        """
        kinds = _waiting_kinds(new)
        if kinds is None or kinds != _waiting_kinds(old):
            return False
        return now - self._stored_at.get(job_id, -math.inf) < WAITING_REWRITE_S

    def decisions(self, plan_id: int) -> list[Decision]:
        """Every line of one recorded plan: lines carried from earlier plans first, then its own."""
        with self.begin() as session:
            return _plan_rows(session, plan_id)

    def latest_plan(self) -> PlanRecord | None:
        """The newest recorded plan, or None: says whether a job's latest decision is current."""
        with self.begin() as session:
            newest = select(PlanRecord).order_by(PlanRecord.id.desc()).limit(1)
            return session.scalars(newest).first()

    def latest_decisions_for(self, job_id: int) -> tuple[PlanRecord, list[Decision]] | None:
        """The newest plan that mentions ``job_id`` and its lines about it, or None if none does.

        A job can have two lines in one plan (a reservation and its
        ``WAITS_FOR_RESERVATION``), so every line about it is returned, in plan order.
        A job's newest rows are current in every later plan until a ``gone``
        row says it left; then the plan before that one is the newest about it.
        """
        with self.begin() as session:

            def rows_at(plan_id: int) -> list[Decision]:
                stmt = (
                    select(Decision)
                    .where(Decision.plan_id == plan_id, Decision.job_id == job_id)
                    .order_by(Decision.id)
                )
                return list(session.scalars(stmt))

            def newest_row_plan(before: int | None = None) -> int | None:
                stmt = select(func.max(Decision.plan_id)).where(Decision.job_id == job_id)
                if before is not None:
                    stmt = stmt.where(Decision.plan_id < before)
                return session.scalar(stmt)

            row_plan = newest_row_plan()
            if row_plan is None:
                return None
            lines = rows_at(row_plan)
            if lines[0].kind != GONE:
                newest = select(PlanRecord).order_by(PlanRecord.id.desc()).limit(1)
                record = session.scalars(newest).first()
                assert record is not None  # a row's plan is kept as long as the row
                session.expunge_all()
                for line in lines:  # detached: the shift is never written back
                    line.detail = _shift_relative(line.detail, record.planned_at - line.at)
                return record, lines
            last_plan = newest_row_plan(before=row_plan)
            if last_plan is None:
                return None
            last_about = (
                select(PlanRecord)
                .where(PlanRecord.id < row_plan)
                .order_by(PlanRecord.id.desc())
                .limit(1)
            )
            record = session.scalars(last_about).first() or session.get(PlanRecord, last_plan)
            assert record is not None
            return record, rows_at(last_plan)

    def prune(
        self, now: float, retention: Retention | None = None, max_rows: int = 20_000
    ) -> PruneCounts:
        """Delete plans, samples and ended jobs' records past ``retention`` at ``now``.

        At most ``max_rows`` rows, in short transactions; ``more`` in the
        result says rows past retention are left for the next call.  Live
        managed jobs and every row a kept plan still reads are never deleted.
        """
        return prune_history(self.begin, now, retention or Retention(), max_rows)

    def managed_job(self, job_id: int) -> ManagedJob | None:
        """The current record of a managed job, or None if slurmopt does not manage it."""
        with self.begin() as session:
            return session.get(ManagedJob, job_id)

    def record_fragmentation(self, report: FragmentationReport) -> int:
        """Store a report's headline figures at its snapshot time (fenced); returns its id."""
        with self.begin() as session:
            check_fence(session)
            sample = FragmentationSample(
                at=report.taken_at,
                partition=report.partition,
                total_gpus=report.total_gpus,
                allocated_gpus=report.allocated_gpus,
                unavailable_gpus=report.unavailable_gpus,
                free_gpus=report.free_gpus,
                stranded_gpus=report.stranded_gpus,
                fragmentation_index=report.fragmentation_index,
                largest_job_nodes=report.largest_job_nodes,
                largest_single_leaf_job_nodes=report.largest_single_leaf_job_nodes,
                fgd_unusable_share=report.fgd_unusable_share,
            )
            session.add(sample)
            session.flush()
            return sample.id

    def fragmentation_history(
        self,
        since: float | None = None,
        until: float | None = None,
        partition: str | None = None,
    ) -> list[FragmentationSample]:
        """Samples with ``since <= at < until`` of one partition (None: all nodes), oldest first."""
        stmt = select(FragmentationSample).order_by(FragmentationSample.at, FragmentationSample.id)
        if since is not None:
            stmt = stmt.where(FragmentationSample.at >= since)
        if until is not None:
            stmt = stmt.where(FragmentationSample.at < until)
        if partition is None:
            stmt = stmt.where(FragmentationSample.partition.is_(None))
        else:
            stmt = stmt.where(FragmentationSample.partition == partition)
        with self.begin() as session:
            return list(session.scalars(stmt))


def _line(
    kind: str, job_id: int, line: Any, nodes: Sequence[str], at: float | None
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "kind": kind,
        "reason": line.reason,
        "detail": line.detail,
        "nodes": fold(nodes) or None,
        "start_time": at,
    }


#: A time relative to the plan's ``now`` in a decision's detail (``from now+139 s``).
_RELATIVE = re.compile(r"now\+(\d+) s")
#: How many nodes fit a waiting job's shape right now (``...; 3 in partition gpu``).
_FITTING = re.compile(r"(free GPUs; )\d+ in partition")


def _waiting_kinds(lines: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """The kinds of a waiting job's lines (unplaced, reservation), or None if it starts."""
    kinds = tuple(line["kind"] for line in lines)
    return None if any(k not in ("unplaced", "reservation") for k in kinds) else kinds


def _same_lines(before: list[dict[str, Any]] | None, after: list[dict[str, Any]]) -> bool:
    """Whether a job's lines are unchanged, times relative to each plan's ``now`` aside.

    A reservation's absolute start is compared exactly (``start_time``); only
    the ``now+N s`` text of the detail moves with the clock, so it alone is
    ignored, else every waiting job would be rewritten every cycle.
    """
    if before is None or len(before) != len(after):
        return False
    for old, new in zip(before, after, strict=True):
        if {**old, "detail": None} != {**new, "detail": None}:
            return False
        if _steady(old["detail"]) != _steady(new["detail"]):
            return False
    return True


def _steady(detail: str) -> str:
    """``detail`` without the figures that move every cycle while the decision stays."""
    return _FITTING.sub(r"\1# in partition", _RELATIVE.sub("now+# s", detail))


def _shift_relative(detail: str, by_s: float) -> str:
    """``detail`` written ``by_s`` seconds ago, with its ``now+N s`` counted from now."""
    if by_s <= 0:
        return detail
    return _RELATIVE.sub(lambda m: f"now+{max(0, round(int(m.group(1)) - by_s))} s", detail)


def _plan_lines(plan: Plan) -> dict[int, list[dict[str, Any]]]:
    """A plan's lines by job, in plan order, as the columns a decision row stores."""
    lines: dict[int, list[dict[str, Any]]] = {}
    for action in plan.actions:
        lines.setdefault(action.job_id, []).append(
            _line(action.kind, action.job_id, action, action.nodes, None)
        )
    for res in plan.reservations:
        lines.setdefault(res.job_id, []).append(
            _line("reservation", res.job_id, res, res.nodes, res.start_time)
        )
    for un in plan.unplaced:
        lines.setdefault(un.job_id, []).append(
            _line("unplaced", un.job_id, un, (), un.expected_start)
        )
    return lines


def _plan_rows(session: Session, plan_id: int) -> list[Decision]:
    """The rows that make up plan ``plan_id``: each job's newest rows at or before it."""
    newest = (
        select(Decision.job_id, func.max(Decision.plan_id).label("plan_id"))
        .where(Decision.plan_id <= plan_id)
        .group_by(Decision.job_id)
        .subquery()
    )
    stmt = (
        select(Decision)
        .join(
            newest,
            (Decision.job_id == newest.c.job_id) & (Decision.plan_id == newest.c.plan_id),
        )
        .where(Decision.kind != GONE)
        .order_by(Decision.id)
    )
    return list(session.scalars(stmt))


def _current_lines(session: Session, plan_id: int) -> dict[int, list[dict[str, Any]]]:
    """Plan ``plan_id``'s lines by job, read back from the store (after a restart)."""
    lines: dict[int, list[dict[str, Any]]] = {}
    for row in _plan_rows(session, plan_id):
        lines.setdefault(row.job_id, []).append(
            {
                "job_id": row.job_id,
                "kind": row.kind,
                "reason": row.reason,
                "detail": row.detail,
                "nodes": row.nodes,
                "start_time": row.start_time,
            }
        )
    return lines


__all__ = [
    "DEFAULT_URL",
    "URL_ENV",
    "IllegalTransition",
    "JobIdReused",
    "FENCE_INFO",
    "Fence",
    "KeyConflict",
    "LeaseLost",
    "Store",
    "StoreError",
    "UnknownJob",
    "check_fence",
    "history",
    "idempotency_key",
    "next_attempt",
    "record_transition",
    "register_job",
    "resolve_url",
    "transition",
]
