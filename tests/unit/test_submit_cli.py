"""``slurmopt submit`` end to end against a stand-in sbatch: verbatim pass-through, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmopt.cli import cli
from slurmopt.submit import NO_PLUGIN_WARNING

FAKE_SBATCH = """#!/bin/sh
# Records how it was called, then answers like sbatch would.
if [ "$*" = --version ]; then echo "slurm-wlm ${FAKE_VERSION:-22.05.8}"; exit 0; fi
python3 - "$@" <<'EOF'
import json, os, sys
json.dump({"argv": sys.argv[1:]}, open(os.environ["FAKE_RECORD"], "w"))
EOF
if [ -n "$FAKE_STDIN" ]; then cat > "$FAKE_STDIN"; fi
printf '%s' "$FAKE_STDOUT"
printf '%s' "$FAKE_STDERR" >&2
exit "${FAKE_RC:-0}"
"""

FAKE_SCONTROL = """#!/bin/sh
echo "Configuration data as of 2024-01-01T00:00:00"
echo "JobSubmitPlugins        = ${FAKE_PLUGINS:-(null)}"
"""


@pytest.fixture
def fake_slurm(tmp_path: Path) -> dict[str, str]:
    """A PATH whose sbatch and scontrol are stand-ins; returns the environment to run with."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("sbatch", FAKE_SBATCH), ("scontrol", FAKE_SCONTROL)):
        path = bindir / name
        path.write_text(body)
        path.chmod(0o755)
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH --comment 'from script'\nhostname\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURMOPT_"))}
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    env["FAKE_RECORD"] = str(tmp_path / "record.json")
    return env


def _run(
    args: list[str], env: dict[str, str], cwd: Path, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", "from slurmopt.cli import main; main()", "submit", *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def _recorded(env: dict[str, str]) -> list[str] | None:
    path = Path(env["FAKE_RECORD"])
    if not path.exists():
        return None
    argv: list[str] = json.loads(path.read_text())["argv"]
    return argv


def test_sbatch_output_and_exit_code_pass_through_verbatim(
    fake_slurm: dict[str, str], tmp_path: Path
) -> None:
    env = {
        **fake_slurm,
        "FAKE_STDOUT": "Submitted batch job 42\n",
        "FAKE_STDERR": "sbatch: error: something odd\r\nsecond line\n",
        "FAKE_RC": "3",
        "FAKE_PLUGINS": "lua",
    }
    proc = _run(["-p", "gpu", "job.sh", "x"], env, tmp_path)
    assert proc.returncode == 3
    assert proc.stdout == b"Submitted batch job 42\n"
    assert proc.stderr == b"sbatch: error: something odd\r\nsecond line\n"
    assert _recorded(env) == [
        "--comment=slurmopt:managed | from script",
        "-p",
        "gpu",
        "job.sh",
        "x",
    ]


def test_warning_only_when_the_cluster_has_no_plugin(
    fake_slurm: dict[str, str], tmp_path: Path
) -> None:
    proc = _run(["--parsable", "job.sh"], {**fake_slurm, "FAKE_STDOUT": "7\n"}, tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == b"7\n"
    assert proc.stderr.decode() == NO_PLUGIN_WARNING + "\n"
    proc = _run(["job.sh"], {**fake_slurm, "FAKE_PLUGINS": "job_submit/lua"}, tmp_path)
    assert proc.stderr == b""


def test_script_on_stdin_reaches_sbatch_unchanged(
    fake_slurm: dict[str, str], tmp_path: Path
) -> None:
    script = b"#!/bin/sh\n#SBATCH --comment piped\n#SOPT --preemptible\n\xff raw bytes\n"
    env = {**fake_slurm, "FAKE_STDIN": str(tmp_path / "stdin.out"), "FAKE_PLUGINS": "lua"}
    proc = _run(["--hold"], env, tmp_path, stdin=script)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "stdin.out").read_bytes() == script
    assert _recorded(env) == ["--comment=slurmopt:managed,preemptible | piped", "--hold"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--elastic", "4:2", "job.sh"], "slurmopt: --elastic MIN must not exceed MAX, got '4:2'"),
        (["--elastic=x", "job.sh"], "slurmopt: --elastic needs MIN:MAX (two whole numbers)"),
        (["--template", "big", "job.sh"], "slurmopt: unknown template 'big'"),
        (["--segment", "4", "job.sh"], "slurmopt: unknown sbatch option '--segment' for Slurm"),
        (["-N2", "-HY", "job.sh"], "slurmopt: unknown sbatch option '-Y' for Slurm 22.05"),
        (["--s", "4", "job.sh"], "slurmopt: ambiguous sbatch option '--s': --signal, "),
    ],
)
def test_own_bad_options_exit_2_with_one_line_and_no_sbatch(
    fake_slurm: dict[str, str], tmp_path: Path, args: list[str], message: str
) -> None:
    proc = _run(args, fake_slurm, tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(message)
    assert _recorded(fake_slurm) is None


def test_missing_sbatch_is_one_line(fake_slurm: dict[str, str], tmp_path: Path) -> None:
    env = {**fake_slurm, "SLURMOPT_SBATCH": str(tmp_path / "nowhere" / "sbatch")}
    proc = _run(["job.sh"], env, tmp_path)
    assert proc.returncode == 69
    assert proc.stderr.decode().splitlines()[-1].startswith("slurmopt: ")
    assert "not found" in proc.stderr.decode()


def test_help_is_slurmopts_and_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[object] = []
    monkeypatch.setattr("slurmopt.cli.submit.run_sbatch", lambda *a: called.append(a))
    result = CliRunner().invoke(cli, ["submit", "-p", "gpu", "--help"])
    assert result.exit_code == 0
    assert "--elastic MIN:MAX" in result.output
    assert "slurmopt:managed" in result.output
    assert called == []


def test_help_after_the_script_belongs_to_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[tuple[list[str], bytes | None]] = []
    monkeypatch.setattr(
        "slurmopt.cli.submit.run_sbatch", lambda args, data: called.append((list(args), data))
    )
    monkeypatch.setattr("slurmopt.cli.submit._plugin_missing", lambda: False)
    result = CliRunner().invoke(cli, ["submit", "--wrap", "true", "--", "x", "--help"])
    assert result.exit_code == 0, result.output
    assert called == [(["--comment=slurmopt:managed", "--wrap", "true", "--", "x", "--help"], None)]


def test_the_table_follows_the_sbatch_release(fake_slurm: dict[str, str], tmp_path: Path) -> None:
    env = {**fake_slurm, "FAKE_VERSION": "24.11.5", "FAKE_PLUGINS": "lua"}
    proc = _run(["--segment", "4", "job.sh", "--segment"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    comment = "--comment=slurmopt:managed | from script"
    assert _recorded(fake_slurm) == [comment, "--segment", "4", "job.sh", "--segment"]


def test_an_unknown_release_gets_the_newest_table_and_a_warning(
    fake_slurm: dict[str, str], tmp_path: Path
) -> None:
    env = {**fake_slurm, "FAKE_VERSION": "99.11.0", "FAKE_PLUGINS": "lua"}
    proc = _run(["--requeue=expedite", "job.sh"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.decode().splitlines() == [
        "slurmopt: warning: no sbatch option table for Slurm 99.11; "
        "reading the command line as sbatch 26.05 would"
    ]
    assert _recorded(fake_slurm) is not None
