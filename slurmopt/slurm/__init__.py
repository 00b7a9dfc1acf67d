"""Adapters between slurmopt and Slurm, all behind the :class:`SlurmClient` interface."""

from slurmopt.slurm.base import SlurmClient

__all__ = ["SlurmClient"]
