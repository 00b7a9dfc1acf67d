"""``slurmopt explain`` through the real CLI: a store filled by the real planner, a fake Slurm.

The error path also runs once through the installed ``slurmopt`` command, to
check what an operator sees: one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import slurmopt.fabric.discover
import slurmopt.slurm
from slurmopt.cli import cli
from slurmopt.errors import SlurmUnavailable
from slurmopt.explain import JobNotExplained
from slurmopt.fabric import Fabric
from slurmopt.model import Job, JobState
from slurmopt.policy.plan import PlanRequest, plan
from slurmopt.store import Store, StoreError
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_explain import FABRIC, QUEUE, T0, cluster_snapshot


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SLURMOPT_DB", "SLURMOPT_CONFIG", "SLURMOPT_BACKEND", "SLURMOPT_REST_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    """A store holding the real plan for the test queue, recorded as the daemon records it."""
    url = f"sqlite:///{tmp_path / 'slurmopt.db'}"
    store = Store.open(url)
    store.record_plan(plan(PlanRequest(cluster_snapshot(jobs=QUEUE), FABRIC)), T0, 0.01)
    store.close()
    yield url


@pytest.fixture
def fake_slurm(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replace ``connect`` and ``load_fabric``; Slurm shows job 1 running where it was planned."""
    running = Job(
        1,
        JobState.RUNNING,
        partition="gpu",
        nodes=("gpu029", "gpu030", "gpu031", "gpu032"),
        node_count=4,
        gpus_per_node=8,
        submit_time=T0 - 5,
        start_time=T0 + 2,
    )
    calls: dict[str, Any] = {"error": None, "connect": [], "fabric": []}
    snapshot = cluster_snapshot(T0 + 30, jobs=(running,))

    def connect(backend: str = "cli", **options: Any) -> FakeSlurm:
        calls["connect"].append((backend, options))
        return FakeSlurm.from_snapshot(snapshot, calls["error"])

    def load_fabric(**kwargs: Any) -> Fabric:
        calls["fabric"].append(kwargs)
        return FABRIC

    monkeypatch.setattr(slurmopt.slurm, "connect", connect)
    monkeypatch.setattr(slurmopt.fabric.discover, "load_fabric", load_fabric)
    return calls


def invoke(*argv: str) -> Result:
    return CliRunner().invoke(cli, list(argv))


def test_text_shows_the_placement_the_fabric_and_slurms_state(
    db_url: str, fake_slurm: dict[str, Any]
) -> None:
    result = invoke("explain", "1", "--db", db_url)

    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith("job 1: placed on gpu[029-032] (GANG_FEWEST_LEAVES")
    assert lines[2].startswith("  fabric: 1 leaf switch(es) (leaf4), at most 2 hops apart")
    assert "Slurm now: RUNNING on gpu[029-032] in partition gpu" in lines
    assert fake_slurm["connect"] == [("cli", {})]
    assert fake_slurm["fabric"][0]["fabric_file"] is None


def test_json_is_the_documented_object(db_url: str, fake_slurm: dict[str, Any]) -> None:
    result = invoke("explain", "2", "--db", db_url, "--json")

    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {
        "schema_version",
        "job_id",
        "now",
        "kind",
        "plan",
        "latest_plan",
        "current",
        "start",
        "reservation",
        "unplaced",
        "managed",
        "slurm",
        "notes",
    }
    assert (doc["schema_version"], doc["job_id"], doc["kind"]) == (1, 2, "reservation")
    assert doc["plan"] == {"id": 1, "taken_at": T0, "planned_at": T0, "duration_s": 0.01}
    assert doc["current"] is True
    assert doc["reservation"]["hostlist"] == "gpu[001-008]"
    assert doc["reservation"]["fabric"]["num_leaves"] == 1
    assert doc["unplaced"]["reason"] == "WAITS_FOR_RESERVATION"
    assert doc["unplaced"]["expected_start"] == doc["reservation"]["start_time"]
    assert doc["slurm"] == {"reachable": True, "error": None, "job": None}


def test_slurm_down_still_shows_the_stored_decision_with_one_warning(
    db_url: str, fake_slurm: dict[str, Any]
) -> None:
    fake_slurm["error"] = SlurmUnavailable("slurmctld unreachable: connection refused")

    result = invoke("explain", "1", "--db", db_url)
    as_json = invoke("explain", "1", "--db", db_url, "--json")

    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "slurmopt: warning: cannot read Slurm (slurmctld unreachable: connection refused); "
        "showing the stored decision only"
    ]
    assert result.stdout.startswith("job 1: placed on gpu[029-032]")
    assert "Slurm now: unknown" in result.stdout
    assert fake_slurm["fabric"] == []  # no fabric discovery without Slurm (none configured)
    assert as_json.exit_code == 0
    doc = json.loads(as_json.stdout)
    assert doc["slurm"]["reachable"] is False
    assert doc["start"]["nodes"] == ["gpu029", "gpu030", "gpu031", "gpu032"]


def test_an_unknown_job_fails_before_asking_slurm(db_url: str, fake_slurm: dict[str, Any]) -> None:
    result = invoke("explain", "4242", "--db", db_url)
    assert result.exit_code != 0
    assert isinstance(result.exception, JobNotExplained)
    assert fake_slurm["connect"] == []


def test_the_store_comes_from_the_config_unless_db_is_given(
    db_url: str, fake_slurm: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "slurmopt.toml"
    config.write_text(f'db = "{db_url}"\nbackend = "rest"\nrest_url = "http://ctl:6820"\n')

    from_config = invoke("explain", "3", "--config", str(config))
    assert from_config.exit_code == 0, from_config.output
    assert "TOO_BIG_FOR_PARTITION" in from_config.stdout
    assert fake_slurm["connect"] == [("rest", {"url": "http://ctl:6820"})]

    missing = f"sqlite:///{tmp_path / 'nowhere' / 'other.db'}"
    overridden = invoke("explain", "3", "--config", str(config), "--db", missing)
    assert isinstance(overridden.exception, StoreError)
    assert not (tmp_path / "nowhere").exists()  # a read never creates a store

    monkeypatch.setenv("SLURMOPT_DB", db_url)
    from_env = invoke("--backend", "cli", "explain", "3")
    assert from_env.exit_code == 0, from_env.output
    assert fake_slurm["connect"][-1] == ("cli", {})


def test_a_bad_job_id_is_a_usage_error() -> None:
    assert invoke("explain", "abc").exit_code == 2
    assert invoke("explain", "0").exit_code == 2
    # Slurm's ids are 32-bit: a longer one names no job (and overflowed SQLite's integers)
    assert invoke("explain", "99999999999999999999").exit_code == 2
    assert invoke("explain", "4294967294").exit_code == 2


def test_a_file_that_is_not_a_database_is_one_store_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 16)
    result = invoke("explain", "5", "--db", f"sqlite:///{garbage}")
    assert isinstance(result.exception, StoreError)
    assert "file is not a database" in str(result.exception)
    with pytest.raises(StoreError, match="file is not a database"):
        Store.open(f"sqlite:///{garbage}")


def test_the_installed_command_prints_one_line_for_an_unknown_job(db_url: str) -> None:
    exe = shutil.which("slurmopt")
    argv = [exe] if exe else [sys.executable, "-c", "from slurmopt.cli import main; main()"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMOPT_")}
    done = subprocess.run(
        [*argv, "explain", "4242", "--db", db_url],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("slurmopt: job 4242: unknown to slurmopt")
