"""Build a :class:`Fabric` from Slurm's topology files, its ``scontrol`` output, or slurmopt's YAML.

Every loader checks the whole description before it returns, and reports
the first problem as a :class:`~slurmopt.errors.FabricError` naming the file
and line, so a bad file never yields a half-built fabric.

The readers live by format: the switch tree they all build in
:mod:`slurmopt.fabric.tree`, topology.conf and ``scontrol show topology`` in
:mod:`slurmopt.fabric.topology_conf`, Slurm's topology.yaml and slurmopt's
fabric YAML in :mod:`slurmopt.fabric.yaml_formats`.  This module tells a
file's format apart (:func:`load_fabric_file`) and re-exports their public
names.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

import yaml

from slurmopt.errors import FabricError
from slurmopt.fabric.core import Fabric
from slurmopt.fabric.topology_conf import (
    load_topology_conf,
    parse_scontrol_topology,
    parse_topology_conf,
)
from slurmopt.fabric.tree import BLOCK_ROOT, DEFAULT_BANDWIDTH_GBPS, read
from slurmopt.fabric.yaml_formats import (
    MAX_YAML_VALUES,
    Yaml,
    fabric_yaml,
    load_fabric_yaml,
    load_slurm_topology_yaml,
    parse_fabric_yaml,
    parse_slurm_topology_yaml,
    slurm_yaml_fabric,
)


def load_fabric_file(
    path: str | os.PathLike[str], known_nodes: Collection[str] | None = None
) -> Fabric:
    """Any supported file, told apart by extension and content.

    ``.conf`` is Slurm's topology.conf; ``.yaml``/``.yml`` is Slurm's
    topology.yaml when the document is a list of topologies, else
    slurmopt's own format.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".conf":
        return load_topology_conf(path, known_nodes)
    if suffix not in (".yaml", ".yml"):
        raise FabricError("unknown fabric file type: use .conf, .yaml or .yml", str(path))
    text = read(path)
    doc = Yaml(str(path))
    root = doc.root(text)
    if isinstance(root, yaml.SequenceNode):
        return slurm_yaml_fabric(doc, root, known_nodes, source=f"topology.yaml {path}")
    return fabric_yaml(doc, root, known_nodes, source=f"fabric file {path}")


__all__ = [
    "BLOCK_ROOT",
    "DEFAULT_BANDWIDTH_GBPS",
    "MAX_YAML_VALUES",
    "load_fabric_file",
    "load_fabric_yaml",
    "load_slurm_topology_yaml",
    "load_topology_conf",
    "parse_fabric_yaml",
    "parse_scontrol_topology",
    "parse_slurm_topology_yaml",
    "parse_topology_conf",
]
