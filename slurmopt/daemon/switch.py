"""The kill switch: a flag in the store that stops every daemon from enforcing.

``slurmopt disable`` sets it and ``slurmopt enable`` clears it; a daemon reads
it at the start of every cycle and again just before it holds a job or writes
an enforcing heartbeat, so a disabled cluster stays hands-off even while a
daemon runs.  It lives in the store (the ``heartbeat`` table, row
``kill-switch``) because every daemon sharing the database must see it.
"""

from __future__ import annotations

import getpass
import socket
import time
from dataclasses import dataclass

from slurmopt.store import Store

#: The row of the store's ``heartbeat`` table that holds the switch.
SWITCH_NAME = "kill-switch"
DISABLED = "disabled"
ENABLED = "enabled"


@dataclass(frozen=True, slots=True)
class SwitchState:
    """Whether enforcement is disabled, by whom and since when (None: never set)."""

    disabled: bool
    by: str | None = None
    at: float | None = None


def operator() -> str:
    """``user@host`` of whoever runs the command, for the record."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def read_switch(store: Store) -> SwitchState:
    """The switch as recorded; a database that never saw it is enabled."""
    row = store.last_beat(SWITCH_NAME)
    if row is None:
        return SwitchState(False)
    return SwitchState(row.detail == DISABLED, row.holder, row.at)


def set_switch(
    store: Store, disabled: bool, by: str | None = None, now: float | None = None
) -> None:
    """Record the switch as disabled or enabled."""
    store.beat(
        SWITCH_NAME,
        by or operator(),
        time.time() if now is None else now,
        detail=DISABLED if disabled else ENABLED,
    )


__all__ = ["SWITCH_NAME", "SwitchState", "operator", "read_switch", "set_switch"]
