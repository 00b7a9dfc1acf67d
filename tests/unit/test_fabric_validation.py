"""Fabric validation: what Slurm refuses is an error, what it carries on past is a warning.

Each case follows Slurm 22.05's topology/tree plugin (``_validate_switches``
and ``_find_child_switches`` in ``src/plugins/topology/tree/topology_tree.c``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from slurmopt.cli import cli
from slurmopt.errors import FabricError, UsageError
from slurmopt.fabric import Fabric
from slurmopt.fabric.loaders import (
    load_topology_conf,
    parse_fabric_yaml,
    parse_scontrol_topology,
    parse_slurm_topology_yaml,
    parse_topology_conf,
)
from slurmopt.hostlist import expand

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fabric"
LEAVES = "SwitchName=leaf1 Nodes=gpu[001-004]\nSwitchName=leaf2 Nodes=gpu[005-008]\n"


def test_repeated_leaf_keeps_the_last_parent_with_one_warning_each() -> None:
    fabric = load_topology_conf(FIXTURES / "repeated-leaves.conf")
    assert fabric.warnings == (
        "switch leaf1 is listed under 2 parents (pod1, pod2): keeping the last, pod2, "
        "as Slurm does",
        "switch leaf2 is listed under 2 parents (pod1, pod2): keeping the last, pod2, "
        "as Slurm does",
        "switch leaf3 is listed under 3 parents (pod1, pod2, pod3): keeping the last, pod3, "
        "as Slurm does",
        "switch leaf4 is listed under 3 parents (pod1, pod2, pod3): keeping the last, pod3, "
        "as Slurm does",
    )
    assert {leaf: fabric.uplinks(leaf) for leaf in fabric.leaves()} == {
        "leaf1": ["pod2"],
        "leaf2": ["pod2"],
        "leaf3": ["pod3"],
        "leaf4": ["pod3"],
    }
    # One tree: same pod 4 hops, across pods 6 (the leaves no longer join the pods).
    assert fabric.hops("gpu001", "gpu003") == 4
    assert fabric.hops("gpu001", "gpu005") == 6
    assert fabric.hops("gpu005", "gpu007") == 4
    # pod1 lost every child; it keeps the level Slurm computes from what it lists.
    assert fabric.levels() == {
        0: ["leaf1", "leaf2", "leaf3", "leaf4"],
        1: ["pod1", "pod2", "pod3"],
        2: ["core"],
    }
    assert fabric.nodes_beneath("pod1") == ()
    assert fabric.nodes_beneath("pod3") == tuple(expand("gpu[005-008]"))


def test_a_child_listed_twice_by_one_parent_is_not_a_warning() -> None:
    fabric = parse_topology_conf(LEAVES + "SwitchName=spine Switches=leaf1,leaf[1-2]\n")
    assert fabric.warnings == ()
    assert fabric.hops("gpu001", "gpu008") == 4


def test_scontrol_output_follows_the_same_rule() -> None:
    text = (
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[001-004]\n"
        "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=gpu[005-008]\n"
        "SwitchName=s1 Level=1 LinkSpeed=1 Nodes=gpu[001-008] Switches=leaf[1-2]\n"
        "SwitchName=s2 Level=1 LinkSpeed=1 Nodes=gpu[005-008] Switches=leaf2\n"
    )
    fabric = parse_scontrol_topology(text)
    assert fabric is not None
    assert fabric.warnings == (
        "switch leaf2 is listed under 2 parents (s1, s2): keeping the last, s2, as Slurm does",
        "no switch reaches all nodes: 2 separate trees, under s1, s2; no job can span them",
    )
    assert fabric.uplinks("leaf2") == ["s2"]
    with pytest.raises(FabricError, match="no path between gpu001 and gpu005"):
        fabric.hops("gpu001", "gpu005")


def test_slurm_topology_yaml_follows_the_same_rule() -> None:
    text = (
        "- topology: t\n  tree:\n    switches:\n"
        "      - {switch: leaf1, nodes: 'gpu[001-004]'}\n"
        "      - {switch: leaf2, nodes: 'gpu[005-008]'}\n"
        "      - {switch: a, children: 'leaf[1-2]'}\n"
        "      - {switch: b, children: 'leaf2'}\n"
        "      - {switch: top, children: 'a,b'}\n"
    )
    fabric = parse_slurm_topology_yaml(text)
    assert fabric.warnings == (
        "switch leaf2 is listed under 2 parents (a, b): keeping the last, b, as Slurm does",
    )
    assert fabric.hops("gpu001", "gpu005") == 6


def test_slurmopt_yaml_keeps_every_parent_silently() -> None:
    fabric = parse_fabric_yaml(
        "switches:\n  - switch: spine[1-2]\n"
        "  - switch: leaf[1-2]\n    parents: spine[1-2]\n    nodes: gpu[001-008]\n"
    )
    assert fabric.warnings == ()
    assert fabric.uplinks("leaf1") == ["spine1", "spine2"]


def test_a_tree_that_does_not_connect_is_a_warning() -> None:
    # Slurm logs "no switch can reach all nodes through its descendants" and carries on.
    fabric = parse_topology_conf(LEAVES + "SwitchName=spine Switches=leaf1\n", "t.conf")
    assert fabric.warnings == (
        "no switch reaches all nodes: 2 separate trees, under leaf2, spine; no job can span them",
    )
    assert fabric.hops("gpu001", "gpu004") == 2
    with pytest.raises(FabricError, match="no path"):
        fabric.hops("gpu001", "gpu005")


def test_cluster_nodes_missing_from_the_fabric_are_a_warning() -> None:
    # Slurm: "WARNING: switches lack access to 2 nodes: gpu[009-010]".
    fabric = parse_topology_conf(
        LEAVES + "SwitchName=spine Switches=leaf[1-2]\n", known_nodes=expand("gpu[001-010]")
    )
    assert fabric.warnings == (
        "2 cluster node(s) under no switch: gpu[009-010] (Slurm: switches lack access to them)",
    )
    assert fabric.leaf_of("gpu009") is None


def test_a_clean_tree_has_no_warnings() -> None:
    fabric = load_topology_conf(
        FIXTURES / "sandbox-topology.conf", known_nodes=expand("gpu[001-032]")
    )
    assert fabric.warnings == ()


@pytest.mark.parametrize(
    ("text", "line", "cause"),
    [
        # Slurm: fatal "Switch configuration is not a tree".
        (
            LEAVES + "SwitchName=a Switches=leaf1,b\nSwitchName=b Switches=a,leaf2\n",
            3,
            "loop in switch hierarchy: a -> b -> a",
        ),
        # Slurm: fatal "Switch configuration spine has invalid child (leaf3)".
        (
            LEAVES + "SwitchName=spine Switches=leaf[1-3]\n",
            3,
            "unknown switch leaf3 referenced as a child of spine",
        ),
        # Slurm: fatal "Switch (leaf1) has already been defined".
        (LEAVES + "SwitchName=leaf1 Nodes=gpu009\n", 3, "switch leaf1 declared twice"),
    ],
)
def test_what_slurm_refuses_is_an_error(text: str, line: int, cause: str) -> None:
    with pytest.raises(FabricError) as info:
        parse_topology_conf(text, "t.conf")
    assert info.value.line == line
    assert cause in info.value.cause


OVERLAP = (
    "1 node(s) listed in 2 blocks (b1, b2): gpu004; keeping them in the first, b1, which "
    "Slurm names as their address (Slurm may also place them with the other blocks' nodes)"
)


@pytest.mark.parametrize(
    "parse",
    [
        lambda: parse_topology_conf(
            "BlockName=b1 Nodes=gpu[001-004]\nBlockName=b2 Nodes=gpu[004-008]\n", "t.conf"
        ),
        lambda: parse_scontrol_topology(
            "BlockName=b1 BlockIndex=0 Nodes=gpu[001-004] BlockSize=4\n"
            "BlockName=b2 BlockIndex=1 Nodes=gpu[004-008] BlockSize=4\n"
        ),
        lambda: parse_slurm_topology_yaml(
            "- topology: t\n  block:\n    blocks:\n      - block: b1\n"
            "        nodes: gpu[001-004]\n      - block: b2\n        nodes: gpu[004-008]\n",
            "t.yaml",
        ),
    ],
    ids=["topology.conf", "scontrol", "topology.yaml"],
)
def test_a_node_in_two_blocks_stays_in_the_first_with_a_warning(
    parse: Callable[[], Fabric | None],
) -> None:
    # Slurm 24.11/25.05 topology/block: no check at all; the node's address names the first.
    fabric = parse()
    assert fabric is not None
    assert fabric.warnings == (OVERLAP,)
    assert fabric.leaf_of("gpu004") == "b1"
    assert fabric.nodes_under("b2") == tuple(expand("gpu[005-008]"))
    assert fabric.domain_of("gpu004") == "b1"


def test_check_lists_a_node_in_two_blocks(tmp_path: Path) -> None:
    path = tmp_path / "topology.conf"
    path.write_text("BlockName=b1 Nodes=gpu[001-004]\nBlockName=b2 Nodes=gpu[004-008]\n")
    args = ["topology", "check", "--fabric", str(path), "--nodes", "gpu[001-008]"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert f"warning: {OVERLAP}" in result.output.splitlines()


def check(fixture: str, nodes: str, *more: str) -> Result:
    """``slurmopt topology check`` on a fixture, with the cluster's nodes given."""
    args = ["topology", "check", "--fabric", str(FIXTURES / fixture), "--nodes", nodes, *more]
    return CliRunner().invoke(cli, args)


