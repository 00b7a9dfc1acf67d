"""The cluster's network fabric as a networkx graph."""

from slurmopt.fabric.core import Fabric, Span, effective_gbps
from slurmopt.fabric.discover import load_fabric
from slurmopt.fabric.generators import dragonfly_plus, fat_tree, leaf_spine
from slurmopt.fabric.loaders import (
    load_fabric_file,
    load_fabric_yaml,
    load_slurm_topology_yaml,
    load_topology_conf,
    parse_scontrol_topology,
)

__all__ = [
    "Fabric",
    "Span",
    "dragonfly_plus",
    "effective_gbps",
    "fat_tree",
    "leaf_spine",
    "load_fabric",
    "load_fabric_file",
    "load_fabric_yaml",
    "load_slurm_topology_yaml",
    "load_topology_conf",
    "parse_scontrol_topology",
]
