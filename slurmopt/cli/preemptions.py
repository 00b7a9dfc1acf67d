"""``slurmopt preemptions``: past and current preemptions, per victim, from the store.

Lost work is the GPU-seconds a victim spent since the checkpoint it will
resume from; overhead is the time from the decision (the signal) until the
job it made room for was running, read from that job's recorded transitions.
"""

from __future__ import annotations

from typing import Any

import click
from sqlalchemy import select

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.wiring import config_option, db_option, resolve
from slurmopt.store import JobTransition, ManagedJobState, Preemption, Store


def preemption_rows(store: Store, limit: int | None = None) -> list[dict[str, Any]]:
    """One dict per victim, newest first, with overhead (None until the preemptor runs)."""
    with store.begin() as session:
        query = select(Preemption).order_by(Preemption.id.desc())
        if limit:
            query = query.limit(limit)
        rows = session.scalars(query).all()
        out = []
        for row in rows:
            started = None
            if row.for_job_id is not None:
                started = session.scalar(
                    select(JobTransition.at)
                    .where(
                        JobTransition.job_id == row.for_job_id,
                        JobTransition.to_state == ManagedJobState.RUNNING,
                        JobTransition.at >= row.signalled_at,
                    )
                    .order_by(JobTransition.at)
                    .limit(1)
                )
            out.append(
                {
                    "id": row.id,
                    "victim_job_id": row.victim_job_id,
                    "for_job_id": row.for_job_id,
                    "signal": row.signal,
                    "signalled_at": row.signalled_at,
                    "ack_at": row.ack_at,
                    "checkpoint_step": row.checkpoint_step,
                    "outcome": row.outcome or "in_flight",
                    "lost_gpu_seconds": row.lost_gpu_seconds,
                    "overhead_s": None if started is None else started - row.signalled_at,
                }
            )
    return out


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


@click.command("preemptions")
@db_option
@config_option
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Newest N only.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def preemptions(
    ctx: click.Context, db: str | None, config_path: str | None, limit: int | None, as_json: bool
) -> None:
    """Past and current preemptions: victim, outcome, lost work and overhead."""
    store = resolve(ctx, config_path, {"db": db}).read_store()
    try:
        rows = preemption_rows(store, limit)
    finally:
        store.close()
    if as_json:
        emit_json({"preemptions": rows})
        return
    print_table(
        None,
        ["id", "victim", "for", "outcome", "step", "lost GPU-s", "overhead s"],
        [
            (
                r["id"],
                r["victim_job_id"],
                r["for_job_id"] if r["for_job_id"] is not None else "-",
                r["outcome"],
                r["checkpoint_step"] if r["checkpoint_step"] is not None else "-",
                _num(r["lost_gpu_seconds"]),
                _num(r["overhead_s"], "{:.1f}"),
            )
            for r in rows
        ],
        right_align=lambda col: col in ("id", "victim", "for", "step", "lost GPU-s", "overhead s"),
    )


__all__ = ["preemption_rows", "preemptions"]
