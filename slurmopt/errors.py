"""Typed errors, each with the process exit code the CLI maps it to.

Every error renders as one line that names the problem; the CLI prints
``slurmopt: <message>`` and exits with ``exit_code``.  Codes follow the
spirit of sysexits(3) so scripts can tell bad input from an unreachable
controller.
"""

from __future__ import annotations


def one_line(message: str) -> str:
    """``message`` with line breaks and other unprintable characters escaped (``\\n``).

    Messages quote file names, hostlists and values from the input, which
    can hold any character; escaped, the error stays one line on a terminal
    and in a log.
    """
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message
    )


class SlurmoptError(Exception):
    """Base class: a failure slurmopt reports as one line and a non-zero exit."""

    exit_code = 1


class UsageError(SlurmoptError):
    """A bad option or argument to a slurmopt command."""

    exit_code = 2


class ConfigError(SlurmoptError):
    """A bad slurmopt configuration file or value."""

    exit_code = 78  # EX_CONFIG


class FabricError(SlurmoptError):
    """A topology or fabric description that cannot be loaded.

    Carries the file and line so the message points at the culprit.
    """

    exit_code = 65  # EX_DATAERR

    def __init__(self, cause: str, path: str | None = None, line: int | None = None) -> None:
        self.cause = cause
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{cause}")


class SlurmError(SlurmoptError):
    """Base for failures talking to Slurm."""

    exit_code = 69  # EX_UNAVAILABLE


class SlurmUnavailable(SlurmError):
    """slurmctld (or slurmrestd) cannot be reached, or a Slurm command is missing."""


class SlurmResponseError(SlurmError):
    """Slurm answered, but with something that cannot be parsed into a complete snapshot."""

    exit_code = 76  # EX_PROTOCOL


class SlurmCommandError(SlurmError):
    """A Slurm command that changes state failed; its own stderr is kept verbatim."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        first = stderr.strip().splitlines()[0] if stderr.strip() else f"exit {returncode}"
        super().__init__(f"{argv[0]} failed: {first}")
