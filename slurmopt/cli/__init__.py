"""The ``slurmopt`` command line.

One module per command group; this module only wires them together and
maps every :class:`~slurmopt.errors.SlurmoptError` to a one-line message and
its exit code (bad options exit 2, as click does).
"""

from __future__ import annotations

import sys

import click

from slurmopt import __version__
from slurmopt.errors import SlurmoptError, one_line


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmopt")
@click.option(
    "--backend",
    type=click.Choice(["cli", "rest", "pyslurm"]),
    default="cli",
    show_default=True,
    envvar="SLURMOPT_BACKEND",
    help="How to read Slurm: command-line JSON, slurmrestd, or pyslurm.",
)
@click.pass_context
def cli(ctx: click.Context, backend: str) -> None:
    """Topology- and fragmentation-aware scheduling for Slurm GPU clusters."""
    ctx.ensure_object(dict)
    ctx.obj["backend"] = backend


def _register() -> None:
    from slurmopt.cli.config import config_group
    from slurmopt.cli.daemon import daemon, disable, enable
    from slurmopt.cli.explain import explain
    from slurmopt.cli.fragmentation import fragmentation
    from slurmopt.cli.health import node_agent
    from slurmopt.cli.plan import plan_cmd
    from slurmopt.cli.plugin import plugin
    from slurmopt.cli.preemptions import preemptions
    from slurmopt.cli.simulate import simulate_cmd
    from slurmopt.cli.status import status
    from slurmopt.cli.submit import submit
    from slurmopt.cli.topology import topology
    from slurmopt.cli.verify import verify

    cli.add_command(explain)
    cli.add_command(fragmentation)
    cli.add_command(topology)
    cli.add_command(submit)
    cli.add_command(node_agent)
    cli.add_command(daemon)
    cli.add_command(disable)
    cli.add_command(enable)
    cli.add_command(simulate_cmd, name="simulate")
    cli.add_command(plugin)
    cli.add_command(preemptions)
    cli.add_command(verify)
    cli.add_command(config_group)
    cli.add_command(status)
    cli.add_command(plan_cmd)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI, turning slurmopt errors into one line and an exit code."""
    try:
        cli.main(args=argv, prog_name="slurmopt", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("slurmopt: aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"slurmopt: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except SlurmoptError as exc:
        click.echo(f"slurmopt: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(141)
    sys.exit(0)
