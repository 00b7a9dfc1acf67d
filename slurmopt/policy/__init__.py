"""Policies: pure functions from a cluster snapshot and a fabric to decisions.

Nothing in this package talks to Slurm or reads files, so every policy can
be replayed on a stored snapshot and tested with hand-built ones.
"""
