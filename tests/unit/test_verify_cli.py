"""``slurmopt verify`` against a fake Slurm client and a stand-in sbatch: output and exit codes."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import slurmopt.slurm
from slurmopt.cli import main
from slurmopt.errors import SlurmUnavailable
from slurmopt.fabric import Fabric
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_verify import FABRIC, document, measured, snapshot

RING = ["n1", "n2", "n9", "n10"]

FAKE_SBATCH = """#!{python}
# Records how it was called; answers as sbatch --parsable --wait would.
import json, os, re, sys, time
script = sys.stdin.read()
json.dump({{"argv": sys.argv[1:], "script": script,
           "rdzv_port": os.environ.get("SLURMOPT_RDZV_PORT")}},
          open(os.environ["FAKE_RECORD"], "w"))
sys.stderr.write(os.environ.get("FAKE_STDERR", ""))
if os.environ.get("FAKE_REFUSE"):
    sys.exit(1)
print("77", flush=True)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
with open(opts["output"].replace("%j", "77"), "w") as fh:
    fh.write("torchrun says hello\\nFAKE LAST LINE\\n")
if os.environ.get("FAKE_DOC"):
    out = re.search(r"--out (\\S+)", script).group(1)
    with open(out, "w") as fh:
        fh.write(open(os.environ["FAKE_DOC"]).read())
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""

