"""Find the fabric the daemon should use, from the most to the least explicit source.

1. ``fabric_file`` when given (see :func:`~slurmopt.fabric.loaders.load_fabric_file`);
2. the running Slurm's ``scontrol show topology`` (works on configless sites,
   where no topology file exists on this host);
3. ``topology.yaml``, then ``topology.conf``, beside slurm.conf (the
   ``slurm_conf`` argument, else ``$SLURM_CONF``, else ``/etc/slurm/slurm.conf``);
4. a flat fabric, every node under one switch, over ``nodes`` (or the
   client's node list): placement then treats all nodes as equally close.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from slurmopt.config import slurm_conf_dir as config_slurm_conf_dir
from slurmopt.fabric.core import Fabric
from slurmopt.fabric.loaders import (
    load_fabric_file,
    load_slurm_topology_yaml,
    load_topology_conf,
    parse_scontrol_topology,
)
from slurmopt.slurm.base import SlurmClient


def slurm_conf_dir(slurm_conf: str | os.PathLike[str] | None = None) -> Path:
    """The directory Slurm reads its configuration from: ``slurm_conf``'s, else the usual one."""
    return Path(slurm_conf).parent if slurm_conf else config_slurm_conf_dir()


def load_fabric(
    client: SlurmClient | None = None,
    fabric_file: str | os.PathLike[str] | None = None,
    slurm_conf: str | os.PathLike[str] | None = None,
    nodes: Collection[str] | None = None,
) -> Fabric:
    """The fabric from the first source that has one; ``Fabric.source`` says which.

    ``nodes``, when given, are the cluster's node names: a description that
    names any other node is rejected.
    """
    if fabric_file is not None:
        return load_fabric_file(fabric_file, nodes)
    if client is not None:
        text = client.topology_text()
        if text:
            fabric = parse_scontrol_topology(
                text, nodes, source=f"scontrol show topology ({client.name})"
            )
            if fabric is not None and fabric.switches:
                return fabric
    conf_dir = slurm_conf_dir(slurm_conf)
    topology_yaml = conf_dir / "topology.yaml"
    if topology_yaml.is_file():
        return load_slurm_topology_yaml(topology_yaml, nodes)
    topology_conf = conf_dir / "topology.conf"
    if topology_conf.is_file():
        return load_topology_conf(topology_conf, nodes)
    if nodes is None and client is not None:
        nodes = list(client.snapshot().nodes)
    names = sorted(nodes or ())
    return Fabric.flat(names, source=f"flat: no topology found, {len(names)} nodes on one switch")
