"""``slurmopt config show``: the file found, the places tried, every value and its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmopt.cli import cli, main
from slurmopt.config import DEFAULT_CONFIG_PATH, config_keys


def slurm_etc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurmopt_toml: str) -> Path:
    """``tmp_path/etc`` as the Slurm config directory (named by SLURM_CONF only) with slurmopt.toml.

    The variables that would name another config or override its values are unset.
    """
    for var in ("SLURMOPT_CONFIG", "SLURMOPT_DB", "SLURMOPT_ENFORCE", "SLURMOPT_INTERVAL"):
        monkeypatch.delenv(var, raising=False)
    directory = tmp_path / "etc"
    directory.mkdir()
    (directory / "slurmopt.toml").write_text(slurmopt_toml)
    monkeypatch.setenv("SLURM_CONF", str(directory / "slurm.conf"))
    return directory


@pytest.fixture
def etc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return slurm_etc(tmp_path, monkeypatch, "enforce = true\ninterval_s = 2\n")


def test_json_names_the_file_the_search_and_each_source(
    etc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURMOPT_DB", "sqlite:////tmp/x.db")
    result = CliRunner().invoke(cli, ["config", "show", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    conf = str(etc / "slurmopt.toml")
    assert (doc["file"], doc["found_by"]) == (conf, "beside slurm.conf")
    assert doc["searched"] == [{"how": "beside slurm.conf", "path": conf, "found": True}]
    assert list(doc["values"]) == list(config_keys())
    assert doc["values"]["enforce"] == {"value": True, "source": f"file:{conf}"}
    assert doc["values"]["db"] == {"value": "sqlite:////tmp/x.db", "source": "env:SLURMOPT_DB"}
    assert doc["values"]["backfill_depth"]["source"] == "default"


def test_text_lists_the_search_and_every_key(etc: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text("backfill_depth = 7\n")
    result = CliRunner().invoke(cli, ["config", "show", "--config", str(other)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"config file: {other} (--config)"
    assert lines[1] == f"  searched --config: {other} (found)"
    depth = next(line for line in lines if line.startswith("backfill_depth "))
    assert depth.split() == ["backfill_depth", "7", f"file:{other}"]
    assert next(line for line in lines if line.startswith("enforce ")).split()[1:] == [
        "false",
        "default",
    ]


def test_no_file_anywhere_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURMOPT_CONFIG", raising=False)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    if Path(DEFAULT_CONFIG_PATH).exists():
        pytest.skip(f"{DEFAULT_CONFIG_PATH} exists on this host")
    result = CliRunner().invoke(cli, ["config", "show"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == [
        "config file: none",
        f"  searched beside slurm.conf: {tmp_path / 'slurmopt.toml'} (absent)",
    ]


def test_missing_config_file_is_one_line_and_exit_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no.toml"
    with pytest.raises(SystemExit) as info:
        main(["config", "show", "--config", str(missing)])
    assert info.value.code == 78
    assert capsys.readouterr().err.splitlines() == [
        f"slurmopt: {missing}: no such config file (from --config)"
    ]
