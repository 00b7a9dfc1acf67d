"""Every command reaches Slurm, the fabric and the store one way: ``--config`` and its options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import slurmopt.slurm
from slurmopt.cli import cli
from tests.unit.test_fragmentation_cli import SNAPSHOT

FABRICS = Path(__file__).resolve().parent.parent / "fixtures" / "fabric"


@pytest.fixture(autouse=True)
def _no_site_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("SLURMOPT_CONFIG", "SLURMOPT_DB", "SLURMOPT_BACKEND", "SLURMOPT_REST_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-slurm" / "slurm.conf"))


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slurmopt.toml"
    path.write_text(text)
    return path


def _refuse_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Slurm was asked although the config names a fabric file")

    monkeypatch.setattr(slurmopt.slurm, "connect", refuse)


@pytest.mark.parametrize("how", ["--config", "beside slurm.conf"])
def test_topology_show_uses_the_configs_fabric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    _refuse_slurm(monkeypatch)
    fabric = FABRICS / "fat-tree.yaml"
    etc = tmp_path / "etc"
    etc.mkdir()
    conf = etc / "slurmopt.toml"
    conf.write_text(f'fabric = "{fabric}"\n')
    argv = ["topology", "show", "--json"]
    if how == "--config":
        argv += ["--config", str(conf)]
    else:  # found with no option or variable but SLURM_CONF
        monkeypatch.setenv("SLURM_CONF", str(etc / "slurm.conf"))
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["source"] == f"fabric file {fabric}"


def test_fabric_option_wins_over_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse_slurm(monkeypatch)
    conf = _config(tmp_path, f'fabric = "{FABRICS / "fat-tree.yaml"}"\n')
    other = FABRICS / "service-node.conf"
    argv = ["topology", "show", "--config", str(conf), "--fabric", str(other), "--json"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["source"].endswith(str(other))


def test_fragmentation_uses_the_configs_backend_and_rest_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    class Client:
        name = "fake"

        def snapshot(self) -> Any:
            return SNAPSHOT

        def topology_text(self) -> None:
            return None

    def connect(backend: str = "cli", **options: Any) -> Client:
        calls.append((backend, options))
        return Client()

    monkeypatch.setattr(slurmopt.slurm, "connect", connect)
    conf = _config(tmp_path, 'backend = "rest"\nrest_url = "http://127.0.0.1:6820"\n')
    result = CliRunner().invoke(cli, ["fragmentation", "--config", str(conf), "--json"])
    assert result.exit_code == 0, result.output
    assert calls == [("rest", {"url": "http://127.0.0.1:6820"})]
    assert json.loads(result.output)["fabric_source"].startswith("flat")
    calls.clear()
    conf.write_text('backend = "rest"\nrest_api = "v0.0.40"\nrest_token_file = "/etc/jwt"\n')
    result = CliRunner().invoke(cli, ["fragmentation", "--config", str(conf), "--json"])
    assert result.exit_code == 0, result.output
    assert calls == [("rest", {"api_version": "v0.0.40", "token_file": "/etc/jwt"})]


def _options(command: click.Command, prefix: str = "") -> list[tuple[str, click.Option]]:
    out = [(f"{prefix}{command.name}", p) for p in command.params if isinstance(p, click.Option)]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            out += _options(sub, f"{prefix}{command.name} ")
    return out


def test_shared_options_have_one_name_and_metavar_everywhere() -> None:
    # simulate's --fabric is a spec (a file or a generator such as fat-tree:64:8), not the site's.
    expected = {"--config": ("config_path", "FILE"), "--db": ("db", "URL")}
    expected["--fabric"] = ("fabric_file", "FILE")
    seen = set()
    for where, option in _options(cli):
        for flag in option.opts:
            if flag in expected and not where.endswith(" simulate"):
                assert (option.name, option.metavar) == expected[flag], (where, flag)
                seen.add(flag)
    assert seen == set(expected)
