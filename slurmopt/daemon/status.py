"""What the daemon says about itself after each cycle, for ``slurmopt status`` and metrics.

The daemon records one :class:`DaemonStatus` as JSON in the store's
``heartbeat`` table (row ``daemon``) at the end of every cycle, so any host
that reads the store can tell which mode the acting daemon is really in,
and why it is not enforcing when it was asked to.  ``degraded`` is the mode
of a daemon started with ``--enforce`` whose enforcement cannot be proven
(the plugin is not loaded, the heartbeat cannot be written, jobs were not
held): Slurm then schedules as if slurmopt were absent, and the status says so.

Older daemons wrote plain text (``"enforcing: 3 starts planned, ..."``);
:func:`decode` reads that too, as a status with only the mode and summary.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: The modes a status can name (``slurmopt.daemon.loop.Mode`` values plus ``degraded``).
MODES = (
    "starting",
    "advisory",
    "standby",
    "disabled",
    "enforcing",
    "degraded",
    "unavailable",
    "stopped",
)


@dataclass(frozen=True)
class DaemonStatus:
    """One cycle's account of the daemon.

    ``reasons`` says why a daemon asked to enforce is not enforcing (one
    line each, naming the fix where one is known); ``heartbeat_seq`` is the
    sequence number of the last heartbeat it wrote, and
    ``plugin_seq_seen`` the newest sequence the job-submit plugin stamped
    into a job it held (None: no job held since the daemon started).
    """

    mode: str
    holder: str = ""
    enforce_requested: bool = False
    reasons: tuple[str, ...] = ()
    cycle_at: float | None = None
    cycle_s: float | None = None
    heartbeat_path: str = ""
    heartbeat_seq: int | None = None
    plugin_seq_seen: int | None = None
    fencing_token: int | None = None
    summary: str = ""
    version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``reasons`` as a list)."""
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        return out


def encode(status: DaemonStatus) -> str:
    """The status as the JSON text the store keeps."""
    return json.dumps(status.to_dict(), sort_keys=True, allow_nan=False)


def decode(text: str, holder: str = "", at: float | None = None) -> DaemonStatus:
    """Read a stored status; plain text from an older daemon gives mode and summary only."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("mode"), str):
        known = set(DaemonStatus.__dataclass_fields__)
        kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        kwargs["reasons"] = tuple(str(r) for r in kwargs.get("reasons") or ())
        extra = kwargs.pop("extra", None)
        extra = dict(extra) if isinstance(extra, dict) else {}
        extra.update({k: v for k, v in data.items() if k not in known})
        try:
            return DaemonStatus(**kwargs, extra=extra)
        except TypeError:
            pass
    mode, _, summary = text.partition(":")
    mode = mode.strip()
    return DaemonStatus(
        mode=mode if mode in MODES else "unknown",
        holder=holder,
        cycle_at=at,
        summary=summary.strip() if mode in MODES else text,
    )


__all__ = ["MODES", "DaemonStatus", "decode", "encode"]
