"""Placeholder for the `slurmopt topology` command group."""

import click


@click.command()
def topology() -> None:
    """Not yet implemented."""
    raise click.ClickException("not yet implemented")
