"""Test helpers for the PostgreSQL at ``$SLURMOPT_TEST_PG_URL`` (``scripts/pg-sandbox up``).

Tests marked ``postgres`` get a URL to a fresh schema of their own, so
several tests (and several engineers' runs) share one database without
seeing each other's rows; when the URL is unset or the server does not
answer they fail with one line (they never skip).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import make_url

PG_URL_ENV = "SLURMOPT_TEST_PG_URL"


def pg_problem(url: str | None) -> str | None:
    """Why the test PostgreSQL cannot be used (one line), or None when it answers."""
    if not url:
        return (
            f"no PostgreSQL: ${PG_URL_ENV} is unset; start one with "
            '`eval "$(scripts/pg-sandbox up)"` (scripts/test does)'
        )
    shown = make_url(url).render_as_string(hide_password=True)
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        finally:
            engine.dispose()
    except (sa.exc.SQLAlchemyError, ImportError) as exc:
        first = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"])[0]
        return f"PostgreSQL unreachable at {shown}: {first}"
    return None


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """A new, empty schema; yields a URL whose connections use it; dropped on the way out."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        scoped = make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield scoped.render_as_string(hide_password=False)
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()
