"""``slurmopt status``: which mode slurmopt is really in, and why, from every place that says so.

The daemon's own record in the store (``slurmopt.daemon.status``) gives the
mode it claims; the kill switch, the enforcer lease, the heartbeat file the
job-submit plugin reads and the plugin installed beside slurm.conf are read
too, so a daemon that claims to enforce while the plugin would fail open is
shown as ``degraded``, and a record older than a few cycles as ``stopped``.
Nothing missing (store, heartbeat, plugin) is an error: each is reported.

Exit codes: 0 healthy in the mode the daemon was asked for (enforcing or
standby with ``--enforce``, advisory without); 1 up but not doing what it
was asked (degraded, disabled by the kill switch, Slurm unavailable,
advisory when asked to enforce); 3 no daemon is running (no record, or
one older than ``STALE_CYCLES`` intervals) or the store cannot be read.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from slurmopt.cli.common import emit_json
from slurmopt.cli.wiring import Wiring, config_option, db_option, resolve
from slurmopt.errors import SlurmoptError

if TYPE_CHECKING:
    from slurmopt.cli.plugin import Site
    from slurmopt.config import Config
    from slurmopt.daemon.heartbeat import HeartbeatStatus
    from slurmopt.daemon.status import DaemonStatus
    from slurmopt.store import Store

#: A daemon record older than this many intervals (and at least ``MIN_STALE_S``) means it is down.
STALE_CYCLES = 3
MIN_STALE_S = 10.0
#: Modes in which a daemon is doing what it was asked to do.
_HEALTHY_ENFORCING = frozenset({"enforcing", "standby"})
#: Modes that only a daemon started with --enforce reports.
_ASKED_TO_ENFORCE = frozenset({"enforcing", "degraded", "standby", "disabled"})


class NotHealthy(SlurmoptError):
    """The daemon runs but is not in the mode it was asked for (degraded, disabled, ...)."""

    exit_code = 1


class DaemonDown(SlurmoptError):
    """No daemon has recorded a recent cycle, or the store cannot be read."""

    exit_code = 3


@dataclass
class Verdict:
    """The mode slurmopt is in, the exit code that goes with it, and why."""

    mode: str
    exit_code: int
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def stale_after(config: Config) -> float:
    """How old the daemon's record may be before the daemon counts as down."""
    return max(STALE_CYCLES * config.interval_s, MIN_STALE_S)


def judge(
    record: DaemonStatus | None,
    record_age_s: float | None,
    limit_s: float,
    switch_on: bool,
    heartbeat: HeartbeatStatus,
    site: Site | None,
) -> Verdict:
    """The mode from the daemon's record, checked against the switch, heartbeat and plugin.

    A daemon that says it enforces while the plugin would fail open (the
    heartbeat is stale or says enforce=0, the plugin is missing or not
    enabled) is ``degraded``: Slurm then schedules as if slurmopt were absent.
    """
    if record is None or record_age_s is None:
        return Verdict("stopped", 3, ["no daemon has recorded a cycle in this store"])
    if record.mode == "stopped":
        return Verdict("stopped", 3, [f"the daemon stopped {record_age_s:.0f} s ago"])
    if record_age_s > limit_s:
        why = (
            f"the daemon's last record is {record_age_s:.0f} s old (more than {limit_s:.0f} s; "
            f"it said {record.mode}): the daemon is down or hung"
        )
        return Verdict("stopped", 3, [why])
    verdict = Verdict(record.mode, 0, list(record.reasons))
    asked = asked_to_enforce(record)
    if switch_on:
        note = "kill switch on (`slurmopt enable` turns it off)"
        (verdict.reasons if asked else verdict.warnings).append(note)
    if record.mode == "enforcing":
        failures = _enforcement_gaps(heartbeat, site)
        if failures or switch_on:
            verdict.mode = "degraded"
            verdict.reasons.extend(failures)
    if site is not None and site.plugin.stale:
        verdict.warnings.append(f"job-submit plugin is stale: {site.plugin.stale}")
    healthy = (
        verdict.mode in _HEALTHY_ENFORCING if asked else verdict.mode == "advisory"
    ) and not verdict.reasons
    if not healthy:
        verdict.exit_code = 1
        if asked and verdict.mode == "advisory":
            verdict.reasons.append("asked to enforce, but advisory")
        if not verdict.reasons:
            verdict.reasons.append(record.summary or f"the daemon reports {record.mode}")
    return verdict


def asked_to_enforce(record: DaemonStatus) -> bool:
    """Whether the daemon was started with --enforce (older records say so only by their mode)."""
    return record.enforce_requested or record.mode in _ASKED_TO_ENFORCE


