"""Placeholder for the `slurmopt fragmentation` command group."""

import click


@click.command()
def fragmentation() -> None:
    """Not yet implemented."""
    raise click.ClickException("not yet implemented")
