"""Opening the store's database: its URL, the SQLite file and its modes, each connection's setup.

SQLite is opened in WAL mode with a busy timeout and ``synchronous=FULL``,
and every transaction starts with ``BEGIN IMMEDIATE``; a PostgreSQL session
left idle inside a transaction is ended by the server
(:data:`PG_IDLE_IN_TRANSACTION_S`).  :class:`slurmopt.store.db.Store` calls
these when it connects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL

from slurmopt.errors import SlurmoptError

#: The database when neither ``--db`` nor ``SLURMOPT_DB`` names one.
DEFAULT_URL = "sqlite:////var/lib/slurmopt/slurmopt.db"

#: Environment variable that names the database URL.
URL_ENV = "SLURMOPT_DB"

#: How long a SQLite connection waits for another writer's lock, in milliseconds.
SQLITE_BUSY_TIMEOUT_MS = 10_000


# -- errors --------------------------------------------------------------------------------------
class StoreError(SlurmoptError):
    """The database cannot be opened, migrated or written."""

    exit_code = 74  # EX_IOERR


# -- URLs ----------------------------------------------------------------------------------------
def resolve_url(option: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The database URL: ``--db`` if given, else ``$SLURMOPT_DB``, else :data:`DEFAULT_URL`."""
    if option:
        return option
    env = os.environ if environ is None else environ
    return env.get(URL_ENV) or DEFAULT_URL


# -- engine --------------------------------------------------------------------------------------
def sqlite_setup(engine: Engine) -> None:
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


def postgresql_setup(engine: Engine) -> None:
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


def prepare_sqlite_file(url: URL, create: bool) -> None:
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
