"""Shared fixtures: the real Slurm sandbox (marker ``slurm``) and PostgreSQL (``postgres``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.postgres import PG_URL_ENV, fresh_schema, pg_problem
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
    monkeypatch.setenv("PATH", slurm_cluster.env["PATH"])
    slurm_cluster.reset()
    yield slurm_cluster
    slurm_cluster.reset()


@pytest.fixture(autouse=True)
def _slurm_marker_needs_cluster(request: pytest.FixtureRequest) -> None:
    """A test marked ``slurm`` fails when no cluster answers, even if it forgot the fixture."""
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("slurm_cluster")


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The test PostgreSQL's URL (``$SLURMOPT_TEST_PG_URL``); fails if unset or unreachable."""
    url = os.environ.get(PG_URL_ENV)
    problem = pg_problem(url)
    if problem is not None or url is None:
        pytest.fail(problem or "no PostgreSQL", pytrace=False)
    return url


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A URL to a fresh, empty schema of the test PostgreSQL, dropped after the test."""
    with fresh_schema(postgres_server) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test's database, once on a SQLite file and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'slurmopt.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(autouse=True)
def _postgres_marker_needs_server(request: pytest.FixtureRequest) -> None:
    """A test marked ``postgres`` fails when no PostgreSQL answers, even without the fixture."""
    if request.node.get_closest_marker("postgres") is not None:
        request.getfixturevalue("postgres_server")


#: Outcomes of the tests that need a real service, by marker.
_outcomes: dict[str, dict[str, int]] = {"slurm": {}, "postgres": {}}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count the outcomes of tests marked ``slurm`` or ``postgres`` (call, or a failed set-up)."""
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    for marker, counts in _outcomes.items():
        if marker in report.keywords:
            counts[report.outcome] = counts.get(report.outcome, 0) + 1


def _counts(outcomes: dict[str, int]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many tests ran against the real services, so a silent skip cannot go unnoticed."""
    if _outcomes["postgres"]:
        url = os.environ.get(PG_URL_ENV)
        shown = make_url(url).render_as_string(hide_password=True) if url else "(unset)"
        terminalreporter.write_line(
            f"real PostgreSQL tests: {_counts(_outcomes['postgres'])} against {shown}"
        )
    _slurm_outcomes = _outcomes["slurm"]
    if not _slurm_outcomes:
        return
    conf = sandbox_conf() or "(none)"
    version = ""
    try:
        # the sandbox's own sinfo (a chroot release's through its wrappers)
        env = SlurmSandbox(conf).env if conf != "(none)" else None
        version = subprocess.run(
            ["sinfo", "--version"], capture_output=True, text=True, timeout=10, env=env
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    terminalreporter.write_line(
        f"real Slurm integration tests: {_counts(_slurm_outcomes)} "
        f"against SLURM_CONF={conf} ({version})"
    )
