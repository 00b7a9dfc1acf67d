"""The plugin's installation: rendering the script, reading it back, the slurm.conf change, CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurmopt import __version__
from slurmopt.cli import main as main_cli
from slurmopt.errors import UsageError
from slurmopt.plugin import (
    HEARTBEAT_PLACEHOLDER,
    MARKER,
    baked_settings,
    conf_change,
    conf_enables_plugin,
    default_dest,
    installed_plugin,
    main,
    merge_plugins,
    read_source,
    render_plugin,
    slurm_conf_path,
)
from slurmopt.tag import held_mark

LUA = next((shutil.which(n) for n in ("lua5.1", "lua5.3", "lua") if shutil.which(n)), None)


def test_render_bakes_path_and_age_in_once() -> None:
    out = render_plugin(read_source(), "/run/slurmopt/heartbeat", 30.0)
    assert '\nlocal HEARTBEAT_PATH = "/run/slurmopt/heartbeat"\n' in out
    assert '\nlocal MAX_AGE_S = math.min(tonumber("30") or 30, 3600)\n' in out
    assert "@SLURMOPT_" not in out
    assert MARKER in out


def test_render_round_trips_through_baked_settings() -> None:
    odd = '/srv/a "quoted" \\dir/heart beat'
    settings = baked_settings(render_plugin(read_source(), odd, 2.5))
    assert settings is not None and settings.rendered
    assert settings.heartbeat_path == odd
    assert settings.max_age_s == 2.5


def test_unrendered_source_is_recognised_but_not_rendered() -> None:
    settings = baked_settings(read_source())
    assert settings is not None
    assert settings.heartbeat_path == HEARTBEAT_PLACEHOLDER and not settings.rendered


def test_foreign_script_is_not_ours() -> None:
    assert baked_settings("function slurm_job_submit() return 0 end\n") is None


@pytest.mark.parametrize(
    ("path", "age", "message"),
    [
        ("relative/heartbeat", 10, "absolute"),
        ("/run/a\nb", 10, "one line"),
        ("/run/hb", 0, "positive"),
        ("/run/hb", float("nan"), "positive"),
    ],
)
def test_render_refuses_bad_settings(path: str, age: float, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        render_plugin(read_source(), path, age)


def test_render_refuses_a_source_without_its_placeholders() -> None:
    with pytest.raises(UsageError, match="exactly once"):
        render_plugin("local HEARTBEAT_PATH = 'x'\n", "/run/hb", 10)


@pytest.mark.parametrize(
    ("value", "merged"),
    [
        ("", "lua"),
        ("pbs", "pbs,lua"),
        ("pbs, all_partitions", "pbs,all_partitions,lua"),
        ("lua,pbs", "lua,pbs"),
        ("job_submit/lua", "job_submit/lua"),
    ],
)
def test_merge_plugins_adds_lua_once(value: str, merged: str) -> None:
    assert merge_plugins(value) == merged


def test_conf_without_the_key_gets_a_line_appended() -> None:
    change = conf_change("ClusterName=x\nSchedulerType=sched/backfill")
    assert change.needed and change.before is None
    assert change.text == "ClusterName=x\nSchedulerType=sched/backfill\nJobSubmitPlugins=lua\n"


def test_conf_key_is_merged_in_place_case_insensitively_keeping_comments() -> None:
    text = "A=1\n  jobsubmitplugins = pbs  # site policy\nB=2\n"
    change = conf_change(text)
    assert change.before == "  jobsubmitplugins = pbs  # site policy"
    assert change.after == "JobSubmitPlugins=pbs,lua # site policy"
    assert change.text == "A=1\nJobSubmitPlugins=pbs,lua # site policy\nB=2\n"


def test_conf_last_key_counts() -> None:
    text = "JobSubmitPlugins=lua\nJobSubmitPlugins=pbs\n"
    change = conf_change(text)
    assert change.needed and change.text == "JobSubmitPlugins=lua\nJobSubmitPlugins=pbs,lua\n"


def test_conf_that_enables_it_is_left_alone() -> None:
    text = "# JobSubmitPlugins=pbs\nJobSubmitPlugins=pbs,lua\n"
    change = conf_change(text)
    assert not change.needed and change.text == text
    assert conf_enables_plugin(text)
    assert not conf_enables_plugin("# JobSubmitPlugins=lua\n")


@pytest.mark.parametrize(
    ("comment", "held"),
    [
        ("slurmopt:managed,held", True),
        ("slurmopt:managed,preemptible,held | mine, held", True),
        ("slurmopt:managed | held", False),
        ("slurmopt:managed,preemptible", False),
        ("slurmopt:bogus,held", False),
        ("held", False),
        (None, False),
    ],
)
def test_held_mark_reads_only_the_tag(comment: str | None, held: bool) -> None:
    assert held_mark(comment) is held


def test_default_dest_follows_slurm_conf() -> None:
    assert default_dest({"SLURM_CONF": "/opt/slurm/etc/slurm.conf"}) == Path("/opt/slurm/etc")
    assert default_dest({}) == Path("/etc/slurm")


def test_slurm_conf_path_uses_slurm_conf_only_for_its_own_directory(tmp_path: Path) -> None:
    conf = tmp_path / "cluster.conf"
    assert slurm_conf_path(tmp_path, {"SLURM_CONF": str(conf)}) == conf
    assert slurm_conf_path(tmp_path / "x", {"SLURM_CONF": str(conf)}) == tmp_path / "x/slurm.conf"


def test_module_main_prints_the_rendered_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--heartbeat", "/run/hb", "--max-age", "10"]) == 0
    assert capsys.readouterr().out == render_plugin(read_source(), "/run/hb", 10)
    assert main(["--heartbeat", "rel", "--max-age", "10"]) == 2


# ------------------------------------------------------------------ CLI


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A slurm.conf directory named by $SLURM_CONF, and no slurmopt config anywhere."""
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nJobSubmitPlugins=pbs\n")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    monkeypatch.delenv("SLURMOPT_CONFIG", raising=False)
    cfg = tmp_path / "slurmopt.toml"
    cfg.write_text('heartbeat_path = "/run/test/hb"\nheartbeat_max_age_s = 7\n')
    return tmp_path


