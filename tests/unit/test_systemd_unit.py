"""The shipped systemd unit: the keys the daemon relies on, and systemd's own verdict on it."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmopt.config import DEFAULT_CONFIG_PATH, Config

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "slurmopt.service"


def _parse(text: str) -> configparser.ConfigParser:
    # strict: a key given twice in one section would silently change meaning for configparser.
    parser = configparser.ConfigParser(interpolation=None, strict=True, empty_lines_in_values=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text, source=str(UNIT))
    return parser


@pytest.fixture(scope="module")
def unit() -> configparser.ConfigParser:
    return _parse(UNIT.read_text())


def test_required_service_keys(unit: configparser.ConfigParser) -> None:
    svc = unit["Service"]
    assert svc.get("Type") == "notify"
    assert svc.get("WatchdogSec") == "30"
    assert svc.get("NotifyAccess") == "main"
    assert svc.get("User") == "slurm"
    assert svc.get("Restart") == "on-failure"
    assert svc.get("RuntimeDirectory") == "slurmopt"
    assert svc.get("StateDirectory") == "slurmopt"
    assert svc.get("NoNewPrivileges") == "yes"
    assert svc.get("ProtectSystem") == "strict"
    assert svc.get("PrivateTmp") == "yes"
    assert "slurmctld.service" in unit["Unit"].get("After", "").split()
    assert unit["Install"].get("WantedBy") == "multi-user.target"


def test_exec_start_reads_the_default_config(unit: configparser.ConfigParser) -> None:
    argv = unit["Service"]["ExecStart"].split()
    assert argv == ["/opt/slurmopt/bin/slurmopt", "daemon", "--config", DEFAULT_CONFIG_PATH]


def test_default_paths_are_writable_under_the_sandbox(unit: configparser.ConfigParser) -> None:
    """With ProtectSystem=strict, the default heartbeat and db must lie in writable paths."""
    svc = unit["Service"]
    writable = svc["ReadWritePaths"].split()
    runtime = f"/run/{svc['RuntimeDirectory']}"
    state = f"/var/lib/{svc['StateDirectory']}"
    assert runtime in writable and state in writable
    defaults = Config()
    assert Path(defaults.heartbeat_path).parent == Path(runtime)
    assert defaults.db.startswith(f"sqlite:///{state}/")


def test_watchdog_outlasts_the_loop(unit: configparser.ConfigParser) -> None:
    """Pinging at half of WatchdogSec must still leave room for one scheduling pass."""
    assert float(unit["Service"]["WatchdogSec"]) / 2 >= Config().interval_s


@pytest.mark.parametrize("key", ["Type", "WatchdogSec"])
def test_a_unit_without_the_key_is_caught(key: str) -> None:
    """The checks above are not vacuous: dropping a required line makes them fail."""
    text = "\n".join(
        line for line in UNIT.read_text().splitlines() if not line.startswith(f"{key}=")
    )
    with pytest.raises(AssertionError):
        test_required_service_keys(_parse(text))


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """systemd's own parser finds no unknown key, bad value or missing binary."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed; keys checked by test_required_service_keys")
    true = shutil.which("true")
    assert true is not None
    text = UNIT.read_text().replace(
        "ExecStart=/opt/slurmopt/bin/slurmopt ", f"ExecStart={true} ", 1
    )
    assert f"ExecStart={true} daemon" in text
    copy = tmp_path / "slurmopt.service"
    copy.write_text(text)
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # verify exits 0 on keys it ignores, but names the unit in its warnings.
    complaints = [line for line in result.stderr.splitlines() if "slurmopt.service" in line]
    assert result.returncode == 0, result.stderr
    assert complaints == [], "\n".join(complaints)
