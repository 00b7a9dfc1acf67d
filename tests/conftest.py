"""Shared fixtures: the real Slurm sandbox for tests marked ``slurm``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.sandbox import SlurmSandbox, exclusive_cluster, sandbox_conf


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmSandbox]:
    """The running sandbox, held exclusively for this test session; fails if unreachable."""
    conf = sandbox_conf()
    if conf is None:
        pytest.fail(
            "no Slurm cluster: SLURM_CONF is unset and no sandbox config exists; "
            "start one with `scripts/slurm-sandbox up`"
        )
    sandbox = SlurmSandbox(conf)
    try:
        ping = sandbox.run("scontrol", "ping", check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"Slurm unreachable with SLURM_CONF={conf}: {exc}")
    if "UP" not in ping:
        pytest.fail(f"slurmctld is not UP with SLURM_CONF={conf}: {ping.strip()!r}")
    with exclusive_cluster():
        yield sandbox


@pytest.fixture
def slurm(slurm_cluster: SlurmSandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmSandbox]:
    """A clean, idle sandbox for one test; every job is cancelled again afterwards."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.conf)
    slurm_cluster.reset()
    yield slurm_cluster
    slurm_cluster.reset()


@pytest.fixture(autouse=True)
def _slurm_marker_needs_cluster(request: pytest.FixtureRequest) -> None:
    """A test marked ``slurm`` fails when no cluster answers, even if it forgot the fixture."""
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("slurm_cluster")


_slurm_outcomes: dict[str, int] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count the outcomes of tests marked ``slurm`` (call phase, or a failed/skipped set-up)."""
    if "slurm" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _slurm_outcomes[report.outcome] = _slurm_outcomes.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many tests ran against the real Slurm, so a silent skip cannot go unnoticed."""
    if not _slurm_outcomes:
        return
    conf = sandbox_conf() or "(none)"
    version = ""
    try:
        version = subprocess.run(
            ["sinfo", "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(_slurm_outcomes.items()))
    terminalreporter.write_line(
        f"real Slurm integration tests: {counts} against SLURM_CONF={conf} ({version})"
    )
