"""``slurmopt topology show`` through click's runner, and once as a real process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import slurmopt.slurm
from slurmopt.cli import cli
from slurmopt.errors import FabricError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fabric"


def test_show_json_from_fabric_file() -> None:
    result = CliRunner().invoke(
        cli, ["topology", "show", "--fabric", str(FIXTURES / "fat-tree.yaml"), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["source"] == f"fabric file {FIXTURES / 'fat-tree.yaml'}"
    assert data["nodes"] == 32
    assert data["switches_per_level"] == {"0": 4, "1": 4, "2": 2}
    assert [leaf["switch"] for leaf in data["leaves"]] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    leaf4 = data["leaves"][3]
    assert leaf4 == {
        "switch": "leaf4",
        "nodes": "gpu[025-032]",
        "node_count": 8,
        "uplinks": ["agg-b1", "agg-b2"],
        "slowest_uplink_gbps": 200.0,
    }
    assert data["off_leaf_nodes"] == {}
    assert data["schema_version"] == 1
    assert data["warnings"] == []
    assert [(t["level"], len(t["switches"])) for t in data["tiers"]] == [(0, 4), (1, 4), (2, 2)]
    agg_b1 = data["tiers"][1]["switches"][2]
    assert agg_b1 == {
        "switch": "agg-b1",
        "nodes": "gpu[017-032]",
        "node_count": 16,
        "uplinks": [
            {"switch": "core1", "bandwidth_gbps": 800.0, "oversubscription": 2.0},
            {"switch": "core2", "bandwidth_gbps": 800.0, "oversubscription": 2.0},
        ],
        "link_speed": None,
    }
    assert data["tiers"][2]["switches"][0]["nodes"] == "gpu[001-032]"


def test_show_table_from_topology_conf() -> None:
    result = CliRunner().invoke(
        cli, ["topology", "show", "--fabric", str(FIXTURES / "service-node.conf")]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"source: topology.conf {FIXTURES / 'service-node.conf'}"
    assert "nodes: 5  switches: 3 (level 0: 2, level 1: 1)" in lines
    assert "nodes under no leaf: login1 on spine" in lines
    rows = [line.split() for line in lines if line.startswith(("leaf", "spine"))]
    assert rows == [
        ["leaf1", "0", "gpu[001-002]", "2", "spine", "200", "1"],
        ["leaf2", "0", "gpu[003-004]", "2", "spine", "200", "1"],
        ["spine", "1", "gpu[001-004],login1", "5", "-", "-", "-"],
    ]


def test_show_without_fabric_asks_slurm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    text = (FIXTURES / "scontrol_show_topology_22.05.txt").read_text()
    backends: list[str] = []

    class Client:
        name = "cli"

        def topology_text(self) -> str:
            return text

    def connect(backend: str) -> Client:
        backends.append(backend)
        return Client()

    monkeypatch.setattr(slurmopt.slurm, "connect", connect, raising=False)
    result = CliRunner().invoke(cli, ["--backend", "rest", "topology", "show", "--json"])
    assert result.exit_code == 0, result.output
    assert backends == ["rest"]
    data = json.loads(result.output)
    assert data["source"] == "scontrol show topology (cli)"
    assert [(leaf["switch"], leaf["nodes"]) for leaf in data["leaves"]] == [
        ("leaf1", "gpu[001-004]"),
        ("leaf2", "gpu[005-008]"),
    ]


def test_bad_fabric_file_is_a_typed_error(tmp_path: Path) -> None:
    bad = tmp_path / "topology.conf"
    bad.write_text("SwitchName=leaf1 Nodes=gpu[1-2]\nSwitchName=spine Switches=leaf[1-2]\n")
    result = CliRunner().invoke(cli, ["topology", "show", "--fabric", str(bad)])
    assert isinstance(result.exception, FabricError)
    assert result.exception.line == 2


def test_bad_fabric_file_in_a_real_process(tmp_path: Path) -> None:
    bad = tmp_path / "fabric.yaml"
    bad.write_text("switches:\n  - switch: leaf1\n    nodes: gpu[1-2]\n    speed: 3\n")
    exe = shutil.which("slurmopt")
    argv = [exe] if exe else [sys.executable, "-c", "from slurmopt.cli import main; main()"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMOPT_", "SLURM_"))}
    proc = subprocess.run(
        [*argv, "topology", "show", "--fabric", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == FabricError.exit_code
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"slurmopt: {bad}:4: unknown key 'speed' in switch entry"]