def _enforcement_gaps(heartbeat: HeartbeatStatus, site: Site | None) -> list[str]:
    """Why new jobs would not be held although the daemon enforces (empty: they would)."""
    gaps = []
    if not heartbeat.enforcing:
        gaps.append(f"heartbeat file {heartbeat.reason}: the plugin fails open")
    if site is None:
        gaps.append("cannot read slurm.conf or job_submit.lua on this host")
    else:
        if site.plugin.state != "installed":
            gaps.append(f"job-submit plugin {site.script}: {site.plugin.state}")
        if site.conf_enables is not True:
            gaps.append(f"{site.conf} does not enable JobSubmitPlugins=lua")
    return gaps


def _job_counts(store: Store) -> dict[str, Any]:
    """Live managed jobs by state; ``held``: waiting under slurmopt's hold (not left to Slurm)."""
    from slurmopt.daemon.reconcile import LEFT_TO_SLURM, live_records
    from slurmopt.store import ManagedJobState

    records = live_records(store)
    by_state = Counter(r.state.value for r in records)
    waiting = [r for r in records if r.state is ManagedJobState.WAITING]
    left = sum(1 for r in waiting if r.reason == LEFT_TO_SLURM)
    return {
        "held": len(waiting) - left,
        "pinned": by_state.get("pinned", 0),
        "waiting": len(waiting),
        "left_to_slurm": left,
        "by_state": {s.value: by_state.get(s.value, 0) for s in ManagedJobState if not s.is_final},
    }


def _read_store(store: Store, now: float) -> dict[str, Any]:
    """The daemon's record, switch, lease and jobs as the store has them."""
    from slurmopt.daemon.loop import BEAT_NAME, LEASE_NAME
    from slurmopt.daemon.status import decode
    from slurmopt.daemon.switch import read_switch

    row = store.last_beat(BEAT_NAME)
    record = None if row is None else decode(row.detail, row.holder, row.at)
    switch = read_switch(store)
    lease = store.lease(LEASE_NAME)
    return {
        "record": record,
        "record_age_s": None if row is None else now - row.at,
        "switch": switch,
        "lease": None
        if lease is None
        else {
            "holder": lease.holder,
            "age_s": now - lease.acquired_at,
            "expires_in_s": lease.expires_at - now,
            "expired": lease.expires_at <= now,
        },
        "jobs": _job_counts(store),
    }


def status_report(wiring: Wiring, now: float) -> dict[str, Any]:
    """Everything ``slurmopt status --json`` prints; never raises for a missing piece."""
    from sqlalchemy.exc import SQLAlchemyError

    from slurmopt import __version__
    from slurmopt.cli.plugin import read_site
    from slurmopt.daemon.heartbeat import read_heartbeat
    from slurmopt.plugin import default_dest

    config = wiring.config
    store_error, store_name = None, None
    found: dict[str, Any] = {"record": None, "record_age_s": None, "switch": None}
    found.update(lease=None, jobs=None)
    try:
        store = wiring.read_store()
        store_name = store.describe()
        try:
            found = _read_store(store, now)
        finally:
            store.close()
    except (SlurmoptError, SQLAlchemyError) as exc:
        store_error = str(getattr(exc, "orig", None) or exc)
    site_error = None
    try:
        site: Site | None = read_site(default_dest())
    except SlurmoptError as exc:
        site, site_error = None, str(exc)
    record: DaemonStatus | None = found["record"]
    baked = site.plugin.baked if site is not None else None
    max_age = baked.max_age_s if baked and baked.max_age_s else config.heartbeat_max_age_s
    path = (record.heartbeat_path if record else "") or config.heartbeat_path
    beat = read_heartbeat(path, now, max_age)
    switch = found["switch"]
    if store_error is not None:
        verdict = Verdict("unknown", 3, [f"cannot read the store: {store_error}"])
    else:
        limit = stale_after(config)
        on = bool(switch and switch.disabled)
        verdict = judge(record, found["record_age_s"], limit, on, beat, site)
    return {
        "mode": verdict.mode,
        "healthy": verdict.exit_code == 0,
        "exit_code": verdict.exit_code,
        "reasons": verdict.reasons,
        "warnings": verdict.warnings,
        "daemon": None
        if record is None
        else {
            "holder": record.holder,
            "recorded_mode": record.mode,
            "enforce_requested": asked_to_enforce(record),
            "record_age_s": found["record_age_s"],
            "down_after_s": stale_after(config),
            "last_cycle_at": record.cycle_at,
            "last_cycle_s": record.cycle_s,
            "summary": record.summary,
            "version": record.version or None,
            "heartbeat_seq": record.heartbeat_seq,
            "plugin_seq_seen": record.plugin_seq_seen,
            "fencing_token": record.fencing_token,
        },
        "kill_switch": None
        if switch is None
        else {"on": switch.disabled, "by": switch.by, "at": switch.at},
        "lease": found["lease"],
        "heartbeat": {
            "path": path,
            "max_age_s": max_age,
            "fresh": beat.fresh,
            "enforcing": beat.enforcing,
            "reason": beat.reason,
            "age_s": beat.age_s,
            "holder": beat.heartbeat.holder if beat.heartbeat else None,
        },
        "plugin": {"error": site_error}
        if site is None
        else {
            "script": str(site.script),
            "state": site.plugin.state,
            "version": site.plugin.version,
            "current_version": __version__,
            "stale": site.plugin.stale,
            "slurm_conf": str(site.conf),
            "conf_enables": site.conf_enables,
        },
        "jobs": found["jobs"],
        "store": {"url": store_name, "error": store_error},
    }


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s ago"


