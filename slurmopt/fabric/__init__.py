"""The cluster's network fabric as a networkx graph.

Only :mod:`slurmopt.fabric.core` (the graph, pure) is imported with the
package; the readers of topology files and of Slurm (``loaders``,
``discover``) and the generators load when first named, so the pure core
(``slurmopt.policy``) can use :class:`Fabric` without pulling in file or
Slurm I/O.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from slurmopt.fabric.core import Fabric, Span, Tiers, effective_gbps

if TYPE_CHECKING:
    from slurmopt.fabric.discover import load_fabric
    from slurmopt.fabric.generators import clos, dragonfly_plus, fat_tree, leaf_spine
    from slurmopt.fabric.loaders import (
        load_fabric_file,
        load_fabric_yaml,
        load_slurm_topology_yaml,
        load_topology_conf,
        parse_scontrol_topology,
    )

#: Names served lazily, and the module each one lives in.
_LAZY = {
    "load_fabric": "discover",
    "clos": "generators",
    "dragonfly_plus": "generators",
    "fat_tree": "generators",
    "leaf_spine": "generators",
    "load_fabric_file": "loaders",
    "load_fabric_yaml": "loaders",
    "load_slurm_topology_yaml": "loaders",
    "load_topology_conf": "loaders",
    "parse_scontrol_topology": "loaders",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'slurmopt.fabric' has no attribute {name!r}")
    return getattr(importlib.import_module(f"slurmopt.fabric.{module}"), name)


__all__ = [
    "Fabric",
    "Span",
    "Tiers",
    "clos",
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