FAKE_SCANCEL = """#!/bin/sh
echo "$@" >> "$FAKE_SCANCEL"
"""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A fake Slurm (client, fabric, sbatch, scancel); returns paths and the recorded calls."""
    calls: dict[str, Any] = {"error": None}

    def connect(backend: str = "cli", **options: Any) -> FakeSlurm:
        return FakeSlurm.from_snapshot(snapshot(), calls["error"])

    def load_fabric(**kwargs: Any) -> Fabric:
        calls["fabric"] = kwargs
        return FABRIC

    discover = types.ModuleType("slurmopt.fabric.discover")
    discover.load_fabric = load_fabric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "slurmopt.fabric.discover", discover)
    monkeypatch.setattr(slurmopt.slurm, "connect", connect, raising=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (
        ("sbatch", FAKE_SBATCH.format(python=sys.executable)),
        ("scancel", FAKE_SCANCEL),
    ):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURMOPT_SBATCH", raising=False)
    monkeypatch.delenv("SLURMOPT_RDZV_PORT", raising=False)
    for key in ("FAKE_STDERR", "FAKE_REFUSE", "FAKE_SLEEP", "FAKE_RC", "FAKE_DOC"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FAKE_RECORD", str(tmp_path / "sbatch.json"))
    monkeypatch.setenv("FAKE_SCANCEL", str(tmp_path / "scancel.txt"))
    calls.update(work=work, tmp=tmp_path)
    return calls


def with_document(monkeypatch: pytest.MonkeyPatch, tmp: Path, doc: dict[str, Any]) -> None:
    path = tmp / "doc.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("FAKE_DOC", str(path))


def sbatch_call(fake: dict[str, Any]) -> dict[str, Any] | None:
    path = fake["tmp"] / "sbatch.json"
    return json.loads(path.read_text()) if path.exists() else None


def run(
    capsys: pytest.CaptureFixture[str], fake: dict[str, Any], *argv: str
) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(["verify", "--workdir", str(fake["work"]), *argv])
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def test_healthy_run_passes_and_submits_the_benchmark(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_document(monkeypatch, fake["tmp"], document(RING, 22.0, measured(RING, {}, 23.0)))
    plot = fake["tmp"] / "bw.png"
    code, out, err = run(
        capsys, fake, "--rdzv-port", "29555", "--plot", str(plot), "--sbatch-arg=--time=20"
    )
    assert (code, err) == (0, "")
    assert "PASS: nothing flagged" in out
    assert "pair:n2+n9" in out and "256 MiB" in out
    assert "n1: NVML unavailable: no driver" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    call = sbatch_call(fake)
    assert call is not None
    argv = call["argv"]
    assert argv[:3] == ["--parsable", "--wait", argv[2]] and argv[2].startswith("--job-name=")
    name = argv[2].removeprefix("--job-name=")
    assert f"--output={fake['work']}/{name}-%j.out" in argv
    assert f"--chdir={fake['work']}" in argv
    assert "--nodelist=n[1-2,9-10]" in argv and "--nodes=4" in argv and "--exclusive" in argv
    assert "--gpus-per-node=1" in argv
    assert argv[-1] == "--time=20"  # the user's own arguments come last, and win
    script = call["script"]
    assert "--nnodes=4" in script and "--nproc-per-node=1" in script
    assert f"-m slurmopt.elastic.bench --out {fake['work']}/{name}.json" in script
    assert "--group 'pair:n1+n2=n[1-2]'" in script and "--group 'leaf:leaf2=n[9-10]'" in script
    assert call["rdzv_port"] == "29555"  # the option beats the environment


def test_json_report_and_a_slow_node_exit_1(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = {"pair:n1+n2": 4.0, "pair:n2+n9": 4.0}
    with_document(monkeypatch, fake["tmp"], document(RING, 8.0, measured(RING, slow, 23.0)))
    code, out, err = run(capsys, fake, "--json")
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("slurmopt: verify: ")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["passed"] is False
    assert doc["job"]["id"] == "77"
    assert doc["job"]["output"].endswith("-77.out")
    node_flags = [f for f in doc["flags"] if f["kind"] == "node"]
    assert [f["subject"] for f in node_flags] == ["n2"]


def test_nodelist_is_tested_as_given(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ring = ["n3", "n4", "n5"]
    with_document(monkeypatch, fake["tmp"], document(ring, 22.0, measured(ring, {}, 23.0)))
    code, out, _ = run(capsys, fake, "--nodelist", "n[3-5]", "--json", "-p", "gpu")
    assert code == 0
    call = sbatch_call(fake)
    assert call is not None
    assert "--nodelist=n[3-5]" in call["argv"] and "--nodes=3" in call["argv"]
    assert "--partition=gpu" in call["argv"]
    assert json.loads(out)["nodes"] == ring


def test_sbatch_refusal_passes_its_words_through(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    words = "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    monkeypatch.setenv("FAKE_STDERR", words)
    monkeypatch.setenv("FAKE_REFUSE", "1")
    code, out, err = run(capsys, fake)
    assert code == 69
    assert out == ""
    assert err.startswith(words)
    assert err.removeprefix(words) == "slurmopt: sbatch did not submit the benchmark job (exit 1)\n"


def test_failed_job_names_its_output_and_last_line(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_RC", "1")
    code, _, err = run(capsys, fake)
    assert code == 69
    assert err.count("\n") == 1
    assert err.startswith("slurmopt: benchmark job 77 failed (exit 1); its output is ")
    assert err.rstrip().endswith("(last line: FAKE LAST LINE)")


def test_a_job_that_writes_no_report_is_a_data_error(
    fake: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, fake)
    assert code == 65
    assert err.startswith("slurmopt: benchmark job 77 wrote no report to ")
    assert err.count("\n") == 1


def test_timeout_cancels_the_job(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_SLEEP", "60")
    code, _, err = run(capsys, fake, "--timeout", "2")
    assert code == 75
    assert "did not finish within 2 s" in err and err.count("\n") == 1
    cancelled = (fake["tmp"] / "scancel.txt").read_text().split()
    assert cancelled == ["77"] or cancelled[0].startswith("--name=slurmopt-verify-")


def test_slurm_down_is_one_line_and_69(
    fake: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    fake["error"] = SlurmUnavailable("slurmctld unreachable: sinfo: error: cannot connect")
    code, out, err = run(capsys, fake)
    assert (code, out) == (69, "")
    assert err == "slurmopt: slurmctld unreachable: sinfo: error: cannot connect\n"
    assert sbatch_call(fake) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "1"], "--nodes must be at least 2, got 1"),
        (["--max-bytes", "1G"], "--max-bytes is at most 256 MiB"),
        (["--min-bytes", "lots"], "--min-bytes: cannot read 'lots'"),
        (["--min-bytes", "1M", "--max-bytes", "64K"], "--min-bytes must be 4 to --max-bytes"),
        (["--min-efficiency", "2"], "--min-efficiency must be 0 to 1, got 2"),
        (["--outlier", "0"], "--outlier must be above 0 and at most 1, got 0"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds"),
        (["--rdzv-port", "70000"], "--rdzv-port must be 1 to 65535"),
        (["--nodelist", "n[1-"], "--nodelist: bad hostlist"),
        (["--nodelist", "n1"], "--nodelist must name at least 2 nodes"),
        (["--nodes", "3", "--nodelist", "n[1-4]"], "--nodes 3 but --nodelist names 4 nodes"),
        (["--nodelist", "n1,zz[1-2]"], "--nodelist: not Slurm nodes: zz[1-2]"),
        (["--partition", "nope"], "unknown partition 'nope'"),
        (["--nodes", "40"], "32 idle node(s) in the cluster, --nodes 40 needs 40"),
        (["--bogus"], "No such option '--bogus'"),
    ],
)
def test_bad_options_exit_2_with_one_line_and_no_job(
    fake: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, fake, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("slurmopt: ")
    assert message in err
    assert sbatch_call(fake) is None


def test_workdir_must_exist(fake: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["verify", "--workdir", str(fake["tmp"] / "missing")])
    assert info.value.code == 2
    assert "not a directory" in capsys.readouterr().err
