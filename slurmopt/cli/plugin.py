"""``slurmopt plugin``: install the Slurm job-submit plugin and show whether it is active.

``install`` writes ``job_submit.lua`` beside slurm.conf with the heartbeat
path and maximum age baked in, and says what slurm.conf needs; it edits
slurm.conf only when asked (``--edit-conf``), atomically and with a backup,
because slurm.conf is the site's file.  ``status`` reads slurm.conf, the
installed script and the heartbeat.  The text work is in
:mod:`slurmopt.plugin`; see ``docs/plugin.md``.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from slurmopt import __version__
from slurmopt.cli.common import emit_json
from slurmopt.cli.wiring import config_option
from slurmopt.config import load_config
from slurmopt.daemon.heartbeat import read_heartbeat
from slurmopt.errors import UsageError
from slurmopt.fsutil import atomic_write
from slurmopt.plugin import (
    SCRIPT_NAME,
    InstalledPlugin,
    baked_settings,
    conf_change,
    conf_enables_plugin,
    default_dest,
    format_seconds,
    installed_plugin,
    read_source,
    render_plugin,
    slurm_conf_path,
)

APPLY_HINT = "scontrol reconfigure"


@click.group("plugin")
def plugin() -> None:
    """The Slurm job-submit plugin that holds new GPU jobs for slurmopt."""


def _read_text(path: Path, what: str) -> str | None:
    """The file's text, None when it does not exist; UsageError when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def _write_or_fail(path: Path, text: str, mode: int) -> None:
    try:
        atomic_write(path, text, mode, errors="surrogateescape")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _backup(path: Path) -> Path:
    """Copy ``path`` to a timestamped ``.bak`` beside it (mode and times kept)."""
    stamp = time.strftime("%Y%m%d%H%M%S")
    backup = path.with_name(f"{path.name}.{stamp}.bak")
    serial = 1
    while backup.exists():  # never overwrite an earlier backup
        backup = path.with_name(f"{path.name}.{stamp}-{serial}.bak")
        serial += 1
    try:
        shutil.copy2(path, backup)
    except OSError as exc:
        raise UsageError(f"{backup}: cannot write the backup: {exc.strerror or exc}") from None
    return backup


