"""The node agent's systemd unit: the keys it relies on, and systemd's own verdict on it."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "slurmopt-node-agent.service"


@pytest.fixture(scope="module")
def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True, empty_lines_in_values=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text(), source=str(UNIT))
    return parser


def test_service_keys(unit: configparser.ConfigParser) -> None:
    svc = unit["Service"]
    assert svc["ExecStart"].split() == [
        "/opt/slurmopt/bin/slurmopt", "node-agent", "$SLURMOPT_NODE_AGENT_ARGS"
    ]  # fmt: skip
    assert svc["EnvironmentFile"] == "-/etc/default/slurmopt-node-agent"
    assert svc["User"] == "root"  # NVML devices, and scontrol drain rights
    assert svc["Restart"] == "on-failure"
    # No driver (exit 69) must not make systemd restart the agent forever.
    assert svc["RestartPreventExitStatus"] == "69"
    # NVML needs the real /dev/nvidia* nodes.
    assert "PrivateDevices" not in svc and "DevicePolicy" not in svc
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_no_driver_exit_code_matches_the_unit(unit: configparser.ConfigParser) -> None:
    from slurmopt.health.nvml import NvmlUnavailable

    assert str(NvmlUnavailable.exit_code) == unit["Service"]["RestartPreventExitStatus"]


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """systemd's own parser finds no unknown key, bad value or missing binary."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed; keys checked by test_service_keys")
    true = shutil.which("true")
    assert true is not None
    text = UNIT.read_text().replace("ExecStart=/opt/slurmopt/bin/slurmopt ", f"ExecStart={true} ")
    assert f"ExecStart={true} node-agent" in text
    copy = tmp_path / UNIT.name
    copy.write_text(text)
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)], capture_output=True, text=True, timeout=120
    )
    complaints = [line for line in result.stderr.splitlines() if UNIT.name in line]
    assert result.returncode == 0, result.stderr
    assert complaints == [], "\n".join(complaints)
