"""One way for every command to reach its inputs: the config, Slurm, the fabric and the store.

A command that reads Slurm, the fabric or the store takes the same options
(``--config FILE``, and where they apply ``--db URL`` and ``--fabric FILE``)
and calls :func:`resolve` once; the :class:`Wiring` it gets connects to
nothing until asked.  So the backend, the slurmrestd URL, the fabric and the
database come from the same place, in the same order, for every command:
options on the command line, then the environment, then the config file
(``docs/config.md``), then the defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from slurmopt.config import Config, load_config

if TYPE_CHECKING:  # Slurm adapters, networkx and SQLAlchemy load only when a command needs them
    from slurmopt.fabric import Fabric
    from slurmopt.model import ClusterSnapshot
    from slurmopt.slurm.base import SlurmClient
    from slurmopt.store import Store

F = TypeVar("F", bound=Callable[..., Any])

#: ``--config``'s help, naming the search path (``docs/config.md``).
CONFIG_HELP = (
    "slurmopt config file (default: $SLURMOPT_CONFIG, else slurmopt.toml beside slurm.conf, "
    "else /etc/slurmopt/slurmopt.toml, else built-in defaults)."
)


def _file_option(flag: str, dest: str, help_text: str) -> Callable[[F], F]:
    """An optional ``FLAG FILE`` option (a path, not a directory; None when not given)."""
    return click.option(
        flag, dest, type=click.Path(dir_okay=False), default=None, metavar="FILE", help=help_text
    )


#: ``--config FILE``: passed to :func:`resolve` as ``config_path``.
config_option = _file_option("--config", "config_path", CONFIG_HELP)
#: ``--db URL``: the store, overriding the config's ``db`` and ``$SLURMOPT_DB``.
db_option = click.option(
    "--db",
    default=None,
    metavar="URL",
    help="Store (SQLAlchemy URL) (default: the config's db, or $SLURMOPT_DB).",
)
#: ``--fabric FILE``: overrides the config's ``fabric``.
fabric_option = _file_option(
    "--fabric",
    "fabric_file",
    "Fabric file (topology.conf, topology.yaml or slurmopt fabric YAML) "
    "(default: the config's fabric, else discovered from Slurm).",
)


def connect_for(ctx: click.Context, config: Config) -> SlurmClient:
    """A Slurm client: ``slurmopt --backend`` when given, else the config's backend and rest keys.

    The root option wins only when given on the command line or through its
    environment variable, so a site's TOML file is honoured otherwise.
    """
    from slurmopt.slurm import connect

    root = ctx.find_root()
    backend = config.backend
    if root.get_parameter_source("backend") in (
        click.core.ParameterSource.COMMANDLINE,
        click.core.ParameterSource.ENVIRONMENT,
    ):
        backend = str((root.obj or {}).get("backend", config.backend))
    if backend == "rest":
        rest = {
            "url": config.rest_url,
            "api_version": config.rest_api,
            "token_file": config.rest_token_file,
            "token_command": config.rest_token_command,
        }
        return connect("rest", **{key: value for key, value in rest.items() if value})
    return connect(backend)


def open_store_for_reading(url: str) -> Store:
    """The store at ``url`` as it is: never created, never migrated, by a command that only reads.

    A missing SQLite file or one without slurmopt's tables is a one-line
    :class:`StoreError` rather than a fresh empty database (a mistyped
    ``--db`` must not look like an empty history).
    """
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DatabaseError

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
    except DatabaseError as exc:  # a file that is no database too, not only a locked one
        store.close()
        raise StoreError(f"cannot read {store.describe()}: {exc.orig}") from None
    if not has_tables:
        store.close()
        raise StoreError(f"{store.describe()} holds no slurmopt tables (not a slurmopt store?)")
    return store


@dataclass
class Wiring:
    """A command's inputs, each made on first use and kept: config, Slurm client, fabric, store."""

    ctx: click.Context
    config: Config
    _client: SlurmClient | None = field(default=None, repr=False)

    def client(self) -> SlurmClient:
        """The Slurm client (:func:`connect_for`), connected once."""
        if self._client is None:
            self._client = connect_for(self.ctx, self.config)
        return self._client

    def fabric(self, snapshot: ClusterSnapshot | None = None) -> Fabric:
        """The fabric: ``--fabric`` or the config's file, else discovered (``Fabric.source`` says).

        Slurm is asked only when no file is configured; ``snapshot``, when
        given, names the nodes a file may mention.
        """
        from slurmopt.fabric.discover import load_fabric

        nodes = list(snapshot.nodes) if snapshot is not None else None
        if self.config.fabric:
            return load_fabric(fabric_file=self.config.fabric, nodes=nodes)
        return load_fabric(client=self.client(), fabric_file=None, nodes=nodes)

    def read_store(self) -> Store:
        """The store as it is, for a command that only reads (:func:`open_store_for_reading`)."""
        return open_store_for_reading(self.config.db)

    def open_store(self, create: bool = False) -> Store:
        """The store, migrated as needed, for a command that writes to it.

        Only the daemon passes ``create``: any other command finding no store
        says so rather than make one with its caller's umask.
        """
        from slurmopt.store import Store

        return Store.open(self.config.db, create=create)


def resolve(
    ctx: click.Context, config_path: str | None, overrides: Mapping[str, Any] | None = None
) -> Wiring:
    """The command's wiring from ``--config`` and the options it overrides (None: not given).

    ``overrides`` uses config keys: ``{"db": db, "fabric": fabric_file}``.
    """
    return Wiring(ctx, load_config(config_path, overrides))


__all__ = [
    "CONFIG_HELP",
    "Wiring",
    "config_option",
    "connect_for",
    "db_option",
    "fabric_option",
    "open_store_for_reading",
    "resolve",
]
