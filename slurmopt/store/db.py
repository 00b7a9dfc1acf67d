"""The store: engine and sessions, schema migration, leases, and the history it writes.

Job transitions and the fence live in :mod:`slurmopt.store.transitions`, the
helpers that diff and read back recorded plans in :mod:`slurmopt.store.plans`,
the database URL, the SQLite file's modes and each connection's setup in
:mod:`slurmopt.store.engine`; their public names are re-exported here.

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, delete, func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from slurmopt.policy.fragmentation import FragmentationReport
from slurmopt.policy.plan import Plan
from slurmopt.store.engine import (
    DEFAULT_URL,
    PG_IDLE_IN_TRANSACTION_S,
    SQLITE_BUSY_TIMEOUT_MS,
    STORE_DIR_MODE,
    STORE_FILE_MODE,
    URL_ENV,
    StoreError,
    postgresql_setup,
    prepare_sqlite_file,
    resolve_url,
    sqlite_setup,
)
from slurmopt.store.models import (
    Decision,
    FragmentationSample,
    Heartbeat,
    Lease,
    ManagedJob,
    PlanRecord,
)
from slurmopt.store.plans import (
    WAITING_REWRITE_S,
    changed_rows,
    current_lines,
    latest_about,
    plan_lines,
    plan_rows,
    same_lines,
    waiting_kinds,
)
from slurmopt.store.retention import PruneCounts, Retention
from slurmopt.store.retention import prune as prune_history
from slurmopt.store.transitions import (
    FENCE_INFO,
    Fence,
    IllegalTransition,
    JobIdReused,
    KeyConflict,
    LeaseLost,
    UnknownJob,
    check_fence,
    history,
    idempotency_key,
    next_attempt,
    record_transition,
    register_job,
    transition,
)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


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
            prepare_sqlite_file(parsed, create)
        try:
            self.engine = create_engine(parsed, echo=echo)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database URL {url!r}: {exc}") from exc
        if self.is_sqlite:
            sqlite_setup(self.engine)
        elif parsed.get_backend_name() == "postgresql":
            postgresql_setup(self.engine)
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
        lines = plan_lines(plan)
        with self.begin() as session:
            check_fence(session)
            previous_id = session.scalar(select(func.max(PlanRecord.id)))
            cached = self._plan_lines
            if previous_id is None:
                before: dict[int, list[dict[str, Any]]] = {}
            elif cached is not None and cached[0] == previous_id:
                before = cached[1]
            else:
                before = current_lines(session, previous_id)
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
            rows, stored, written = changed_rows(before, lines, record.id, plan.now, self._keeps)
            for job_id in written:
                self._stored_at[job_id] = plan.now
            record.stored_lines = len(rows)
            if rows:
                session.execute(insert(Decision), rows)
            plan_id = record.id
        self._plan_lines = (plan_id, stored)
        for job_id in self._stored_at.keys() - stored.keys():
            del self._stored_at[job_id]
        return plan_id

    def _keeps(
        self, job_id: int, old: list[dict[str, Any]], new: list[dict[str, Any]], now: float
    ) -> bool:
        """Whether ``record_plan`` keeps a job's stored lines ``old`` instead of writing ``new``."""
        return self.change_only and (
            same_lines(old, new) or self._still_waiting(job_id, old, new, now)
        )

    def _still_waiting(
        self, job_id: int, old: list[dict[str, Any]], new: list[dict[str, Any]], now: float
    ) -> bool:
        """The job waits the same way as when last written, and that was recently.

        Thousands of queued jobs flip between reasons as single nodes fill and
        free, and reservations shift every cycle: such a job is written again
        only every :data:`WAITING_REWRITE_S`.  A start, or a job that gains or
        loses a reservation (other kinds of line), is written at once.
        """
        kinds = waiting_kinds(new)
        if kinds is None or kinds != waiting_kinds(old):
            return False
        return now - self._stored_at.get(job_id, -math.inf) < WAITING_REWRITE_S

    def decisions(self, plan_id: int) -> list[Decision]:
        """Every line of one recorded plan: lines carried from earlier plans first, then its own."""
        with self.begin() as session:
            return plan_rows(session, plan_id)

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
            return latest_about(session, job_id)

    def prune(
        self, now: float, retention: Retention | None = None, max_rows: int = 20_000
    ) -> PruneCounts:
        """Delete plans, samples and ended jobs' records past ``retention`` at ``now``.

        At most ``max_rows`` rows, in short transactions; ``more`` in the
        result says rows past retention are left for the next call.  Live
        managed jobs and every row a kept plan still reads are never deleted.
        """
        # Each batch checks the fence in its own transaction: a daemon that lost the lease
        # deletes nothing more (LeaseLost).
        return prune_history(self._fenced, now, retention or Retention(), max_rows)

    @contextmanager
    def _fenced(self) -> Iterator[Session]:
        """:meth:`begin`, with the fence (if any) checked first in the same transaction."""
        with self.begin() as session:
            check_fence(session)
            yield session

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


__all__ = [
    "DEFAULT_URL",
    "PG_IDLE_IN_TRANSACTION_S",
    "SQLITE_BUSY_TIMEOUT_MS",
    "STORE_DIR_MODE",
    "STORE_FILE_MODE",
    "WAITING_REWRITE_S",
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
