"""The ansible role: syntax, ansible-lint's production profile, and a real run into a scratch root.

The real run uses ``connection: local`` with ``slurmopt_root`` set to a
temporary directory and ``slurmopt_install_venv: false`` (creating the
virtual environment would download every dependency; the pip task is
covered by the syntax check and lint).  It checks the files the role wrote
and that a second run changes nothing.

These tests need ansible-core and ansible-lint (the dev extra installs
them); without them they fail, never skip.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurmopt.config import read_config_file

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
INSTALL_HINT = "pip install 'ansible-core>=2.16' 'ansible-lint>=24' (in the dev extra)"


def tool(name: str) -> str:
    """The path of an ansible command, beside this Python or on PATH; fails when missing."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: {INSTALL_HINT}")
    return found


def ansible_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "ansible-home"
    home.mkdir(exist_ok=True)
    # An empty config, so no ansible.cfg of the machine or the working directory applies.
    config = home / "ansible.cfg"
    config.write_text("[defaults]\n")
    return {
        **os.environ,
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(home / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_CONFIG": str(config),
        "NO_COLOR": "1",
    }


def test_playbook_syntax(tmp_path: Path) -> None:
    result = subprocess.run(
        [tool("ansible-playbook"), "--syntax-check", "-i", "inventory.example.ini", "site.yml"],
        cwd=ANSIBLE,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_production_profile(tmp_path: Path) -> None:
    result = subprocess.run(
        [tool("ansible-lint"), "--offline", "--nocolor", "--profile", "production", "."],
        cwd=ANSIBLE,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Profile 'production' was required, and it passed" in result.stdout + result.stderr


def run_site(tmp_path: Path, root: Path, extra: dict[str, object]) -> str:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[slurmopt_controller]\nlocalhost ansible_connection=local\n\n"
        "[slurmopt_compute]\nlocalhost ansible_connection=local\n"
    )
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    variables = {
        "slurmopt_root": str(root),
        "slurmopt_install_venv": False,
        "slurmopt_user": user,
        "slurmopt_group": group,
        "slurmopt_file_owner": user,
        **extra,
    }
    extra_file = tmp_path / "vars.json"
    extra_file.write_text(json.dumps(variables))
    result = subprocess.run(
        [tool("ansible-playbook"), "-i", str(inventory), "-e", f"@{extra_file}",
         str(ANSIBLE / "site.yml")],
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result.stdout


def recap(output: str) -> dict[str, int]:
    match = re.search(r"^localhost\s*:\s*(.*)$", output, re.MULTILINE)
    assert match, output[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


def test_role_into_a_scratch_root_writes_the_files_and_is_idempotent(tmp_path: Path) -> None:
    from slurmopt.cli.health import node_agent

    root = tmp_path / "root"
    root.mkdir()
    extra: dict[str, object] = {
        "slurmopt_managed_partitions": ["gpu"],
        "slurmopt_extra_config": {"backfill_depth": 200, "metrics_port": 0},
        "slurmopt_node_agent_expected_gpus": 8,
        "slurmopt_rest_api": "v0.0.40",
        "slurmopt_rest_token_command": "scontrol token lifespan=3600",
    }
    first = run_site(tmp_path, root, extra)
    assert recap(first)["changed"] > 0
    assert recap(first)["failed"] == 0

    config = root / "etc/slurmopt/slurmopt.toml"
    values = read_config_file(config)  # slurmopt itself accepts what the template wrote
    assert values["enforce"] is False
    assert values["managed_partitions"] == ("gpu",)
    assert values["backfill_depth"] == 200 and values["metrics_port"] == 0
    assert values["db"] == "sqlite:////var/lib/slurmopt/slurmopt.db"
    assert values["rest_api"] == "v0.0.40" and values["rest_token_file"] == ""
    assert values["rest_token_command"] == "scontrol token lifespan=3600"
    assert config.stat().st_mode & 0o777 == 0o640
    assert (root / "etc/slurmopt").stat().st_mode & 0o777 == 0o750
    assert (root / "var/lib/slurmopt").is_dir()
    assert (root / "var/lib/slurmopt").stat().st_mode & 0o777 == 0o750

    units = root / "etc/systemd/system"
    for unit in ("slurmopt.service", "slurmopt-node-agent.service"):
        assert (units / unit).read_text() == (REPO / "systemd" / unit).read_text()

    env_text = (root / "etc/default/slurmopt-node-agent").read_text()
    match = re.search(r'^SLURMOPT_NODE_AGENT_ARGS="(.*)"$', env_text, re.MULTILINE)
    assert match, env_text
    args = shlex.split(match.group(1))
    assert "--dry-run" in args  # advisory by default
    assert args[args.index("--expected-gpus") + 1] == "8"
    ctx = node_agent.make_context("node-agent", args)  # the agent accepts every option
    assert ctx.params["max_drain_nodes"] == 4 and ctx.params["max_drain_share"] == 0.1

    check = root / "usr/local/sbin/slurmopt-healthcheck"
    assert os.access(check, os.X_OK)
    assert "node-agent --once" in check.read_text()
    subprocess.run(["bash", "-n", str(check)], check=True, timeout=30)
    # No venv was asked for, and nothing was written outside the scratch root.
    assert not (root / "opt").exists()

    second = run_site(tmp_path, root, extra)
    assert recap(second)["changed"] == 0, second[-3000:]
