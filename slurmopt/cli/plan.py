"""``slurmopt plan``: one planning pass against the live queue, as the advisory daemon makes it.

Read-only by construction: it takes a snapshot, resolves the fabric and
reads the store's recorded priorities (when there is a store), then calls the
same :func:`~slurmopt.policy.plan.plan` with the same policy, job selection
and priorities as an advisory daemon.  It writes no heartbeat, no store row
and asks Slurm for nothing but reads, so it is safe next to a running
daemon and before anyone enforces.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.wiring import Wiring, config_option, db_option, fabric_option, resolve
from slurmopt.errors import SlurmoptError

if TYPE_CHECKING:
    from slurmopt.model import ClusterSnapshot


def recorded_priorities(wiring: Wiring) -> tuple[dict[int, int | None], str | None]:
    """Priorities recorded before slurmopt held each job; a note instead when there is no store."""
    from sqlalchemy.exc import SQLAlchemyError

    from slurmopt.daemon.reconcile import live_records

    try:
        store = wiring.read_store()
    except SlurmoptError as exc:
        return {}, f"no store ({exc}): held jobs are ordered by submit time"
    try:
        return {r.job_id: r.priority_before_hold for r in live_records(store)}, None
    except SQLAlchemyError as exc:
        return {}, f"cannot read {store.describe()} ({exc}): held jobs are ordered by submit time"
    finally:
        store.close()


def planning_pass(wiring: Wiring, snapshot: ClusterSnapshot, now: float) -> dict[str, Any]:
    """The advisory daemon's plan for ``snapshot``, as the ``--json`` document."""
    from slurmopt.daemon.loop import Daemon
    from slurmopt.daemon.managed import advised, planning_priorities
    from slurmopt.policy.plan import PlanRequest, plan

    fabric = wiring.fabric(snapshot)
    parts = wiring.config.managed_partitions
    planned = sorted(
        (j for j in snapshot.jobs.values() if advised(j, parts)), key=lambda j: j.job_id
    )
    recorded, note = recorded_priorities(wiring) if planned else ({}, None)
    priorities = planning_priorities(planned, recorded)
    policy = Daemon.policy_for(wiring.config)
    managed = frozenset(j.job_id for j in planned)
    request = PlanRequest(snapshot, fabric, policy, now, managed=managed, priorities=priorities)
    result = plan(request)
    return {
        **result.to_json(),
        "snapshot_taken_at": snapshot.taken_at,
        "backend": wiring.client().name,
        "fabric": fabric.source or fabric.name,
        "planned_jobs": [j.job_id for j in planned],
        "notes": [note] if note else [],
    }


def _print(doc: dict[str, Any]) -> None:
    from slurmopt.explain import format_time
    from slurmopt.hostlist import fold

    click.echo(
        f"{len(doc['planned_jobs'])} pending managed GPU job(s) planned; fabric: {doc['fabric']}; "
        "nothing was written"
    )
    rows = [
        (a["job_id"], "start now", fold(a["nodes"]), a["reason"], a["detail"])
        for a in doc["actions"]
    ]
    rows += [
        (
            r["job_id"],
            f"reserve from {format_time(r['start_time'])}",
            fold(r["nodes"]),
            r["reason"],
            r["detail"],
        )
        for r in doc["reservations"]
    ]
    reserved = {r["job_id"] for r in doc["reservations"]}
    rows += [
        (u["job_id"], "wait", "-", u["reason"], u["detail"])
        for u in doc["unplaced"]
        if u["job_id"] not in reserved
    ]
    if rows:
        print_table(None, ["job", "decision", "nodes", "reason", "detail"], rows)
    for note in doc["notes"]:
        click.echo(f"note: {note}")


@click.command("plan")
@config_option
@db_option
@fabric_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout (plan schema).")
@click.pass_context
def plan_cmd(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    fabric_file: str | None,
    as_json: bool,
) -> None:
    """Plan the live queue once, as the advisory daemon would, and write nothing.

    Every pending managed GPU job is planned (held or not): starts now on
    named nodes, reservations for later, and jobs left waiting, each with
    the planner's reason.  Slurm is only read; no heartbeat, no store row.
    """
    wiring = resolve(ctx, config_path, {"db": db, "fabric": fabric_file})
    snapshot = wiring.client().snapshot()
    doc = planning_pass(wiring, snapshot, time.time())
    if as_json:
        emit_json(doc)
    else:
        _print(doc)


__all__ = ["plan_cmd", "planning_pass", "recorded_priorities"]
