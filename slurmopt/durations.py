"""Slurm's time strings: the one parser for ``--time``, ``TimeLimit``, ``MaxTime`` and sacct.

The forms ``sbatch --time`` documents: ``minutes``, ``minutes:seconds``,
``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes`` and
``days-hours:minutes:seconds``; ``UNLIMITED`` / ``INFINITE`` (and the empty
or ``NONE`` / ``Partition_Limit`` that Slurm prints for no limit of a job's
own) mean no limit.  Pure: no I/O.
"""

from __future__ import annotations

import math
import re

_FORM = re.compile(r"(?:(?P<days>\d+)-)?(?P<rest>\d+(?::\d+){0,2})")
_NO_LIMIT = frozenset({"", "UNLIMITED", "INFINITE", "NONE", "PARTITION_LIMIT"})


def slurm_duration_s(text: str) -> int | None:
    """Seconds of a Slurm time string; None for no limit; ValueError naming a bad one."""
    text = text.strip()
    if text.upper() in _NO_LIMIT:
        return None
    match = _FORM.fullmatch(text)
    if match is None:
        raise ValueError(f"bad time {text!r}")
    try:  # a number past Python's digit limit for int() is as bad as any other
        parts = [int(p) for p in match["rest"].split(":")]
        days = int(match["days"] or 0)
    except ValueError:
        raise ValueError(f"bad time {text!r}") from None
    if match["days"] is not None:  # days-hours[:minutes[:seconds]]
        h, m, s = (parts + [0, 0])[:3]
    elif len(parts) == 1:  # minutes
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:  # minutes:seconds
        h, m, s = 0, parts[0], parts[1]
    else:  # hours:minutes:seconds
        h, m, s = parts
    return days * 86400 + h * 3600 + m * 60 + s


def slurm_duration_min(text: str) -> int | None:
    """Whole minutes of a Slurm time string, a part minute counted whole (as Slurm rounds)."""
    seconds = slurm_duration_s(text)
    return None if seconds is None else math.ceil(seconds / 60)


__all__ = ["slurm_duration_min", "slurm_duration_s"]
