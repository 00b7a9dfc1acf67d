"""Loaders: Slurm's topology.conf / topology.yaml / scontrol output and slurmopt's fabric YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmopt.errors import FabricError
from slurmopt.fabric import (
    load_fabric_file,
    load_fabric_yaml,
    load_slurm_topology_yaml,
    load_topology_conf,
    parse_scontrol_topology,
)
from slurmopt.fabric.loaders import BLOCK_ROOT, DEFAULT_BANDWIDTH_GBPS
from slurmopt.hostlist import expand

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fabric"


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_real_scontrol_show_topology(version: str) -> None:
    text = (FIXTURES / f"scontrol_show_topology_{version}.txt").read_text()
    fabric = parse_scontrol_topology(text)
    assert fabric is not None
    assert fabric.leaves() == ["leaf1", "leaf2"]
    # The spine lists gpu[001-008] too; only the lowest level makes the leaf.
    assert fabric.nodes_under("leaf1") == tuple(expand("gpu[001-004]"))
    assert fabric.nodes_under("leaf2") == tuple(expand("gpu[005-008]"))
    assert fabric.levels() == {0: ["leaf1", "leaf2"], 1: ["spine"]}
    assert fabric.off_leaf_nodes() == []
    assert fabric.hops("gpu001", "gpu004") == 2
    assert fabric.hops("gpu001", "gpu008") == 4
    assert fabric.source == "scontrol show topology"


def test_scontrol_without_topology_is_none() -> None:
    assert parse_scontrol_topology("") is None
    assert parse_scontrol_topology("No topology information available\n") is None


def test_scontrol_ignores_unknown_keys_and_reads_blocks() -> None:
    fabric = parse_scontrol_topology(
        "BlockName=b1 BlockIndex=0 Nodes=gpu[001-004] BlockSize=4\n"
        "BlockName=b2 BlockIndex=1 Nodes=gpu[005-008] BlockSize=4\n"
    )
    assert fabric is not None
    assert fabric.leaves() == ["b1", "b2"]
    assert fabric.uplinks("b1") == [BLOCK_ROOT]


def test_sandbox_like_topology_conf() -> None:
    fabric = load_topology_conf(FIXTURES / "sandbox-topology.conf")
    assert fabric.leaves() == ["leaf1", "leaf2", "leaf3", "leaf4"]
    for i, leaf in enumerate(fabric.leaves()):
        assert fabric.nodes_under(leaf) == tuple(f"gpu{n:03d}" for n in range(8 * i + 1, 8 * i + 9))
    # the continued statement kept its nodes
    assert fabric.leaf_of("gpu032") == "leaf4"
    assert fabric.levels()[1] == ["spine"]
    assert fabric.graph.nodes["spine"]["link_speed"] == 100
    assert fabric.uplinks("leaf3") == ["spine"]
    assert fabric.link_gbps("leaf1", "spine") == DEFAULT_BANDWIDTH_GBPS
    assert fabric.hops("gpu001", "gpu032") == 4


def test_node_wired_to_upper_switch() -> None:
    fabric = load_topology_conf(FIXTURES / "service-node.conf")
    assert fabric.leaf_of("login1") is None
    assert "login1" not in {n for leaf in fabric.leaves() for n in fabric.nodes_under(leaf)}
    assert fabric.off_leaf_nodes() == ["login1"]
    assert fabric.attachment_of("login1") == "spine"
    assert fabric.hops("login1", "gpu001") == 3
    span = fabric.span(["login1", "gpu001"])
    assert span.leaves == ("leaf1", "spine") and span.max_hops == 3


def test_topology_conf_keys_are_case_insensitive() -> None:
    from slurmopt.fabric.loaders import parse_topology_conf

    fabric = parse_topology_conf("switchname=leaf1 nodes=gpu[1-2]\nSWITCHNAME=top SWITCHES=leaf1\n")
    assert fabric.nodes_under("leaf1") == ("gpu1", "gpu2")


def test_slurm_topology_yaml_uses_cluster_default() -> None:
    fabric = load_slurm_topology_yaml(FIXTURES / "slurm-topology.yaml")
    assert fabric.name == "fabric"
    assert fabric.leaves() == ["leaf1", "leaf2"]
    assert fabric.uplinks("leaf1") == ["spine"]


def test_slurm_topology_yaml_block_topology() -> None:
    fabric = load_slurm_topology_yaml(FIXTURES / "slurm-topology-block.yaml")
    assert fabric.leaves() == ["b1", "b2"]
    assert fabric.graph.graph["block_sizes"] == (4, 16)
    assert fabric.hops("gpu001", "gpu005") == 4


def test_slurm_topology_yaml_flat_uses_known_nodes(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text("- topology: all\n  flat: true\n")
    fabric = load_slurm_topology_yaml(path, known_nodes=["n1", "n2", "n3"])
    assert fabric.leaves() == ["switch0"]
    assert fabric.nodes_under("switch0") == ("n1", "n2", "n3")


def test_fabric_yaml_fat_tree() -> None:
    fabric = load_fabric_yaml(FIXTURES / "fat-tree.yaml")
    assert fabric.name == "pod-fat-tree"
    assert {level: len(s) for level, s in fabric.levels().items()} == {0: 4, 1: 4, 2: 2}
    assert fabric.nodes_under("leaf2") == tuple(expand("gpu[009-016]"))
    assert fabric.uplinks("leaf1") == ["agg-a1", "agg-a2"]
    assert fabric.hops("gpu001", "gpu002") == 2
    assert fabric.hops("gpu001", "gpu009") == 4
    assert fabric.hops("gpu001", "gpu017") == 6
    assert fabric.link_gbps("gpu001", "leaf1") == 400
    assert fabric.link_gbps("leaf4", "agg-b1") == 200
    assert fabric.link_gbps("agg-a1", "core1") == 400  # 800 Gb/s at 2:1
    assert fabric.graph.nodes["gpu003"]["domain"] == "nvl1"
    assert "domain" not in fabric.graph.nodes["gpu020"]
    assert fabric.span(["gpu001", "gpu017"]).slowest_link_gbps == 400
    assert fabric.span(["gpu001", "gpu025"]).slowest_link_gbps == 200


def test_fabric_yaml_dragonfly_plus() -> None:
    fabric = load_fabric_yaml(FIXTURES / "dragonfly.yaml")
    assert fabric.graph.nodes["gpu010"]["group"] == "g2"
    assert fabric.graph.nodes["g3-spine1"]["group"] == "g3"
    assert fabric.hops("gpu001", "gpu005") == 4
    assert fabric.hops("gpu001", "gpu009") == 5
    # Two minimum-hop routes between groups: via spine1 (200) or spine2 (200 at 2:1);
    # traffic takes the wider one.
    assert fabric.span(["gpu001", "gpu009"]).slowest_link_gbps == 200


def test_load_fabric_file_tells_formats_apart() -> None:
    assert load_fabric_file(FIXTURES / "slurm-topology.yaml").source.startswith("topology.yaml")
    assert load_fabric_file(FIXTURES / "fat-tree.yaml").source.startswith("fabric file")
    assert load_fabric_file(FIXTURES / "sandbox-topology.conf").source.startswith("topology.conf")


def test_known_nodes_accepts_a_matching_file() -> None:
    fabric = load_topology_conf(
        FIXTURES / "sandbox-topology.conf", known_nodes=expand("gpu[001-032]")
    )
    assert len(fabric.compute_nodes) == 32


GOOD_TREE = "SwitchName=leaf1 Nodes=gpu[001-004]\nSwitchName=leaf2 Nodes=gpu[005-008]\n"

BAD_FILES = [
    # (file name, content, line, words in the message)
    (
        "unknown-node.conf",
        GOOD_TREE.replace("008", "009") + "SwitchName=spine Switches=leaf[1-2]\n",
        2,
        "unknown node gpu009",
    ),
    (
        "unknown-child.conf",
        GOOD_TREE + "SwitchName=spine Switches=leaf[1-3]\n",
        3,
        "unknown switch leaf3",
    ),
    (
        "loop.conf",
        "SwitchName=leaf1 Nodes=gpu001\nSwitchName=s1 Switches=leaf1,s2\n"
        "SwitchName=s2 Switches=s1\n",
        2,
        "loop",
    ),
    (
        "two-leaves.conf",
        "SwitchName=leaf1 Nodes=gpu[001-004]\nSwitchName=leaf2 Nodes=gpu[004-008]\n"
        "SwitchName=spine Switches=leaf[1-2]\n",
        2,
        "gpu004 is under two switches",
    ),
    ("bad-hostlist.conf", "SwitchName=leaf1 Nodes=gpu[001-004\n", 1, "bad hostlist"),
    (
        "unknown-key.conf",
        "# sandbox\nSwitchName=leaf1 Nodes=gpu001 Speed=3\n",
        2,
        "unknown key 'Speed'",
    ),
    (
        "continued.conf",
        "SwitchName=leaf1 Nodes=gpu001\nSwitchName=spine \\\n  Switch=leaf1\n",
        2,
        "unknown key 'Switch'",
    ),
    ("no-switchname.conf", "Nodes=gpu001\n", 1, "must start with SwitchName="),
    ("empty.conf", "# nothing\n", None, "no SwitchName="),
    ("bad.yaml", "fabric: x\nswitches:\n  - switch: leaf1\n   nodes: [\n", 4, "bad YAML"),
    (
        "unknown-key.yaml",
        "switches:\n  - switch: leaf1\n    nodez: gpu001\n",
        3,
        "unknown key 'nodez'",
    ),
    (
        "unknown-parent.yaml",
        "switches:\n  - switch: spine\n  - switch: leaf1\n    parents: spine2\n    nodes: gpu001\n",
        3,
        "unknown switch spine2",
    ),
    (
        "unknown-node.yaml",
        "switches:\n  - switch: leaf1\n    nodes: gpu[001-008]\n"
        "  - switch: leaf2\n    nodes: gpu[009-010]\n    parents: leaf1\n",
        4,
        "unknown node gpu009",
    ),
    (
        "domain-node.yaml",
        "switches:\n  - switch: leaf1\n    nodes: gpu001\ndomains:\n  nvl1: gpu[001-002]\n",
        5,
        "unknown node gpu002 in domain nvl1",
    ),
    (
        "two-domains.yaml",
        "switches:\n  - switch: leaf1\n    nodes: gpu[001-004]\n"
        "domains:\n  nvl1: gpu[001-002]\n  nvl2: gpu[002-004]\n",
        6,
        "node gpu002 is in two domains: nvl1 and nvl2",
    ),
    (
        "disconnected.yaml",
        "switches:\n  - switch: leaf1\n    nodes: gpu001\n  - switch: leaf2\n    nodes: gpu002\n",
        4,
        "leaf2 is not connected",
    ),
    (
        "uneven.yaml",
        "switches:\n  - switch: leaf[1-3]\n    nodes: gpu[001-008]\n",
        3,
        "do not split evenly",
    ),
    (
        "loop.yaml",
        "switches:\n  - switch: a\n    parents: b\n    nodes: gpu001\n  - switch: b\n"
        "    parents: a\n",
        2,
        "loop",
    ),
    (
        "bad-bandwidth.yaml",
        "node_links: {bandwidth_gbps: fast}\nswitches:\n  - switch: l\n",
        1,
        "must be a positive number",
    ),
    (
        "slurm-unknown-child.yaml",
        "- topology: t\n  tree:\n    switches:\n      - switch: top\n"
        "        children: leaf[1-2]\n      - switch: leaf1\n        nodes: gpu001\n",
        4,
        "unknown switch leaf2",
    ),
    (
        "slurm-two-defaults.yaml",
        "- topology: a\n  cluster_default: true\n  flat: true\n"
        "- topology: b\n  cluster_default: true\n  flat: true\n",
        4,
        "cluster_default",
    ),
    (
        "slurm-unknown-key.yaml",
        "- topology: a\n  flat: true\n  colour: red\n",
        3,
        "unknown key 'colour'",
    ),
    (
        "slurm-two-leaves.yaml",
        "- topology: t\n  tree:\n    switches:\n      - switch: top\n"
        "        children: l[1-2]\n      - switch: l1\n        nodes: gpu[1-2]\n"
        "      - switch: l2\n        nodes: gpu[2-3]\n",
        8,
        "gpu2 is under two switches",
    ),
    # Inputs that once crashed or exhausted memory: each is now one line.
    ("huge-range.conf", "SwitchName=s1 Nodes=n[0-99999999]\n", 1, "names more than 1000000"),
    ("three-part-range.conf", "SwitchName=s1 Nodes=n[1-2-3]\n", 1, "bad range '1-2-3'"),
    (
        "huge-mesh.yaml",
        "switches:\n  - switch: s[0-50000]\nlinks:\n  - mesh: s[0-50000]\n",
        4,
        "more than 1000000 nodes, switches and links",
    ),
    (
        "alias-bomb.yaml",
        "switches:\n  - switch: s1\n    nodes: &a [n1, n1, n1, n1, n1, n1, n1, n1, n1]\n"
        + "".join(
            f"  - switch: t{i}\n    nodes: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n"
            for i in range(8)
        ),
        15,
        "once aliases are expanded",
    ),
    ("recursive-alias.yaml", "switches: &a\n  - *a\n", 2, "refers to itself"),
    ("no-switch-names.yaml", "switches:\n  - switch: []\n", 2, "names no switch"),
    ("binary-tag.yaml", "switches:\n  - switch: !!binary 'x!'\n", 2, "cannot read tag"),
    ("timestamp-tag.yaml", "switches:\n  - switch: !!timestamp 'x'\n", 2, "cannot read tag"),
    *[
        (
            f"{value}-bandwidth.yaml",
            f"node_links: {{bandwidth_gbps: .{value}}}\nswitches:\n  - switch: s1\n",
            1,
            f"must be a positive number, not {value}",
        )
        for value in ("nan", "inf")
    ],
    ("deep.yaml", "switches: " + "[" * 5000 + "]" * 5000 + "\n", None, "nested too deeply"),
]


@pytest.mark.parametrize(
    ("name", "content", "line", "words"), BAD_FILES, ids=[case[0] for case in BAD_FILES]
)
def test_bad_file_names_file_line_and_cause(
    tmp_path: Path, name: str, content: str, line: int | None, words: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(FabricError) as info:
        load_fabric_file(
            path, known_nodes=expand("gpu[001-008]") if "unknown-node" in name else None
        )
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert words in err.cause
    assert str(err).startswith(f"{path}:{line}: " if line else f"{path}: ")
    assert "\n" not in str(err)


def test_scontrol_node_under_two_leaves() -> None:
    with pytest.raises(FabricError, match="gpu004 is under two switches") as info:
        parse_scontrol_topology(
            "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[001-004]\n"
            "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=gpu[004-008]\n"
        )
    assert info.value.line == 2


def test_missing_file_and_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(FabricError, match="cannot read"):
        load_fabric_file(tmp_path / "absent.conf")
    other = tmp_path / "fabric.txt"
    other.write_text("x")
    with pytest.raises(FabricError, match="unknown fabric file type"):
        load_fabric_file(other)


def test_sandbox_scontrol_capture_gives_four_leaves_of_eight() -> None:
    fabric = parse_scontrol_topology(
        (FIXTURES / "scontrol_show_topology_sandbox.txt").read_text(),
        known_nodes=expand("gpu[001-032]"),
    )
    assert fabric is not None
    assert [len(fabric.nodes_under(leaf)) for leaf in fabric.leaves()] == [8, 8, 8, 8]
    assert fabric.leaf_of("gpu017") == "leaf3"
    assert fabric.uplinks("leaf4") == ["spine"]