@plugin.command("install")
@config_option
@click.option(
    "--dest",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of slurm.conf  [default: that of $SLURM_CONF, else /etc/slurm]",
)
@click.option(
    "--heartbeat",
    "heartbeat_path",
    default=None,
    help="Heartbeat file to bake in  [default: heartbeat_path from the config]",
)
@click.option(
    "--max-age",
    "max_age_s",
    type=float,
    default=None,
    help="Seconds after which the heartbeat is stale  [default: heartbeat_max_age_s]",
)
@click.option(
    "--edit-conf",
    is_flag=True,
    help="Also add JobSubmitPlugins=lua to slurm.conf (atomically, with a backup).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace a job_submit.lua that is not slurmopt's (a backup is kept).",
)
@click.option("--dry-run", is_flag=True, help="Print what would be done; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def install(
    config_path: str | None,
    dest: str | None,
    heartbeat_path: str | None,
    max_age_s: float | None,
    edit_conf: bool,
    force: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Write job_submit.lua beside slurm.conf; say (or, with --edit-conf, make) the conf change."""
    cfg = load_config(config_path)
    heartbeat = heartbeat_path or cfg.heartbeat_path
    max_age = cfg.heartbeat_max_age_s if max_age_s is None else max_age_s
    format_seconds(max_age)  # a bad --max-age fails before anything is read or written
    rendered = render_plugin(read_source(), heartbeat, max_age)
    dest_dir = Path(dest) if dest else default_dest()
    if not dest_dir.is_dir():
        raise UsageError(f"{dest_dir}: no such directory (--dest)")
    script = dest_dir / SCRIPT_NAME
    conf = slurm_conf_path(dest_dir)

    existing = _read_text(script, "the installed plugin")
    if existing is not None and baked_settings(existing) is None and not force:
        raise UsageError(
            f"{script} exists and is not slurmopt's plugin; merge it by hand or use --force"
        )
    conf_text = _read_text(conf, "slurm.conf")
    change = conf_change(conf_text) if conf_text is not None else None
    if edit_conf and conf_text is None:
        raise UsageError(f"{conf}: no such file; cannot --edit-conf")

    script_changed = existing != rendered
    script_backup: Path | None = None
    conf_backup: Path | None = None
    conf_edited = False
    if not dry_run:
        if existing is not None and script_changed and baked_settings(existing) is None:
            script_backup = _backup(script)
        if script_changed:
            _write_or_fail(script, rendered, 0o644)
        if edit_conf and change is not None and change.needed:
            conf_backup = _backup(conf)
            _write_or_fail(conf, change.text, conf.stat().st_mode & 0o7777)
            conf_edited = True

    report: dict[str, Any] = {
        "script": str(script),
        "heartbeat_path": heartbeat,
        "max_age_s": max_age,
        "dry_run": dry_run,
        "script_written": script_changed and not dry_run,
        "script_unchanged": not script_changed,
        "script_backup": str(script_backup) if script_backup else None,
        "slurm_conf": str(conf),
        "slurm_conf_found": conf_text is not None,
        "conf_line_before": change.before if change else None,
        "conf_line_after": change.after if change else "JobSubmitPlugins=lua",
        "conf_change_needed": change.needed if change else True,
        "conf_edited": conf_edited,
        "conf_backup": str(conf_backup) if conf_backup else None,
        "apply": APPLY_HINT,
    }
    if as_json:
        emit_json(report)
        return
    _print_install(report)


def _print_install(r: dict[str, Any]) -> None:
    verb = "would write" if r["dry_run"] and not r["script_unchanged"] else "wrote"
    if r["script_unchanged"]:
        verb = "unchanged"
    click.echo(
        f"{r['script']}: {verb} (heartbeat {r['heartbeat_path']}, "
        f"stale after {format_seconds(r['max_age_s'])} s)"
    )
    if r["script_backup"]:
        click.echo(f"previous script kept as {r['script_backup']}")
    conf = r["slurm_conf"]
    if not r["slurm_conf_found"]:
        click.echo(f"{conf}: not found; in the slurm.conf of this directory set:")
        click.echo(f"  {r['conf_line_after']}")
    elif not r["conf_change_needed"]:
        click.echo(f"{conf}: already enables it ({r['conf_line_before']})")
    elif r["conf_edited"]:
        click.echo(f"{conf}: edited, previous file kept as {r['conf_backup']}")
        if r["conf_line_before"]:
            click.echo(f"  - {r['conf_line_before']}")
        click.echo(f"  + {r['conf_line_after']}")
    else:
        click.echo(f"{conf}: change needed (not edited; --edit-conf does it):")
        if r["conf_line_before"]:
            click.echo(f"  - {r['conf_line_before']}")
        click.echo(f"  + {r['conf_line_after']}")
    if r["conf_change_needed"]:
        click.echo(f"then run `{APPLY_HINT}` on the controller to load the plugin")
    else:
        click.echo("slurmctld rereads job_submit.lua by itself when the file changes")


@dataclass(frozen=True, slots=True)
class Site:
    """The plugin as installed beside one slurm.conf (``conf_enables`` None: no slurm.conf)."""

    conf: Path
    conf_enables: bool | None
    script: Path
    plugin: InstalledPlugin


def read_site(dest_dir: Path) -> Site:
    """Read slurm.conf and job_submit.lua in ``dest_dir``; UsageError when one cannot be read."""
    script = dest_dir / SCRIPT_NAME
    conf = slurm_conf_path(dest_dir)
    conf_text = _read_text(conf, "slurm.conf")
    enables = None if conf_text is None else conf_enables_plugin(conf_text)
    found = installed_plugin(_read_text(script, "the installed plugin"), read_source())
    return Site(conf, enables, script, found)


@plugin.command("status")
@config_option
@click.option(
    "--dest",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of slurm.conf  [default: that of $SLURM_CONF, else /etc/slurm]",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def status(config_path: str | None, dest: str | None, as_json: bool) -> None:
    """Whether slurm.conf enables the plugin, what it has baked in, and the heartbeat state."""
    site = read_site(Path(dest) if dest else default_dest())
    script, conf, found = site.script, site.conf, site.plugin
    baked = found.baked
    if baked is not None and baked.rendered and baked.max_age_s is not None:
        heartbeat, max_age, source = baked.heartbeat_path, baked.max_age_s, "plugin"
    else:
        cfg = load_config(config_path)
        heartbeat, max_age, source = cfg.heartbeat_path, cfg.heartbeat_max_age_s, "config"
    beat = read_heartbeat(heartbeat, max_age_s=max_age)
    installed = found.state
    report: dict[str, Any] = {
        "slurm_conf": str(conf),
        "conf_enables": site.conf_enables,
        "script": str(script),
        "script_state": installed,
        "version": found.version,
        "current_version": __version__,
        "stale": found.stale,
        "heartbeat_path": heartbeat,
        "max_age_s": max_age,
        "settings_from": source,
        "heartbeat": {
            "fresh": beat.fresh,
            "enforcing": beat.enforcing,
            "reason": beat.reason,
            "age_s": beat.age_s,
            "partitions": list(beat.heartbeat.managed_partitions) if beat.heartbeat else [],
        },
    }
    if as_json:
        emit_json(report)
        return
    enables = {None: "not found", True: "enables JobSubmitPlugins=lua", False: "does not enable it"}
    click.echo(f"slurm.conf: {conf}: {enables[report['conf_enables']]}")
    version = f" (slurmopt {found.version})" if found.version else ""
    click.echo(f"plugin:     {script}: {installed}{version}")
    if found.stale:
        click.echo(f"stale:      {found.stale}; run `slurmopt plugin install` again")
    click.echo(
        f"heartbeat:  {heartbeat} (max age {format_seconds(max_age)} s, from {source}): "
        f"{beat.reason}"
    )
    if beat.heartbeat is not None and beat.heartbeat.managed_partitions:
        click.echo(f"partitions: {','.join(beat.heartbeat.managed_partitions)}")
    active = report["conf_enables"] and installed == "installed" and beat.enforcing
    click.echo("holding new GPU jobs: " + ("yes" if active else "no (jobs pass through)"))