def _run(*args: str) -> tuple[int, str]:
    """Exit code and stdout+stderr, through the CLI's own error handling."""
    result = CliRunner().invoke(_main, list(args))
    return result.exit_code, result.output


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def _main(args: tuple[str, ...]) -> None:
    main_cli(list(args))


def test_install_writes_script_from_config_and_prints_the_conf_change(site: Path) -> None:
    code, out = _run("plugin", "install", "--config", str(site / "slurmopt.toml"))
    assert code == 0, out
    settings = baked_settings((site / "job_submit.lua").read_text())
    assert settings is not None and settings.heartbeat_path == "/run/test/hb"
    assert settings.max_age_s == 7
    assert "- JobSubmitPlugins=pbs" in out and "+ JobSubmitPlugins=pbs,lua" in out
    assert "scontrol reconfigure" in out
    assert (site / "slurm.conf").read_text() == "ClusterName=x\nJobSubmitPlugins=pbs\n"
    assert (site / "job_submit.lua").stat().st_mode & 0o777 == 0o644


def test_install_dry_run_writes_nothing(site: Path) -> None:
    code, out = _run("plugin", "install", "--heartbeat", "/run/hb", "--dry-run", "--edit-conf")
    assert code == 0, out
    assert not (site / "job_submit.lua").exists()
    assert sorted(p.name for p in site.iterdir()) == ["slurm.conf", "slurmopt.toml"]