def test_check_lists_warnings_and_exits_1() -> None:
    result = check("repeated-leaves.conf", "gpu[001-009]")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[1] == "nodes: 9 in the cluster, 8 in the fabric"
    assert lines[2].startswith("warning: switch leaf1 is listed under 2 parents")
    assert lines[-2] == (
        "warning: 1 cluster node(s) under no switch: gpu009 (Slurm: switches lack access to them)"
    )
    assert lines[-1] == "5 warning(s)"


def test_check_json_of_a_clean_fabric_exits_0() -> None:
    result = check("sandbox-topology.conf", "gpu[001-032]", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "schema_version": 1,
        "source": f"topology.conf {FIXTURES / 'sandbox-topology.conf'}",
        "cluster_nodes": 32,
        "fabric_nodes": 32,
        "warnings": [],
    }


def test_check_bad_nodes_is_a_usage_error() -> None:
    result = check("sandbox-topology.conf", "gpu[001-")
    assert isinstance(result.exception, UsageError)
    assert result.exception.exit_code == 2


def test_show_prints_warnings_and_keeps_them_in_json() -> None:
    result = CliRunner().invoke(
        cli, ["topology", "show", "--fabric", str(FIXTURES / "repeated-leaves.conf"), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "slurmopt: warning: switch leaf3 is listed under 3 parents" in result.stderr
    data = json.loads(result.stdout)
    assert len(data["warnings"]) == 4
    assert data["schema_version"] == 1


def test_daemon_logs_fabric_warnings_at_startup(caplog: pytest.LogCaptureFixture) -> None:
    from slurmopt.daemon import loop

    fabric = load_topology_conf(FIXTURES / "repeated-leaves.conf")
    caplog.set_level(logging.WARNING, logger=loop.log.name)
    loop.log_fabric(fabric)
    assert [r.getMessage() for r in caplog.records][0] == (
        "fabric: switch leaf1 is listed under 2 parents (pod1, pod2): keeping the last, pod2, "
        "as Slurm does"
    )
