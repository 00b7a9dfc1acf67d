"""Alembic environment for slurmopt's store.

``Store.upgrade`` builds the configuration in code and hands over an open
connection in ``config.attributes["connection"]``, so the migration runs on
the store's own engine (SQLite pragmas included) inside its transaction.
Without one (the ``alembic`` command with ``-x`` or ``sqlalchemy.url``), a
connection is made from the URL.  SQLite migrations run in batch mode,
because SQLite can only add columns, not alter or drop them.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from slurmopt.store.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    """Write the SQL for the URL's dialect instead of running it (``alembic upgrade --sql``)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: set sqlalchemy.url or pass a connection")
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as own:
        _configure(own)
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