def test_install_edit_conf_keeps_a_backup(site: Path) -> None:
    code, out = _run("plugin", "install", "--heartbeat", "/run/hb", "--edit-conf", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["conf_edited"] and report["conf_line_after"] == "JobSubmitPlugins=pbs,lua"
    assert (site / "slurm.conf").read_text() == "ClusterName=x\nJobSubmitPlugins=pbs,lua\n"
    assert Path(report["conf_backup"]).read_text() == "ClusterName=x\nJobSubmitPlugins=pbs\n"
    code, out = _run("plugin", "install", "--heartbeat", "/run/hb", "--edit-conf", "--json")
    again = json.loads(out)
    assert not again["conf_change_needed"] and again["conf_backup"] is None
    assert again["script_unchanged"]


def test_install_refuses_a_sites_own_script_unless_forced(site: Path) -> None:
    own = "function slurm_job_submit() return slurm.SUCCESS end\n"
    (site / "job_submit.lua").write_text(own)
    code, _ = _run("plugin", "install", "--heartbeat", "/run/hb")
    assert code == 2
    assert (site / "job_submit.lua").read_text() == own
    code, out = _run("plugin", "install", "--heartbeat", "/run/hb", "--force", "--json")
    assert code == 0
    assert Path(json.loads(out)["script_backup"]).read_text() == own


def test_install_missing_dest_is_a_usage_error(site: Path) -> None:
    assert _run("plugin", "install", "--dest", str(site / "nope"))[0] == 2


def test_status_reports_conf_script_and_heartbeat(site: Path) -> None:
    from slurmopt.daemon.heartbeat import write_heartbeat

    hb = site / "hb"
    _run("plugin", "install", "--heartbeat", str(hb), "--max-age", "30", "--edit-conf")
    code, out = _run("plugin", "status", "--json")
    report = json.loads(out)
    assert code == 0 and report["conf_enables"] is True
    assert report["script_state"] == "installed" and report["heartbeat_path"] == str(hb)
    assert report["heartbeat"]["reason"] == "missing" and not report["heartbeat"]["enforcing"]
    write_heartbeat(hb, enforce=True, managed_partitions=("gpu", "a100"))
    code, out = _run("plugin", "status")
    assert "fresh, enforcing" in out and "partitions: gpu,a100" in out
    assert "holding new GPU jobs: yes" in out


# ------------------------------------------------------------------ Lua syntax


@pytest.mark.skipif(LUA is None, reason="no Lua interpreter (apt-get install lua5.1)")
@pytest.mark.parametrize("rendered", [False, True])
def test_script_compiles(tmp_path: Path, rendered: bool) -> None:
    text = read_source()
    if rendered:
        text = render_plugin(text, '/run/odd "path"', 12.5)
    script = tmp_path / "job_submit.lua"
    script.write_text(text)
    assert LUA is not None
    proc = subprocess.run(
        [LUA, "-e", f"assert(loadfile({json.dumps(str(script))}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ version and staleness


def test_render_stamps_the_version_and_status_sees_it_current() -> None:
    out = render_plugin(read_source(), "/run/hb", 10, version="9.9")
    assert '\nlocal SLURMOPT_VERSION = "9.9"' in out
    settings = baked_settings(out)
    assert settings is not None and settings.version == "9.9"
    found = installed_plugin(out, read_source(), version="9.9")
    assert (found.state, found.version, found.stale) == ("installed", "9.9", None)


def test_an_older_or_edited_plugin_is_stale() -> None:
    source = read_source()
    older = installed_plugin(render_plugin(source, "/run/hb", 10, version="0.0.1"), source)
    assert older.stale is not None and "0.0.1" in older.stale
    unstamped = render_plugin(source, "/run/hb", 10).replace(
        f'local SLURMOPT_VERSION = "{__version__}"', 'local SLURMOPT_VERSION = "@SLURMOPT_VERSION@"'
    )
    assert "stamped no version" in (installed_plugin(unstamped, source).stale or "")
    edited = render_plugin(source, "/run/hb", 10) + "-- edited by hand\n"
    assert "differs" in (installed_plugin(edited, source).stale or "")
    assert installed_plugin(None, source).state == "missing"
    assert installed_plugin("return 0\n", source).state == "foreign"
    assert installed_plugin(source, source).state == "unrendered"


def test_status_says_when_the_installed_plugin_is_stale(site: Path) -> None:
    (site / "job_submit.lua").write_text(
        render_plugin(read_source(), str(site / "hb"), 30, version="0.0.1")
    )
    code, out = _run("plugin", "status", "--json")
    report = json.loads(out)
    assert code == 0
    assert (report["version"], report["current_version"]) == ("0.0.1", __version__)
    assert "0.0.1" in report["stale"]
    code, out = _run("plugin", "status")
    assert "stale:" in out and "slurmopt plugin install" in out
    _run("plugin", "install", "--heartbeat", str(site / "hb"), "--max-age", "30")
    assert json.loads(_run("plugin", "status", "--json")[1])["stale"] is None
