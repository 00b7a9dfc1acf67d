"""The cluster's network fabric as a networkx graph."""

from slurmopt.fabric.core import Fabric

__all__ = ["Fabric"]
