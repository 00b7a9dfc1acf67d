"""Recorded plans: a plan's lines as decision rows, and which of them a new plan rewrites.

:meth:`Store.record_plan <slurmopt.store.db.Store.record_plan>` writes only
the lines that changed since the previous plan; these helpers turn a plan
into the columns a :class:`~slurmopt.store.models.Decision` row stores, read
a stored plan back, and decide when a waiting job's lines count as unchanged
(the figures that move every cycle aside).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from slurmopt.hostlist import fold
from slurmopt.policy.plan import Plan
from slurmopt.store.models import Decision, PlanRecord
from slurmopt.store.retention import GONE

#: Seconds between two writes of a waiting job's changed lines (see ``Store.record_plan``).
WAITING_REWRITE_S = 600.0


def _line(
    kind: str, job_id: int, line: Any, nodes: Sequence[str], at: float | None
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "kind": kind,
        "reason": line.reason,
        "detail": line.detail,
        "nodes": fold(nodes) or None,
        "start_time": at,
    }


#: A time relative to the plan's ``now`` in a decision's detail (``from now+139 s``).
_RELATIVE = re.compile(r"now\+(\d+) s")
#: How many nodes fit a waiting job's shape right now (``...; 3 in partition gpu``).
_FITTING = re.compile(r"(free GPUs; )\d+ in partition")


def waiting_kinds(lines: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """The kinds of a waiting job's lines (unplaced, reservation), or None if it starts."""
    kinds = tuple(line["kind"] for line in lines)
    return None if any(k not in ("unplaced", "reservation") for k in kinds) else kinds


def same_lines(before: list[dict[str, Any]] | None, after: list[dict[str, Any]]) -> bool:
    """Whether a job's lines are unchanged, times relative to each plan's ``now`` aside.

    A reservation's absolute start is compared exactly (``start_time``); only
    the ``now+N s`` text of the detail moves with the clock, so it alone is
    ignored, else every waiting job would be rewritten every cycle.
    """
    if before is None or len(before) != len(after):
        return False
    for old, new in zip(before, after, strict=True):
        if {**old, "detail": None} != {**new, "detail": None}:
            return False
        if _steady(old["detail"]) != _steady(new["detail"]):
            return False
    return True


def _steady(detail: str) -> str:
    """``detail`` without the figures that move every cycle while the decision stays."""
    return _FITTING.sub(r"\1# in partition", _RELATIVE.sub("now+# s", detail))


def shift_relative(detail: str, by_s: float) -> str:
    """``detail`` written ``by_s`` seconds ago, with its ``now+N s`` counted from now."""
    if by_s <= 0:
        return detail
    return _RELATIVE.sub(lambda m: f"now+{max(0, round(int(m.group(1)) - by_s))} s", detail)


def plan_lines(plan: Plan) -> dict[int, list[dict[str, Any]]]:
    """A plan's lines by job, in plan order, as the columns a decision row stores."""
    lines: dict[int, list[dict[str, Any]]] = {}
    for action in plan.actions:
        lines.setdefault(action.job_id, []).append(
            _line(action.kind, action.job_id, action, action.nodes, None)
        )
    for res in plan.reservations:
        lines.setdefault(res.job_id, []).append(
            _line("reservation", res.job_id, res, res.nodes, res.start_time)
        )
    for un in plan.unplaced:
        lines.setdefault(un.job_id, []).append(
            _line("unplaced", un.job_id, un, (), un.expected_start)
        )
    return lines


def plan_rows(session: Session, plan_id: int) -> list[Decision]:
    """The rows that make up plan ``plan_id``: each job's newest rows at or before it."""
    newest = (
        select(Decision.job_id, func.max(Decision.plan_id).label("plan_id"))
        .where(Decision.plan_id <= plan_id)
        .group_by(Decision.job_id)
        .subquery()
    )
    stmt = (
        select(Decision)
        .join(
            newest,
            (Decision.job_id == newest.c.job_id) & (Decision.plan_id == newest.c.plan_id),
        )
        .where(Decision.kind != GONE)
        .order_by(Decision.id)
    )
    return list(session.scalars(stmt))


