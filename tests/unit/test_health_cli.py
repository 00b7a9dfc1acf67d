"""``slurmopt node-agent`` end to end in-process, with FakeNvml and a fake Slurm client."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import slurmopt.slurm
from slurmopt.cli import main
from slurmopt.model import Node, NodeState
from tests.fakes.slurm import FakeSlurm

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


@pytest.fixture
def slurm_fake(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    nodes = [Node(f"gpu{i:03d}", NodeState.IDLE, gpus_total=8) for i in range(1, 9)]
    client = FakeSlurm(nodes, clock=0.0)  # eight idle nodes
    monkeypatch.setattr(slurmopt.slurm, "connect", lambda backend="cli", **kw: client)
    monkeypatch.setenv("SLURMOPT_CONFIG", "")
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    return client


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def agent(*args: str, fixture: str = "h100_healthy") -> list[str]:
    return ["node-agent", "--once", "--fake-nvml", str(FIXTURES / f"{fixture}.json"), *args]


def test_healthy_once_prints_a_table_and_exits_0(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(agent("--node", "gpu001"), capsys)
    assert code == 0, err
    assert out.splitlines()[0] == "gpu001: driver 550.90.07"
    assert out.splitlines()[-1] == "gpu001: healthy: healthy"
    assert "NVIDIA H100 80GB HBM3" in out
    assert slurm_fake.reads("snapshot") == 0 and err == ""


def test_drain_once_drains_and_logs(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(agent("--node", "gpu004", fixture="h100_ecc_dbe"), capsys)
    assert code == 0, err
    assert slurm_fake.drains() == [
        ("gpu004", "slurmopt: gpu3:ecc-uncorrected, gpu3:row-remap-pending")
    ]
    assert out.splitlines()[-1].startswith("gpu004: drain: drained (slurmopt: gpu3:")
    (line,) = err.splitlines()
    assert json.loads(line)["action"] == "drain"


def test_node_name_from_slurmd_environment(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "gpu007")
    code, out, err = run(agent("--dry-run", "--json", fixture="h100_xid79"), capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["node"] == "gpu007"
    assert doc["decision"]["action"] == "would-drain"
    assert slurm_fake.drains() == []


def test_cap_options_reach_the_decision(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = agent("--node", "gpu001", "--json", "--max-drain-nodes", "0", fixture="h100_ecc_dbe")
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert json.loads(out)["decision"]["action"] == "capped"
    assert slurm_fake.drains() == []


def test_expected_gpus_option(slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str]) -> None:
    argv = agent("--node", "gpu001", "--json", "--dry-run", "--expected-gpus", "9")
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert json.loads(out)["decision"]["reason"] == "slurmopt: gpu-missing"


def test_no_driver_is_one_line_and_exit_69(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    no_driver = tmp_path / "no-driver.json"
    no_driver.write_text(json.dumps({"init_error": "DRIVER_NOT_LOADED", "gpu_count": 0}))
    code, out, err = run(["node-agent", "--once", "--fake-nvml", str(no_driver)], capsys)
    assert code == 69
    assert out == ""
    assert err.startswith("slurmopt: NVML unavailable: ") and err.count("\n") == 1
    assert "Driver Not Loaded" in err
    assert slurm_fake.reads("snapshot") == 0


def test_missing_pynvml_is_one_line_and_exit_69(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    code, _, err = run(["node-agent", "--once", "--node", "gpu001"], capsys)
    assert code == 69
    assert err.startswith("slurmopt: NVML unavailable: cannot import pynvml")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--interval", "0"], "--interval must be a positive"),
        (["--max-drain-share", "2"], "max drained share must be from 0 to 1"),
        (["--max-drain-nodes", "-1"], "max drained nodes must be 0 or more"),
        (["--expected-gpus", "0"], "--expected-gpus must be 1 or more"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_options_exit_2(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    code, _, err = run(agent(*args), capsys)
    assert code == 2
    assert words in err and err.count("\n") == 1
    assert slurm_fake.drains() == []


def test_loop_mode_stops_on_sigterm(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal
    import threading

    real_wait = threading.Event.wait
    passes: dict[str, Any] = {"n": 0}

    def wait_then_terminate(self: threading.Event, timeout: float | None = None) -> bool:
        passes["n"] += 1
        if passes["n"] == 3:  # the first wait spreads the start, then one per pass
            os.kill(os.getpid(), signal.SIGTERM)
        return real_wait(self, 0.01)

    monkeypatch.setattr(threading.Event, "wait", wait_then_terminate)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        argv = ["node-agent", "--interval", "5", "--node", "gpu002", "--fake-nvml",
                str(FIXTURES / "h100_pcie_x8.json")]  # fmt: skip
        code, out, _ = run(argv, capsys)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert code == 0
    lines = out.splitlines()
    assert re.fullmatch(r"gpu002: checking every 5 s, first in [0-5] s", lines[0])
    assert len(lines) >= 3
    assert all(line.startswith("gpu002: degraded: degraded, left in service") for line in lines[1:])


# ---------------------------------------------------------------------- health_* config keys


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slurmopt.toml"
    path.write_text(text)
    return path


def test_config_file_threshold_changes_the_verdict(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The healthy fixture's GPUs run at 31 C: healthy at the default 85, degraded above 30.
    code, out, err = run(agent("--node", "gpu001"), capsys)
    assert code == 0 and out.splitlines()[-1] == "gpu001: healthy: healthy"
    config = write_config(tmp_path, "health_max_temperature_c = 30\n")
    code, out, err = run(agent("--node", "gpu001", "--json", "--config", str(config)), capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["severity"] == "degraded"
    assert doc["decision"]["reason"].startswith("slurmopt: gpu0:temperature")
    assert slurm_fake.reads("snapshot") == 0  # degraded: Slurm is not even read


def test_config_file_can_make_a_reading_drain(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = write_config(tmp_path, "health_expected_gpus = 9\n")
    code, out, err = run(agent("--node", "gpu001", "--config", str(config)), capsys)
    assert code == 0, err
    assert slurm_fake.drains() == [("gpu001", "slurmopt: gpu-missing")]
    # The option overrides the config: 8 GPUs expected, 8 seen.
    code, out, _ = run(
        agent("--node", "gpu002", "--config", str(config), "--expected-gpus", "8"), capsys
    )
    assert out.splitlines()[-1] == "gpu002: healthy: healthy"


def test_env_override_beats_the_config_file(
    slurm_fake: FakeSlurm,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(tmp_path, "health_max_temperature_c = 30\n")
    monkeypatch.setenv("SLURMOPT_CONFIG", str(config))
    monkeypatch.setenv("SLURMOPT_HEALTH_MAX_TEMPERATURE_C", "90")
    code, out, _ = run(agent("--node", "gpu001"), capsys)
    assert code == 0 and out.splitlines()[-1] == "gpu001: healthy: healthy"
    monkeypatch.setenv("SLURMOPT_HEALTH_MAX_TEMPERATURE_C", "20")
    code, out, _ = run(agent("--node", "gpu001"), capsys)
    assert out.splitlines()[-1].startswith("gpu001: degraded: degraded, left in service")


def test_config_cap_reaches_the_decision(
    slurm_fake: FakeSlurm, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = write_config(tmp_path, "health_max_drain_nodes = 0\n")
    argv = agent("--node", "gpu001", "--json", "--config", str(config), fixture="h100_ecc_dbe")
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert json.loads(out)["decision"]["action"] == "capped"
    code, out, _ = run([*argv, "--max-drain-nodes", "2"], capsys)  # the option wins
    assert json.loads(out)["decision"]["action"] == "drain"


@pytest.mark.parametrize(
    ("text", "env", "words"),
    [
        ("health_max_drain_share = 1.5\n", {}, "key 'health_max_drain_share': must be from 0 to 1"),
        ("health_max_temperature_c = 'hot'\n", {}, "key 'health_max_temperature_c': expected an"),
        ("health_xid_degraded = [79]\n", {}, "both list Xid 79"),
        ("health_max_temp = 80\n", {}, "did you mean 'health_max_temperature_c'"),
        ("", {"SLURMOPT_HEALTH_XID_DRAIN": "79,x"}, "$SLURMOPT_HEALTH_XID_DRAIN: expected comma"),
    ],
)
def test_bad_health_config_is_one_line_and_exit_78(
    slurm_fake: FakeSlurm,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    env: dict[str, str],
    words: str,
) -> None:
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    config = write_config(tmp_path, text)
    code, out, err = run(agent("--node", "gpu001", "--config", str(config)), capsys)
    assert code == 78
    assert out == "" and err.startswith("slurmopt: ") and err.count("\n") == 1
    assert words in err
    assert slurm_fake.reads("snapshot") == 0 and slurm_fake.drains() == []
