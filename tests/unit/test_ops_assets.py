"""The shipped Grafana dashboard and Prometheus alerts: well formed, and about real metrics.

Every ``slurmopt_*`` and ``process_*`` name the dashboard and the rules query
must be exported by a daemon that ran a cycle, so a renamed metric breaks
this test rather than a site's alerts.  ``promtool`` (Debian package
``prometheus``; ``scripts/test`` installs it) checks the rules and runs their
unit tests; without it the test fails, never skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurmopt.daemon.loop import Daemon
from slurmopt.store import Store
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_daemon_fakes import config, held_job, two_leaves

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "ops" / "prometheus" / "slurmopt-alerts.yml"
RULE_TESTS = REPO / "ops" / "prometheus" / "slurmopt-alerts.test.yml"
DASHBOARD = REPO / "ops" / "grafana" / "slurmopt-dashboard.json"
METRIC = re.compile(r"\b((?:slurmopt|process|python)_[a-z0-9_]+)\b")
#: Alerts the operations guide promises (docs/metrics.md).
ALERTS = {
    "SlurmoptDaemonDown",
    "SlurmoptNoSuccessfulCycle",
    "SlurmoptDegraded",
    "SlurmoptKillSwitchOn",
    "SlurmoptStrandedGPUsHigh",
    "SlurmoptHeartbeatStale",
    "SlurmoptLeaseFlapping",
    "SlurmoptDrainsAtCap",
}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return exprs


def _exported(tmp_path: Path) -> set[str]:
    """Every family and sample name a daemon's registry serves after one enforcing cycle."""
    nodes, fabric = two_leaves()
    client = FakeSlurm(nodes, [held_job(7)])
    cfg = config(tmp_path)
    store = Store.open(cfg.db)
    try:
        daemon = Daemon(
            cfg,
            client,
            store,
            holder="host:1",
            clock=lambda: client.clock,
            fabric_loader=lambda _c, _s: fabric,
        )
        daemon.cycle()
        text = generate_latest(daemon.metrics.registry).decode()
    finally:
        store.close()
    names: set[str] = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    for family in text_string_to_metric_families(text):
        # A labelled metric with no child yet (no Slurm error so far) is still declared.
        names.add(family.name)
        names.update(family.name + end for end in suffixes.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def test_rules_name_every_promised_alert_with_severity_and_summary() -> None:
    rules = _rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    assert ALERTS <= set(names)
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert METRIC.search(rule["expr"]) or "up{" in rule["expr"], rule["alert"]


def test_dashboard_panels_are_well_formed() -> None:
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]


def test_every_metric_the_dashboard_and_rules_query_is_exported(tmp_path: Path) -> None:
    exported = _exported(tmp_path)
    queried = {
        name
        for expr in [r["expr"] for r in _rules()] + _dashboard_exprs()
        for name in METRIC.findall(expr)
    }
    assert {"slurmopt_mode", "slurmopt_lease_acquired_total"} <= queried
    assert queried - exported == set()


def _promtool() -> str:
    found = os.environ.get("SLURMOPT_PROMTOOL") or shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is not installed: apt-get install prometheus, or extract usr/bin/promtool "
            "from its .deb (scripts/test does) and put it on PATH or in $SLURMOPT_PROMTOOL"
        )
    return found


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    promtool = _promtool()
    for argv in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
        done = subprocess.run(
            [promtool, *argv], capture_output=True, text=True, timeout=120, cwd=RULES.parent
        )
        assert done.returncode == 0, done.stdout + done.stderr
