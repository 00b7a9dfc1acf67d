"""Read an sbatch's option table off the binary itself, through getopt's own answers.

``sbatch --help`` leaves options out (``--test-only``, ``--hint``, ...) and
marks arity loosely (``--wrap[=command string]`` takes a required value),
so the table slurmopt ships is probed: glibc's getopt_long lists every long
option an ambiguous prefix could mean, says "requires an argument" for a
required value and "doesn't allow an argument" for none, and "invalid
option" for a short letter sbatch lacks.  The probe runs sbatch with stdin
empty and never with a script, so it submits nothing.

``python -m slurmopt.slurm.sbatch_probe [SBATCH...]`` prints the table as
JSON (how ``slurmopt/data/sbatch_options.json`` was made).
"""

from __future__ import annotations

import json
import re
import string
import subprocess
import sys
from collections.abc import Sequence

from slurmopt.slurm.cli import version_tuple
from slurmopt.submit.options import Arity, OptionTable, help_options

_AMBIGUOUS = re.compile(r"possibilities:((?: '--[^']+')+)")
_BOGUS = "--slurmopt-no-such-option"


def _stderr(sbatch: Sequence[str], *args: str) -> str:
    proc = subprocess.run(
        [*sbatch, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.stdout + proc.stderr


def _long_names(sbatch: Sequence[str], candidates: set[str]) -> set[str]:
    """Every long option, from what getopt says about each one-letter prefix.

    An ambiguous prefix lists every option it could mean; a unique one is
    named in getopt's complaint about its value (missing or unwanted).
    """
    names = set(candidates)
    for letter in string.ascii_lowercase:
        said = _stderr(sbatch, f"--{letter}={letter}", _BOGUS)
        match = _AMBIGUOUS.search(said)
        if match:
            names.update(re.findall(r"'--([^']+)'", match[1]))
            continue
        if f"unrecognized option '--{letter}=" in said:
            continue
        said += _stderr(sbatch, f"--{letter}")
        named = set(re.findall(r"option '--([a-z0-9-]+)'", said)) - {_BOGUS[2:]}
        if not named and not any(n.startswith(letter) for n in names):
            raise RuntimeError(f"cannot name the one option that --{letter} abbreviates")
        names.update(named)
    return names


def _long_arity(sbatch: Sequence[str], name: str) -> Arity | None:
    """Whether ``--name`` takes a value, or None when this sbatch lacks the option."""
    alone = _stderr(sbatch, f"--{name}")
    if f"unrecognized option '--{name}'" in alone:
        return None
    if f"option '--{name}' requires an argument" in alone:
        return Arity.REQUIRED
    if f"option '--{name}' doesn't allow an argument" in _stderr(sbatch, f"--{name}=x", _BOGUS):
        return Arity.NONE
    return Arity.OPTIONAL


def _short_exists(sbatch: Sequence[str], letter: str) -> tuple[bool, bool]:
    """Whether sbatch has ``-letter``, and whether getopt says it requires a value."""
    alone = _stderr(sbatch, f"-{letter}")
    return (
        f"invalid option -- '{letter}'" not in alone,
        f"option requires an argument -- '{letter}'" in alone,
    )


def probe(sbatch: Sequence[str]) -> OptionTable:
    """The option table of the sbatch run as ``sbatch`` (a command line: a wrapper is fine)."""
    release = _stderr(sbatch, "--version").strip()
    listed, shorts = help_options(_stderr(sbatch, "--help") + _stderr(sbatch, "--usage"))
    long: dict[str, Arity] = {}
    for name in sorted(_long_names(sbatch, listed)):
        arity = _long_arity(sbatch, name)
        if arity is not None:
            long[name] = arity
    short: dict[str, str] = {}
    for letter in string.ascii_letters + string.digits:
        exists, required = _short_exists(sbatch, letter)
        if not exists:
            continue
        meant = shorts.get(letter)
        if meant is None or (long.get(meant) is Arity.REQUIRED) != required:
            raise RuntimeError(f"-{letter} matches no long option in --help")
        short[letter] = meant
    major, minor = version_tuple(release)
    return OptionTable(f"{major}.{minor:02d}", long, short)


def main(argv: Sequence[str]) -> None:
    """Print the probed table of each sbatch named (default: ``sbatch``) as JSON."""
    commands = list(argv) or ["sbatch"]
    tables = [probe([c]) for c in commands]
    out = {
        t.release: {"long": {n: a.value for n, a in t.long.items()}, "short": dict(t.short)}
        for t in tables
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
