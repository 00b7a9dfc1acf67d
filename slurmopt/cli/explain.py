"""``slurmopt explain JOBID``: why a job waits, or where it was placed, and what Slurm shows now.

The stored decision comes first and needs no Slurm: when Slurm cannot be
read the command still shows it, with one warning line on stderr, and
exits 0 (the question was about slurmopt's decision, which is known).  A
job the store knows nothing of is a one-line error and exit 1.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurmopt.cli.common import connect_for, emit_json
from slurmopt.errors import FabricError, SlurmError

if TYPE_CHECKING:  # the store, SQLAlchemy and the fabric load only when a command needs them
    from slurmopt.config import Config
    from slurmopt.explain import SlurmView
    from slurmopt.fabric import Fabric
    from slurmopt.model import ClusterSnapshot
    from slurmopt.slurm.base import SlurmClient
    from slurmopt.store import Store


def store_url(db: str | None, config_file: str | None) -> str:
    """``--db``, else the config's ``db`` (file, ``$SLURMOPT_DB``, default), as documented."""
    from slurmopt.config import load_config

    if db:
        return db
    return load_config(config_file).db


def open_store_for_reading(url: str) -> Store:
    """The store at ``url`` as it is: never created, never migrated, by a command that only reads.

    A missing SQLite file or one without slurmopt's tables is a one-line
    :class:`StoreError` rather than a fresh empty database (a mistyped
    ``--db`` must not look like an empty history).
    """
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, OperationalError

    from slurmopt.store import Store, StoreError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"bad database URL {url!r}: {exc}") from None
    database = parsed.database or ""
    if (
        parsed.get_backend_name() == "sqlite"
        and database not in ("", ":memory:")
        and not database.startswith("file:")
        and not Path(database).is_file()
    ):
        raise StoreError(f"no slurmopt store at {database} (has the daemon run with this --db?)")
    store = Store(url, create=False)
    try:
        has_tables = inspect(store.engine).has_table("plans")
    except OperationalError as exc:
        store.close()
        raise StoreError(f"cannot read {store.describe()}: {exc.orig}") from None
    if not has_tables:
        store.close()
        raise StoreError(f"{store.describe()} holds no slurmopt tables (not a slurmopt store?)")
    return store


def _read_slurm(
    ctx: click.Context, config: Config
) -> tuple[SlurmView, SlurmClient | None, ClusterSnapshot | None]:
    """Slurm's view of the cluster, or an unreachable view saying why; SlurmError never escapes."""
    from slurmopt.explain import SlurmView

    try:
        client = connect_for(ctx, config)
        snapshot = client.snapshot()
    except SlurmError as exc:
        return SlurmView(False, str(exc), None), None, None
    return SlurmView(True, None, None), client, snapshot


def _load_fabric(
    config: Config, client: SlurmClient | None, snapshot: ClusterSnapshot | None
) -> Fabric | None:
    """The configured or discovered fabric; None (with a warning) when it cannot be had."""
    from slurmopt.fabric.discover import load_fabric

    nodes = list(snapshot.nodes) if snapshot is not None else None
    if not config.fabric and client is None:
        return None  # Slurm is unreachable: its warning already says so
    try:
        return load_fabric(client=client, fabric_file=config.fabric or None, nodes=nodes)
    except (FabricError, SlurmError) as exc:
        click.echo(f"slurmopt: warning: no fabric figures: {exc}", err=True)
        return None


@click.command()
@click.argument("job_id", metavar="JOBID", type=click.IntRange(min=1))
@click.option("--db", default=None, metavar="URL", help="Store URL (default: config db).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="slurmopt config file (default: $SLURMOPT_CONFIG, /etc/slurmopt/slurmopt.toml).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.pass_context
def explain(
    ctx: click.Context, job_id: int, db: str | None, config_file: str | None, as_json: bool
) -> None:
    """Why job JOBID waits, or where it was placed, from the newest plan that mentions it."""
    from sqlalchemy.exc import OperationalError

    from slurmopt.config import load_config
    from slurmopt.explain import SlurmView, ensure_known, explain_job
    from slurmopt.store import StoreError

    config = load_config(config_file)
    store = open_store_for_reading(db or config.db)
    try:
        decided = store.latest_decisions_for(job_id)
        managed = store.managed_job(job_id)
        latest = store.latest_plan()
    except OperationalError as exc:
        raise StoreError(f"cannot read {store.describe()}: {exc.orig}") from None
    finally:
        store.close()
    ensure_known(job_id, decided, managed, store.describe())

    view, client, snapshot = _read_slurm(ctx, config)
    if not view.reachable:
        warning = f"cannot read Slurm ({view.error}); showing the stored decision only"
        click.echo(f"slurmopt: warning: {warning}", err=True)
    elif snapshot is not None:
        view = SlurmView(True, None, snapshot.jobs.get(job_id))
    placed = decided is not None and any(d.kind != "unplaced" for d in decided[1])
    fabric = _load_fabric(config, client, snapshot) if placed else None
    explanation = explain_job(job_id, decided, latest, managed, view, fabric, time.time())
    if as_json:
        emit_json(explanation.to_json())
    else:
        for line in explanation.lines():
            click.echo(line)