def current_lines(session: Session, plan_id: int) -> dict[int, list[dict[str, Any]]]:
    """Plan ``plan_id``'s lines by job, read back from the store (after a restart)."""
    lines: dict[int, list[dict[str, Any]]] = {}
    for row in plan_rows(session, plan_id):
        lines.setdefault(row.job_id, []).append(
            {
                "job_id": row.job_id,
                "kind": row.kind,
                "reason": row.reason,
                "detail": row.detail,
                "nodes": row.nodes,
                "start_time": row.start_time,
            }
        )
    return lines


#: A job's lines as the columns of its decision rows.
Lines = list[dict[str, Any]]


def changed_rows(
    before: Mapping[int, Lines],
    lines: Mapping[int, Lines],
    plan_id: int,
    now: float,
    keeps: Callable[[int, Lines, Lines, float], bool],
) -> tuple[list[dict[str, Any]], dict[int, Lines], list[int]]:
    """The decision rows plan ``plan_id`` writes, each job's current lines, and who was written.

    A job whose previous lines ``keeps`` (job id, old lines, new lines, now)
    accepts gets no row and keeps its old lines; a job that left the plan
    gets one ``gone`` row.
    """
    rows: list[dict[str, Any]] = []
    stored: dict[int, Lines] = {}
    written: list[int] = []
    for job_id, job_lines in lines.items():
        old = before.get(job_id)
        if old is not None and keeps(job_id, old, job_lines, now):
            stored[job_id] = old
            continue
        rows.extend({**line, "plan_id": plan_id, "at": now} for line in job_lines)
        stored[job_id] = job_lines
        written.append(job_id)
    for job_id in before.keys() - lines.keys():
        gone = {**before[job_id][-1], "kind": GONE, "detail": "", "nodes": None}
        rows.append({**gone, "start_time": None, "plan_id": plan_id, "at": now})
    return rows, stored, written


def latest_about(session: Session, job_id: int) -> tuple[PlanRecord, list[Decision]] | None:
    """The newest plan that mentions ``job_id`` and its lines about it (see ``Store``)."""

    def rows_at(plan_id: int) -> list[Decision]:
        stmt = (
            select(Decision)
            .where(Decision.plan_id == plan_id, Decision.job_id == job_id)
            .order_by(Decision.id)
        )
        return list(session.scalars(stmt))

    def newest_row_plan(before: int | None = None) -> int | None:
        stmt = select(func.max(Decision.plan_id)).where(Decision.job_id == job_id)
        if before is not None:
            stmt = stmt.where(Decision.plan_id < before)
        return session.scalar(stmt)

    row_plan = newest_row_plan()
    if row_plan is None:
        return None
    lines = rows_at(row_plan)
    if lines[0].kind != GONE:
        newest = select(PlanRecord).order_by(PlanRecord.id.desc()).limit(1)
        record = session.scalars(newest).first()
        assert record is not None  # a row's plan is kept as long as the row
        session.expunge_all()
        for line in lines:  # detached: the shift is never written back
            line.detail = shift_relative(line.detail, record.planned_at - line.at)
        return record, lines
    last_plan = newest_row_plan(before=row_plan)
    if last_plan is None:
        return None
    last_about = (
        select(PlanRecord).where(PlanRecord.id < row_plan).order_by(PlanRecord.id.desc()).limit(1)
    )
    record = session.scalars(last_about).first() or session.get(PlanRecord, last_plan)
    assert record is not None
    return record, rows_at(last_plan)


__all__ = [
    "WAITING_REWRITE_S",
    "Lines",
    "changed_rows",
    "latest_about",
    "current_lines",
    "plan_lines",
    "plan_rows",
    "same_lines",
    "shift_relative",
    "waiting_kinds",
]
