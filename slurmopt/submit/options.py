"""sbatch's option tables, one per Slurm release, and the choice among them: pure.

Each release's sbatch adds and drops options (24.11 added ``--segment``;
26.05 made ``--requeue`` take an optional value), and an option split with
the wrong table moves the script: ``--tres-per-task gres/gpu:1 job.sh`` read
by a table without ``--tres-per-task`` makes ``gres/gpu:1`` the script.  So
the tables are data (``slurmopt/data/sbatch_options.json``), probed from each
release's own sbatch by :mod:`slurmopt.slurm.sbatch_probe`, and the one used
is the release of the sbatch that will run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from importlib import resources


class Arity(Enum):
    """Whether an option takes a value, as ``struct option.has_arg`` says."""

    NONE = "none"
    REQUIRED = "required"
    OPTIONAL = "optional"  # only ever attached: ``--exclusive=user``, ``-kfoo``


@dataclass(frozen=True, slots=True)
class OptionTable:
    """One release's sbatch options: long names with their arity, short letters by long name."""

    release: str
    long: Mapping[str, Arity]
    short: Mapping[str, str]


@cache
def tables() -> dict[str, OptionTable]:
    """Every shipped table, by release (``"22.05"``), oldest first."""
    text = resources.files("slurmopt").joinpath("data/sbatch_options.json").read_text()
    data = json.loads(text)
    out = {}
    for release in sorted(data, key=_release_key):
        entry = data[release]
        long = {name: Arity(arity) for name, arity in entry["long"].items()}
        out[release] = OptionTable(release, long, dict(entry["short"]))
    return out


def newest_table() -> OptionTable:
    """The newest release's table: the default when no release is named."""
    known = tables()
    return known[max(known, key=_release_key)]


#: A table with no sbatch options: for ``#SOPT`` lines, which take only slurmopt's own.
NO_OPTIONS = OptionTable("none", {}, {})


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


_RELEASE = re.compile(r"(\d+)\.(\d+)")


def table_for(version: str | None, failed: str | None = None) -> tuple[OptionTable, str | None]:
    """The table for ``sbatch --version``'s answer, and a warning when it is not one we ship.

    An unknown or unreadable release gets the newest table: options only
    ever get added between releases far more often than removed.
    ``failed`` says why ``sbatch --version`` gave no answer (its last error
    line), so the warning names the cause rather than the symptom.
    """
    known = tables()
    newest = newest_table()
    match = _RELEASE.search(version or "")
    if match:
        release = f"{int(match[1])}.{int(match[2]):02d}"
        if release in known:
            return known[release], None
        said = f"no sbatch option table for Slurm {release}"
    elif failed:
        said = f"sbatch --version failed ({failed})"
    else:
        said = "sbatch --version named no Slurm release"
    return newest, (
        f"slurmopt: warning: {said}; reading the command line as sbatch {newest.release} would"
    )


_LONG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*[a-z0-9])")
_SHORT = re.compile(r"(?<![\w-])-([A-Za-z0-9]),? +--([a-z][a-z0-9-]*[a-z0-9])")


def help_options(text: str) -> tuple[set[str], dict[str, str]]:
    """The long options ``sbatch --help``/``--usage`` text names, and its ``-X, --long`` pairs."""
    return set(_LONG.findall(text)), dict(_SHORT.findall(text))