def _print(report: dict[str, Any]) -> None:
    from slurmopt.explain import format_time

    click.echo(f"mode:        {report['mode']}" + ("" if report["healthy"] else "  (not healthy)"))
    for why in report["reasons"]:
        click.echo(f"  why:       {why}")
    for warning in report["warnings"]:
        click.echo(f"  warning:   {warning}")
    daemon = report["daemon"]
    if daemon is not None:
        cycle = daemon["last_cycle_at"]
        took = "" if daemon["last_cycle_s"] is None else f", took {daemon['last_cycle_s']:.2f} s"
        click.echo(
            f"daemon:      {daemon['holder'] or 'unknown'} said {daemon['recorded_mode']} "
            f"{_ago(daemon['record_age_s'])}"
            + (f"; last cycle {format_time(cycle)}{took}" if cycle else "")
        )
    switch, lease = report["kill_switch"], report["lease"]
    if report["store"]["error"] is None:
        on = switch is not None and switch["on"]
        click.echo("kill switch: " + (f"on (by {switch['by']})" if on else "off"))
    if lease is not None:
        expiry = "expired" if lease["expired"] else f"expires in {lease['expires_in_s']:.0f} s"
        click.echo(f"lease:       {lease['holder']}, taken {_ago(lease['age_s'])}, {expiry}")
    elif report["store"]["error"] is None:
        click.echo("lease:       none (no daemon holds the enforcer lease)")
    beat = report["heartbeat"]
    written = "" if beat["holder"] is None else f" (written by {beat['holder']})"
    click.echo(f"heartbeat:   {beat['path']}: {beat['reason']}{written}")
    plugin = report["plugin"]
    if "error" in plugin:
        click.echo(f"plugin:      {plugin['error']}")
    else:
        about = [f"slurmopt {plugin['version']}"] if plugin["version"] else []
        about += ["stale"] if plugin["stale"] else []
        version = f" ({', '.join(about)})" if about else ""
        conf = {None: "not found", True: "enables it", False: "does not enable it"}
        click.echo(
            f"plugin:      {plugin['script']}: {plugin['state']}{version}; "
            f"{plugin['slurm_conf']} {conf[plugin['conf_enables']]}"
        )
    jobs = report["jobs"]
    if jobs is not None:
        click.echo(
            f"jobs:        {jobs['held']} held, {jobs['pinned']} pinned, "
            f"{jobs['waiting']} waiting ({jobs['left_to_slurm']} left to Slurm), "
            f"{jobs['by_state']['running']} running"
        )
    store = report["store"]
    click.echo(f"store:       {store['error'] or store['url']}")


@click.command("status")
@config_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def status(ctx: click.Context, config_path: str | None, db: str | None, as_json: bool) -> None:
    """Which mode slurmopt is in and why: the daemon, kill switch, lease, heartbeat, plugin, jobs.

    \b
    Exit codes:
      0  healthy in the mode asked (enforcing or standby with --enforce, else advisory)
      1  running but not as asked: degraded, disabled, unavailable, advisory
      3  no daemon running (no recent record) or the store cannot be read
    """
    report = status_report(resolve(ctx, config_path, {"db": db}), time.time())
    if as_json:
        emit_json(report)
    else:
        _print(report)
    if report["exit_code"] == 3:
        raise DaemonDown(f"{report['mode']}: {report['reasons'][0]}")
    if report["exit_code"]:
        raise NotHealthy(f"{report['mode']}: {'; '.join(report['reasons'])}")


__all__ = ["STALE_CYCLES", "Verdict", "judge", "stale_after", "status", "status_report"]
