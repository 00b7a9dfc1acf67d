"""``slurmopt plan``: the advisory daemon's plan of the live queue, and nothing written anywhere."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

import slurmopt.slurm
from slurmopt.cli import cli
from slurmopt.daemon.heartbeat import write_heartbeat
from slurmopt.daemon.loop import Daemon
from slurmopt.model import Job
from slurmopt.store import Base, Store
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_config_cli import slurm_etc
from tests.unit.test_daemon_fakes import config, held_job, two_leaves


def unheld(job: Job) -> Job:
    """A managed job pending without any hold (the plugin not installed, say)."""
    return dataclasses.replace(job, held=False, reason="Priority", priority=5)


def _rows(url: str) -> dict[str, int]:
    with closing(Store(url)) as store, store.begin() as session:
        return {
            name: session.scalar(select(func.count()).select_from(table)) or 0
            for name, table in Base.metadata.tables.items()
        }


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A store an advisory daemon has written to, its heartbeat, and a fake Slurm that counts."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    heartbeat = tmp_path / "heartbeat"
    slurm_etc(tmp_path, monkeypatch, f'db = "{db}"\nheartbeat_path = "{heartbeat}"\n')
    jobs = [held_job(7), held_job(8, nodes=8), unheld(held_job(9, gpus=2))]
    client = FakeSlurm(two_leaves()[0], jobs)
    client.clock = time.time()
    with closing(Store.open(db)) as store:
        Daemon(config(tmp_path, enforce=False), client, store, clock=time.time).cycle()
    write_heartbeat(heartbeat, False, now=time.time() - 5)
    connected: list[str] = []

    def connect(backend: str = "cli", **options: Any) -> FakeSlurm:
        connected.append(backend)
        return client

    monkeypatch.setattr(slurmopt.slurm, "connect", connect)
    return {"db": db, "heartbeat": heartbeat, "client": client, "connected": connected}


def test_plan_json_plans_like_the_advisory_daemon_and_writes_nothing(site: dict[str, Any]) -> None:
    client: FakeSlurm = site["client"]
    db_file = Path(site["db"].removeprefix("sqlite:///"))
    before = (_rows(site["db"]), os.stat(db_file).st_mtime_ns, os.stat(site["heartbeat"]))
    calls_before = list(client.calls)

    result = CliRunner().invoke(cli, ["plan", "--json"])

    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["planned_jobs"] == [7, 8, 9]
    assert [a["job_id"] for a in doc["actions"]] == [7, 9]
    assert all(a["kind"] == "start" and a["nodes"] and a["reason"] for a in doc["actions"])
    assert [r["job_id"] for r in doc["reservations"]] == [8]
    assert [u["job_id"] for u in doc["unplaced"]] == [8]
    assert doc["fabric"].startswith("flat") and doc["backend"] == "fake"
    assert site["connected"] == ["cli"]
    # Nothing written: no Slurm call, no store row, no heartbeat, the files untouched.
    assert client.calls == calls_before == []
    after = (_rows(site["db"]), os.stat(db_file).st_mtime_ns, os.stat(site["heartbeat"]))
    assert after == before


def test_plan_table_without_a_store_notes_the_order(site: dict[str, Any], tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    result = CliRunner().invoke(cli, ["plan", "--db", missing])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("3 pending managed GPU job(s) planned; fabric: flat")
    assert lines[0].endswith("nothing was written")
    assert any(line.split()[:3] == ["7", "start", "now"] for line in lines)
    assert any(line.split()[:3] == ["8", "reserve", "from"] for line in lines)
    assert lines[-1].startswith("note: no store") and not (tmp_path / "none.db").exists()


def test_untagged_jobs_outside_managed_partitions_are_not_planned(
    site: dict[str, Any],
) -> None:
    site["client"].jobs[7] = held_job(7, comment="")
    doc = json.loads(CliRunner().invoke(cli, ["plan", "--json"]).stdout)
    assert doc["planned_jobs"] == [8, 9]
