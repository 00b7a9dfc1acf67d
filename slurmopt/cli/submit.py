"""``slurmopt submit``: sbatch with the job tagged for slurmopt.

Everything sbatch-facing is verbatim: the words go to the real ``sbatch``
in the order given (minus slurmopt's own options), and sbatch's stdout,
stderr and exit status are the command's own, because a script that calls
``sbatch`` must keep working when ``sbatch`` becomes ``slurmopt submit``.
The argument list is built by the pure :mod:`slurmopt.submit`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from slurmopt.errors import SlurmUnavailable
from slurmopt.signals import DEFAULT_SIGNAL
from slurmopt.submit import (
    NO_PLUGIN_WARNING,
    OptionTable,
    build_submission,
    has_submit_plugin,
    parse_command_line,
    reads_stdin,
    table_for,
    template_of,
    wants_help,
)

#: The sbatch to run; tests and sites with a wrapped sbatch point this elsewhere.
SBATCH_ENV = "SLURMOPT_SBATCH"

HELP = """Submit a batch job: sbatch, with the job tagged for slurmopt.

\b
Takes exactly sbatch's arguments (options, then the script and its
arguments, or --wrap, or the script on stdin) and runs the real sbatch
with them, passing its output and exit status through unchanged.
#SBATCH lines in the script are read as sbatch reads them.

\b
slurmopt's own options (spelled in full; also on #SOPT lines):
  --template NAME   render the job from template NAME
  --preemptible     the job may be preempted (checkpointed and requeued)
  --elastic MIN:MAX the job can run on MIN to MAX nodes (1 <= MIN <= MAX)

\b
The job comment becomes
  slurmopt:managed[,preemptible][,elastic=MIN:MAX] | <your comment>
See docs/submit.md.  sbatch's own help: sbatch --help.
"""


class _VerbatimCommand(click.Command):
    """Hands every word to the callback untouched: this grammar is sbatch's, not click's."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.params["args"] = tuple(args)
        return []


@click.command(
    "submit",
    cls=_VerbatimCommand,
    help=HELP,
    short_help="Submit a batch job (sbatch, tagged for slurmopt).",
    options_metavar="[OPTIONS]",
    context_settings={"help_option_names": []},
)
@click.pass_context
def submit(ctx: click.Context, args: Sequence[str]) -> None:
    table = sbatch_option_table()
    parsed = parse_command_line(args, table)
    if wants_help(parsed):
        click.echo(ctx.get_help())
        return
    stdin_data: bytes | None = None
    script_text: str | None = None
    script_name = parsed.script or "-"
    if template_of(parsed) is not None:
        pass  # the script is the program the template runs, not a batch script
    elif reads_stdin(parsed):
        stdin_data = sys.stdin.buffer.read()
        script_text = stdin_data.decode("utf-8", "surrogateescape")
    elif parsed.script is not None:
        script_text = _read_script(parsed.script)
    signal = DEFAULT_SIGNAL
    if template_of(parsed) is not None:
        from slurmopt.config import load_config

        signal = load_config().preempt_signal  # the template traps what the daemon sends
    submission = build_submission(args, script_text, script_name, signal, table)
    if not submission.info_only and _plugin_missing():
        click.echo(NO_PLUGIN_WARNING, err=True)
    if submission.script_text is not None:
        stdin_data = submission.script_text.encode()
    run_sbatch(submission.args, stdin_data)


def _read_script(path: str) -> str | None:
    """The script's text, or None when sbatch will fail to read it and say so itself."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "surrogateescape")
    except OSError:
        return None


def _plugin_missing() -> bool:
    """True when ``scontrol show config`` answers and lists no Lua job-submit plugin.

    When scontrol cannot answer, nothing is claimed: sbatch will meet the
    same controller and report the problem in its own words.
    """
    try:
        proc = subprocess.run(
            ["scontrol", "show", "config"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and not has_submit_plugin(proc.stdout)


def sbatch_option_table() -> OptionTable:
    """The option table of the sbatch that will run, by ``sbatch --version``.

    An answer naming no release we ship a table for gets the newest table
    and one warning line on stderr.
    """
    binary = os.environ.get(SBATCH_ENV, "sbatch")
    try:
        proc = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=15, check=False
        )
        answer, failed = proc.stdout, None
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            answer, failed = "", lines[-1] if lines else f"exit {proc.returncode}"
    except OSError as exc:
        raise _cannot_run(binary, exc) from None
    except subprocess.TimeoutExpired:
        answer, failed = "", "no answer in 15 s"
    table, warning = table_for(answer, failed)
    if warning is not None:
        click.echo(warning, err=True)
    return table


def _cannot_run(binary: str, exc: OSError) -> SlurmUnavailable:
    if isinstance(exc, FileNotFoundError):
        return SlurmUnavailable(f"{binary} not found; is Slurm installed?")
    return SlurmUnavailable(f"cannot run {binary}: {exc.strerror}")


def run_sbatch(args: Sequence[str], stdin_data: bytes | None) -> NoReturn:
    """Become sbatch (exec), or run it with the script on stdin; its exit status is ours."""
    binary = os.environ.get(SBATCH_ENV, "sbatch")
    argv = [binary, *args]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if stdin_data is None:
            os.execvp(binary, argv)
        proc = subprocess.run(argv, input=stdin_data, check=False)
    except OSError as exc:
        raise _cannot_run(binary, exc) from None
    code = proc.returncode
    sys.exit(code if code >= 0 else 128 - code)
