"""The migrations build the schema the models describe, on SQLite files and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from slurmopt.store import DEFAULT_URL, Base, Store, StoreError, resolve_url

TABLES = {
    "managed_jobs",
    "job_transitions",
    "decisions",
    "plans",
    "fragmentation_samples",
    "preemptions",
    "node_health",
    "leases",
    "heartbeat",
}


def _url(tmp_path: Path, name: str = "slurmopt.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def _diff(store: Store, metadata: sa.MetaData = Base.metadata) -> list[object]:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))


def test_open_creates_every_table_on_a_new_file(tmp_path: Path) -> None:
    store = Store.open(_url(tmp_path, "sub/dir/slurmopt.db"))
    try:
        assert (tmp_path / "sub/dir/slurmopt.db").is_file()
        names = set(sa.inspect(store.engine).get_table_names())
        assert names == TABLES | {"alembic_version"}
        assert set(Base.metadata.tables) == TABLES
        head = ScriptDirectory.from_config(store.alembic_config()).get_current_head()
        with store.engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == head
    finally:
        store.close()


def test_models_match_the_migrations(tmp_path: Path) -> None:
    store = Store.open(_url(tmp_path))
    try:
        assert _diff(store) == []
    finally:
        store.close()


def test_comparison_sees_a_model_the_migrations_lack(tmp_path: Path) -> None:
    """The check above is live: a column added only to the models shows up as a difference."""
    store = Store.open(_url(tmp_path))
    extended = sa.MetaData()
    for table in Base.metadata.tables.values():
        table.to_metadata(extended)
    extended.tables["leases"].append_column(sa.Column("fencing_token", sa.Integer()))
    try:
        diff = _diff(store, extended)
        assert [d[0] for d in diff if isinstance(d, tuple)] == ["add_column"]
    finally:
        store.close()


def test_open_again_keeps_data_and_migrates_an_old_database(tmp_path: Path) -> None:
    url = _url(tmp_path)
    first = Store.open(url)
    first.beat("daemon", "host-a:1", 100.0)
    first.close()
    again = Store.open(url)
    try:
        beat = again.last_beat("daemon")
        assert beat is not None and beat.holder == "host-a:1"
    finally:
        again.close()
    # A database at an older revision (here: none) is brought up to head.
    old = Store(url)
    with old.engine.begin() as conn:
        config = old.alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, "base")
    assert set(sa.inspect(old.engine).get_table_names()) == {"alembic_version"}
    old.close()
    migrated = Store.open(url)
    try:
        assert set(sa.inspect(migrated.engine).get_table_names()) >= TABLES
    finally:
        migrated.close()


def _tables(store: Store) -> set[str]:
    return set(sa.inspect(store.engine).get_table_names())


def test_migrations_go_up_to_head_down_to_base_and_up_again(store_url: str) -> None:
    store = Store.open(store_url)
    try:
        assert _tables(store) == TABLES | {"alembic_version"}
        assert _diff(store) == []  # the database's own types match the models
        store.beat("daemon", "host-a:1", 100.0)
        config = store.alembic_config()
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "base")
        assert _tables(store) == {"alembic_version"}
        store.upgrade()
        assert _tables(store) == TABLES | {"alembic_version"}
        assert _diff(store) == []
        assert store.acquire_token("enforcer", "host-a:1", 10, 0.0) == 1
    finally:
        store.close()


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    store = Store.open(_url(tmp_path))
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert (conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) >= 1000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        store.close()


def test_url_comes_from_option_then_environment_then_default() -> None:
    env = {"SLURMOPT_DB": "postgresql://slurmopt@db/slurmopt"}
    assert resolve_url("sqlite:///x.db", env) == "sqlite:///x.db"
    assert resolve_url(None, env) == "postgresql://slurmopt@db/slurmopt"
    assert resolve_url(None, {}) == DEFAULT_URL == "sqlite:////var/lib/slurmopt/slurmopt.db"


def test_a_bad_url_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="bad database URL"):
        Store("not a url")
