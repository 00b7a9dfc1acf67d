"""``slurmopt explain JOBID``: why a job waits, or where it was placed, and what Slurm shows now.

The stored decision comes first and needs no Slurm: when Slurm cannot be
read the command still shows it, with one warning line on stderr, and
exits 0 (the question was about slurmopt's decision, which is known).  A
job the store knows nothing of is a one-line error and exit 1.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from slurmopt.cli.common import emit_json
from slurmopt.cli.wiring import Wiring, config_option, db_option, resolve
from slurmopt.errors import FabricError, SlurmError
from slurmopt.model import MAX_JOB_ID

if TYPE_CHECKING:  # the store, SQLAlchemy and the fabric load only when a command needs them
    from slurmopt.explain import SlurmView
    from slurmopt.fabric import Fabric
    from slurmopt.model import ClusterSnapshot


def _read_slurm(wiring: Wiring) -> tuple[SlurmView, ClusterSnapshot | None]:
    """Slurm's view of the cluster, or an unreachable view saying why; SlurmError never escapes."""
    from slurmopt.explain import SlurmView

    try:
        snapshot = wiring.client().snapshot()
    except SlurmError as exc:
        return SlurmView(False, str(exc), None), None
    return SlurmView(True, None, None), snapshot


def _load_fabric(wiring: Wiring, snapshot: ClusterSnapshot | None) -> Fabric | None:
    """The configured or discovered fabric; None (with a warning) when it cannot be had."""
    if not wiring.config.fabric and snapshot is None:
        return None  # Slurm is unreachable: its warning already says so
    try:
        return wiring.fabric(snapshot)
    except (FabricError, SlurmError) as exc:
        click.echo(f"slurmopt: warning: no fabric figures: {exc}", err=True)
        return None


@click.command()
@click.argument("job_id", metavar="JOBID", type=click.IntRange(min=1, max=MAX_JOB_ID))
@db_option
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.pass_context
def explain(
    ctx: click.Context, job_id: int, db: str | None, config_path: str | None, as_json: bool
) -> None:
    """Why job JOBID waits, or where it was placed, from the newest plan that mentions it."""
    from sqlalchemy.exc import DatabaseError

    from slurmopt.explain import SlurmView, ensure_known, explain_job
    from slurmopt.store import StoreError

    wiring = resolve(ctx, config_path, {"db": db})
    store = wiring.read_store()
    try:
        decided = store.latest_decisions_for(job_id)
        managed = store.managed_job(job_id)
        latest = store.latest_plan()
    except DatabaseError as exc:
        raise StoreError(f"cannot read {store.describe()}: {exc.orig}") from None
    finally:
        store.close()
    ensure_known(job_id, decided, managed, store.describe())

    view, snapshot = _read_slurm(wiring)
    if not view.reachable:
        warning = f"cannot read Slurm ({view.error}); showing the stored decision only"
        click.echo(f"slurmopt: warning: {warning}", err=True)
    elif snapshot is not None:
        view = SlurmView(True, None, snapshot.jobs.get(job_id))
    placed = decided is not None and any(d.kind != "unplaced" for d in decided[1])
    fabric = _load_fabric(wiring, snapshot) if placed else None
    explanation = explain_job(job_id, decided, latest, managed, view, fabric, time.time())
    if as_json:
        emit_json(explanation.to_json())
    else:
        for line in explanation.lines():
            click.echo(line)
