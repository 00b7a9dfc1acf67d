"""``--fabric`` for the simulator: a generated shape or a topology file."""

from __future__ import annotations

from pathlib import Path

from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric, clos, dragonfly_plus, leaf_spine, load_fabric_file

SPEC_HELP = (
    "fat-tree:NODES:NODES_PER_LEAF[:OVERSUB] (two-level leaf-spine), "
    "clos:PODS:LEAVES_PER_POD:NODES_PER_LEAF[:OVERSUB] (three tiers: leaf, pod spine, core; "
    "OVERSUB on the core uplinks), "
    "dragonfly+:GROUPS:LEAVES_PER_GROUP:NODES_PER_LEAF[:SPINES_PER_GROUP[:GLOBAL_OVERSUB]], "
    "or a topology.conf / topology.yaml / fabric YAML file"
)


def _ints(spec: str, parts: list[str], names: list[str]) -> list[int]:
    try:
        return [int(p) for p in parts[: len(names)]]
    except ValueError:
        raise UsageError(
            f"bad fabric {spec!r}: expected {':'.join(names)} as whole numbers"
        ) from None


def _float(spec: str, text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"bad fabric {spec!r}: {what} is not a number: {text!r}") from None


def parse_fabric_spec(spec: str) -> Fabric:
    """Build or load the fabric a ``--fabric`` value names; see :data:`SPEC_HELP`."""
    kind, _, rest = spec.partition(":")
    parts = rest.split(":") if rest else []
    if kind == "fat-tree":
        if len(parts) not in (2, 3):
            raise UsageError(f"bad fabric {spec!r}: use fat-tree:NODES:NODES_PER_LEAF[:OVERSUB]")
        nodes, per_leaf = _ints(spec, parts, ["NODES", "NODES_PER_LEAF"])
        oversub = _float(spec, parts[2], "OVERSUB") if len(parts) == 3 else 1.0
        return leaf_spine(nodes, per_leaf, oversubscription=oversub)
    if kind == "clos":
        if len(parts) not in (3, 4):
            raise UsageError(
                f"bad fabric {spec!r}: use clos:PODS:LEAVES_PER_POD:NODES_PER_LEAF[:OVERSUB]"
            )
        pods, per_pod, per_leaf = _ints(spec, parts, ["PODS", "LEAVES_PER_POD", "NODES_PER_LEAF"])
        oversub = _float(spec, parts[3], "OVERSUB") if len(parts) == 4 else 1.0
        return clos(pods, per_pod, per_leaf, oversubscription=oversub)
    if kind == "dragonfly+":
        if len(parts) not in (3, 4, 5):
            raise UsageError(
                f"bad fabric {spec!r}: use dragonfly+:GROUPS:LEAVES_PER_GROUP:NODES_PER_LEAF"
                "[:SPINES_PER_GROUP[:GLOBAL_OVERSUB]]"
            )
        names = ["GROUPS", "LEAVES_PER_GROUP", "NODES_PER_LEAF", "SPINES_PER_GROUP"]
        values = _ints(spec, parts, names)
        spines = values[3] if len(values) > 3 else 1
        oversub = _float(spec, parts[4], "GLOBAL_OVERSUB") if len(parts) == 5 else 1.0
        return dragonfly_plus(
            values[0], values[1], values[2], spines, global_oversubscription=oversub
        )
    path = Path(spec)
    if not path.exists():
        raise UsageError(f"bad fabric {spec!r}: no such file; use {SPEC_HELP}")
    return load_fabric_file(path)
