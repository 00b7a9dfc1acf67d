"""``slurmopt status``: the mode slurmopt is really in, from the store, heartbeat and plugin."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurmopt.cli import cli
from slurmopt.daemon.loop import BEAT_NAME, Daemon
from slurmopt.daemon.status import DaemonStatus, encode
from slurmopt.daemon.switch import set_switch
from slurmopt.plugin import read_source, render_plugin
from slurmopt.store import Store
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_config_cli import slurm_etc
from tests.unit.test_daemon_fakes import config, held_job, two_leaves
from tests.unit.test_plugin import _main


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """slurm.conf that enables the plugin, the plugin rendered for this test's heartbeat."""
    toml = f'db = "sqlite:///{tmp_path / "d.db"}"\nheartbeat_path = "{tmp_path / "heartbeat"}"\n'
    etc = slurm_etc(tmp_path, monkeypatch, toml + "interval_s = 1\n")
    (etc / "slurm.conf").write_text("ClusterName=x\nJobSubmitPlugins=lua\n")
    (etc / "job_submit.lua").write_text(
        render_plugin(read_source(), str(tmp_path / "heartbeat"), 30)
    )
    return tmp_path


@pytest.fixture
def store(site: Path) -> Iterator[Store]:
    """The store the site's config names."""
    with closing(Store.open(f"sqlite:///{site / 'd.db'}")) as opened:
        yield opened


def _cycle(site: Path, store: Store, enforce: bool) -> None:
    """One real daemon cycle on the wall clock: one job placed, one waiting for all 8 nodes."""
    client = FakeSlurm(two_leaves()[0], [held_job(7), held_job(9, nodes=8)])
    client.clock = time.time()
    _, fabric = two_leaves()
    daemon = Daemon(
        config(site, enforce=enforce),
        client,
        store,
        holder="ctl:42",
        clock=time.time,
        fabric_loader=lambda _c, _s: fabric,
    )
    daemon.cycle()


def _status(*args: str) -> tuple[int, dict[str, Any]]:
    """The exit code (through the CLI's own error handling) and the JSON report."""
    result = CliRunner().invoke(_main, ["status", "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_enforcing_daemon_with_plugin_and_heartbeat_is_healthy(site: Path, store: Store) -> None:
    _cycle(site, store, enforce=True)
    code, report = _status()
    assert (code, report["mode"], report["healthy"], report["reasons"]) == (
        0,
        "enforcing",
        True,
        [],
    )
    assert report["daemon"]["holder"] == "ctl:42" and report["daemon"]["record_age_s"] < 60
    assert report["lease"]["holder"] == "ctl:42" and not report["lease"]["expired"]
    assert report["heartbeat"]["enforcing"] and report["heartbeat"]["holder"] == "ctl:42"
    assert report["plugin"]["state"] == "installed" and report["plugin"]["stale"] is None
    jobs = report["jobs"]
    assert (jobs["held"], jobs["pinned"], jobs["left_to_slurm"]) == (1, 1, 0)
    assert report["kill_switch"]["on"] is False


def test_enforcing_without_the_plugin_is_degraded(site: Path, store: Store) -> None:
    _cycle(site, store, enforce=True)
    (site / "etc" / "job_submit.lua").unlink()
    code, report = _status()
    assert (code, report["mode"]) == (1, "degraded")
    assert any("job_submit.lua: missing" in r for r in report["reasons"])


def test_kill_switch_makes_an_enforcing_daemon_disabled(site: Path, store: Store) -> None:
    set_switch(store, True, "ops@ctl")
    _cycle(site, store, enforce=True)
    code, report = _status()
    assert code == 1
    assert report["mode"] == "disabled" and report["kill_switch"]["by"] == "ops@ctl"
    assert any("kill switch on" in r for r in report["reasons"])


def test_advisory_daemon_is_healthy_as_asked(site: Path, store: Store) -> None:
    _cycle(site, store, enforce=False)
    code, report = _status()
    assert code == 0
    assert report["mode"] == "advisory" and report["lease"] is None
    text = CliRunner().invoke(cli, ["status"]).stdout
    assert text.splitlines()[0] == "mode:        advisory"
    assert "lease:       none" in text


def test_old_record_means_the_daemon_is_down(site: Path, store: Store) -> None:
    at = time.time() - 120
    record = DaemonStatus(mode="enforcing", holder="ctl:1", enforce_requested=True, cycle_at=at)
    store.beat(BEAT_NAME, "ctl:1", at, encode(record))
    code, report = _status()
    assert (code, report["mode"]) == (3, "stopped")
    assert "down or hung" in report["reasons"][0] and "said enforcing" in report["reasons"][0]


def test_daemon_reporting_degraded_keeps_its_reasons(site: Path, store: Store) -> None:
    now = time.time()
    record = DaemonStatus(
        mode="degraded",
        holder="ctl:1",
        enforce_requested=True,
        reasons=("no job held since start: is the plugin loaded?",),
        cycle_at=now,
        cycle_s=0.25,
    )
    store.beat(BEAT_NAME, "ctl:1", now, encode(record))
    code, report = _status()
    assert (code, report["mode"]) == (1, "degraded")
    assert report["reasons"][0] == "no job held since start: is the plugin loaded?"
    assert report["daemon"]["last_cycle_s"] == 0.25


def test_no_record_and_no_store_are_reported_not_raised(site: Path) -> None:
    code, report = _status()
    assert (code, report["mode"]) == (3, "unknown")
    assert "no slurmopt store" in report["store"]["error"]
    assert report["heartbeat"]["reason"] == "missing"
    Store.open(f"sqlite:///{site / 'd.db'}").close()
    code, report = _status()
    assert (code, report["mode"]) == (3, "stopped")
    assert report["reasons"] == ["no daemon has recorded a cycle in this store"]
